"""DeerMem's inner package can ship on its own: it imports only the contract from deerflow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import deerflow.agents.memory.backends.deermem.deermem as inner
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager

ALLOWED = ("deerflow.agents.memory.manager", "deerflow.agents.memory.backends.deermem.deermem")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_inner_package_imports_nothing_of_deerflow_but_the_contract() -> None:
    package = Path(inner.__file__).parent
    offenders = {
        f"{path.relative_to(package)}: {module}"
        for path in package.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("deerflow") and not module.startswith(ALLOWED)
    }
    assert not offenders


def test_the_harness_never_imports_a_backend() -> None:
    cli = Path(inner.__file__).parents[5] / "cli"
    assert (cli / "app.py").is_file()
    offenders = {
        f"{path.name}: {module}"
        for path in cli.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("deerflow.agents.memory.backends")
    }
    assert not offenders


def test_reading_memory_does_not_load_langchain() -> None:
    """LangChain's model and message modules cost ~0.5 s to import; only extraction needs them."""
    code = (
        "import sys, tempfile\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        "m = DeerMemMemoryManager.from_config({'storage_path': tempfile.mkdtemp()})\n"
        "m.create_fact('likes tea', user_id='u')\n"
        "m.get_context('u')\n"
        "m.search('tea', user_id='u')\n"
        "print(sorted(n for n in sys.modules if n.startswith('langchain_core.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cold_read_imports_only_what_reading_needs(tmp_path: Path) -> None:
    """A cold start's first get_context pays for every import: writes, asyncio, the host's config,
    the tokenizer (when the store knows its lines' counts) and PyYAML (for the fact files DeerMem
    wrote) stay out of a process that reads; the retrieval index and query ranking stay out of
    it, and the index file unopened, until it searches. The search is lexical here: a hybrid
    one loads the embedding model, whose own imports (model2vec's) include asyncio and PyYAML."""
    from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager

    writer = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    writer.create_fact("likes tea", user_id="u")
    expected = writer.get_context("u")
    writer.close()
    index = tmp_path / ".retrieval" / "index.sqlite3"
    index.unlink()
    code = (
        "import os, sys\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        f"m = DeerMemMemoryManager.from_config({{'storage_path': {str(tmp_path)!r},"
        " 'retrieval_embeddings': False})\n"
        "print(repr(m.get_context('u')))\n"
        "inner = 'deerflow.agents.memory.backends.deermem.deermem.'\n"
        "searching = ('core.index', 'core.lexical', 'core.vectors', 'ranking', 'fusion')\n"
        "print(sorted(n.removeprefix(inner) for n in sys.modules\n"
        "             if n.removeprefix(inner) in searching))\n"
        f"print(os.path.exists({str(index)!r}))\n"
        "m.search('tea', user_id='u')\n"
        "m.close()\n"
        "unwanted = ('asyncio', 'deerflow.config', 'tiktoken', 'langchain_core', 'yaml',\n"
        "            'frontmatter')\n"
        "print(sorted(n.removeprefix(inner) for n in sys.modules\n"
        "             if n.startswith(unwanted) or n.startswith(inner + 'pipeline.')\n"
        "             or n.removeprefix(inner) in ('audit', 'history', 'imports', 'core.scrub')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [repr(expected), "[]", "False", "[]"]


def test_a_default_manager_that_only_reads_never_loads_numpy_or_model2vec(tmp_path: Path) -> None:
    """The embedding model is loaded by `warm()` or the first search or write, not at start."""
    writer = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    writer.create_fact("likes tea", user_id="u")
    writer.close()
    code = (
        "import sys\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        f"m = DeerMemMemoryManager.from_config({{'storage_path': {str(tmp_path)!r}}})\n"
        "m.get_context('u')\n"
        "m.get_memory(user_id='u')\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('numpy', 'model2vec')))\n"
        "m.search('tea', user_id='u')\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"]


def test_lexical_retrieval_never_loads_numpy_or_model2vec(tmp_path: Path) -> None:
    """`retrieval_embeddings: false` needs neither: relevance-aware injection included."""
    code = (
        "import sys\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        f"m = DeerMemMemoryManager.from_config({{'storage_path': {str(tmp_path)!r},"
        " 'retrieval_embeddings': False, 'retrieval_relevance_enabled': True,"
        " 'fact_dedup_enabled': True})\n"
        "m.create_fact('likes tea', user_id='u')\n"
        "m.get_context('u', query='tea')\n"
        "m.search('tea', user_id='u')\n"
        "m.reindex()\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('numpy', 'model2vec')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# Makes numpy and model2vec unimportable, as on a damaged install (both are base dependencies).
WITHOUT_EMBEDDINGS = (
    "import sys\n"
    "class Absent:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('numpy', 'model2vec'):\n"
    "            raise ModuleNotFoundError(name)\n"
    "sys.meta_path.insert(0, Absent())\n"
)


def test_without_numpy_the_default_is_refused_by_name_and_lexical_search_still_runs(
    tmp_path: Path,
) -> None:
    code = WITHOUT_EMBEDDINGS + (
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        "try:\n"
        f"    DeerMemMemoryManager.from_config({{'storage_path': {str(tmp_path)!r}}})\n"
        "except ValueError as exc:\n"
        "    print(' '.join(str(exc).split()))\n"
        f"m = DeerMemMemoryManager.from_config({{'storage_path': {str(tmp_path)!r},"
        " 'retrieval_embeddings': False})\n"
        "m.create_fact('likes tea', user_id='u')\n"
        "print(len(m.search('tea', user_id='u')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    error, found = out.stdout.strip().rsplit("\n", 1)
    assert found == "1"
    assert "memory.backend_config.retrieval_embeddings" in error
    assert "numpy, model2vec" in error
    assert "pip install 'deerflow-memory[embeddings]'" in error
    assert "set it to false" in error


def test_the_inner_package_has_no_import_cycle() -> None:
    """Dependencies point one way: no module imports, even lazily, one that imports it back."""
    package = Path(inner.__file__).parent
    modules = {
        ".".join([inner.__name__, *path.relative_to(package).with_suffix("").parts]).removesuffix(
            ".__init__"
        ): path
        for path in package.rglob("*.py")
    }
    graph = {
        module: {
            target
            for imported in imported_names(path)
            for target in (imported, imported.rpartition(".")[0])
            if target in modules and target != module
        }
        for module, path in modules.items()
    }
    cycles = [
        f"{module} -> {target} -> … -> {module}"
        for module in graph
        for target in graph[module]
        if module in reachable(graph, target)
    ]
    assert not cycles


def imported_names(path: Path) -> set[str]:
    """Every module and `from module import name` as `module.name` that `path` imports."""
    found = set(imported_modules(path))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


# What works on records above the engine seam (engine.py); the engines themselves are
# `core/` (files) and `postgres/`.
ABOVE_THE_SEAM = (
    "edits.py",
    "injection.py",
    "records.py",
    "markdown_export.py",
    "views.py",
    "context.py",
    "governance.py",
    "imports.py",
    "audit.py",
    "history.py",
    "ranking.py",
    "pipeline/writer.py",
    "pipeline/apply.py",
    "pipeline/extraction.py",
    "pipeline/prompt.py",
)
ENGINE_INTERNALS = (
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "deerflow.agents.memory.backends.deermem.deermem.postgres",
    "deerflow.agents.memory.backends.deermem.deermem.core.storage",
    "deerflow.agents.memory.backends.deermem.deermem.core.index",
    "deerflow.agents.memory.backends.deermem.deermem.core.file_engine",
    "deerflow.agents.memory.backends.deermem.deermem.core.journal",
    "deerflow.agents.memory.backends.deermem.deermem.core.sqlite",
)


def test_nothing_above_the_engine_seam_imports_an_engine() -> None:
    """The write pipeline, edits, views and the rest work on records: neither files, SQLite nor
    PostgreSQL (the storage type they name comes through `engine.py`)."""
    package = Path(inner.__file__).parent
    offenders = {
        f"{name}: {module}"
        for name in ABOVE_THE_SEAM
        for module in imported_modules(package / name)
        if module.startswith(ENGINE_INTERNALS)
    }
    assert not offenders
