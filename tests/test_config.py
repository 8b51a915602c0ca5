"""config.yaml: discovery, interpolation, validation with dotted keys, typo warnings, the home."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from deerflow.agents.memory.backend_keys import STRICT_KEY
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.honcho.config import parse_config as honcho_config
from deerflow.agents.memory.backends.mem0.config import parse_config as mem0_config
from deerflow.agents.memory.backends.openviking.config import parse_settings as openviking_settings
from deerflow.config import (
    AuthConfig,
    ConfigError,
    McpServerConfig,
    MemoryConfig,
    ServerConfig,
    SummarizationConfig,
    load_config,
    runtime_home,
)
from deerflow.config import loader as config_loader
from deerflow.config.schema import LangfuseConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_default_file_means_defaults() -> None:
    config = load_config()
    assert config.models == []
    assert config.memory == MemoryConfig()
    assert config.memory.manager_class == "deermem"
    assert config.memory.shutdown_flush_timeout_seconds == 30


@pytest.mark.parametrize("how", ["flag", "env"])
def test_explicitly_named_file_must_exist(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "env":
        monkeypatch.setenv("DEER_FLOW_CONFIG", "nowhere.yaml")
    with pytest.raises(ConfigError, match=r"nowhere\.yaml: config file not found"):
        load_config("nowhere.yaml" if how == "flag" else None)


def test_config_path_comes_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "elsewhere.yaml", "memory:\n  mode: tool\n")
    write(tmp_path / "config.yaml", "memory:\n  mode: middleware\n")
    monkeypatch.setenv("DEER_FLOW_CONFIG", str(path))
    assert load_config().memory.mode == "tool"


def test_both_variable_spellings_and_escaped_dollar_are_interpolated(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config.yaml",
        """
models:
  - name: main
    use: pkg.mod:Model
    api_key: $KEY
    base_url: "https://${HOST}/v1"
    note: "costs $$5"
memory:
  manager_class: ${BACKEND}
""",
    )
    env = {"KEY": "k-123", "HOST": "llm.internal", "BACKEND": "noop"}
    config = load_config(path, environ=env)
    model = config.models[0].constructor_kwargs()
    assert model == {"api_key": "k-123", "base_url": "https://llm.internal/v1", "note": "costs $5"}
    assert config.memory.manager_class == "noop"


def test_unset_variable_names_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config.yaml",
        "memory:\n  backend_config:\n    model:\n      api_key: ${MISSING_KEY}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert (
        "memory.backend_config.model.api_key: environment variable MISSING_KEY is not set"
        in str(info.value)
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory:\n  mode: tools\n", r"memory\.mode: Input should be 'middleware' or 'tool'"),
        (
            "memory:\n  shutdown_flush_timeout_seconds: -1\n",
            r"memory\.shutdown_flush_timeout_seconds:",
        ),
        ("memory:\n  enabled: perhaps\n", r"memory\.enabled:"),
        ("memory:\n  backend_config: [1, 2]\n", r"memory\.backend_config:"),
        ("models:\n  - name: a\n    use: nothing\n", r"models\[0\]\.use: must be a class path"),
        ("models:\n  - use: a:B\n", r"models\[0\]\.name: Field required"),
        (
            "models:\n  - {name: a, use: 'x:Y'}\n  - {name: a, use: 'x:Z'}\n",
            r"models: .*repeated: a",
        ),
        ("memory: 3\n", r"memory: Input should be a valid dictionary"),
        (
            "summarization:\n  trigger_tokens: null\n",
            r"summarization: .*needs trigger_tokens or trigger_messages",
        ),
        ("summarization:\n  keep_messages: 0\n", r"summarization\.keep_messages:"),
        ("- just\n- a list\n", r"top level must be a mapping"),
        ("memory: [unclosed\n", r"not valid YAML"),
    ],
)
def test_invalid_values_fail_with_the_dotted_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "config.yaml", text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("memory: [unclosed\n", "line 2, column 1: "),
        ("memory:\n  mode: a: b\n", "line 2, column 10: "),
    ],
)
def test_a_yaml_syntax_error_is_one_line_naming_the_file_and_the_line(
    tmp_path: Path, text: str, where: str
) -> None:
    path = write(tmp_path / "config.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: not valid YAML: {where}")
    assert "\n" not in str(info.value)
    assert "<unicode string>" not in str(info.value)


def test_the_rejected_value_is_shown(tmp_path: Path) -> None:
    path = write(tmp_path / "config.yaml", "memory:\n  mode: tools\n")
    with pytest.raises(ConfigError, match=r"\(got 'tools'\)"):
        load_config(path)


def test_unknown_keys_warn_once_and_do_not_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_loader, "_warned_keys", set())
    path = write(
        tmp_path / "config.yaml",
        "memroy: {}\nmemory:\n  injection_enabledd: false\n  backend_config: {anything: 1}\n",
    )
    with caplog.at_level(logging.WARNING, logger="deerflow.config.loader"):
        config = load_config(path)
        load_config(path)
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("'memroy'" in w for w in warnings) == 1
    assert sum("'memory.injection_enabledd'" in w for w in warnings) == 1
    assert not any("anything" in w for w in warnings), "backend_config belongs to the backend"
    assert config.memory.injection_enabled is True


def test_typo_warnings_name_the_file_that_was_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_loader, "_warned_keys", set())
    path = write(tmp_path / "staging.yaml", "memroy: {}\n")
    with caplog.at_level(logging.WARNING, logger="deerflow.config.loader"):
        load_config(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: unknown key 'memroy' is ignored (a typo?)"
    ]


def test_model_keys_beyond_name_and_use_are_constructor_arguments(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config.yaml",
        "models:\n  - {name: a, use: 'x:Y', model: m, temperature: 0.2}\n",
    )
    config = load_config(path)
    assert config.models[0].constructor_kwargs() == {"model": "m", "temperature": 0.2}
    assert config.default_model() is config.models[0]


def test_runtime_home_defaults_to_dot_deer_flow_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEER_FLOW_HOME")
    assert runtime_home() == (tmp_path / ".deer-flow").resolve()
    monkeypatch.setenv("DEER_FLOW_HOME", "relative/home")
    assert runtime_home() == (tmp_path / "relative" / "home").resolve()


def test_example_config_is_valid_and_documents_every_memory_key() -> None:
    example = REPO_ROOT / "config.example.yaml"
    config = load_config(example, environ={"OPENAI_API_KEY": "sk-test"})
    backend_config = config.memory.backend_config
    assert config.memory == MemoryConfig(backend_config=backend_config)
    assert set(backend_config) == {*DeerMemConfig.model_fields, STRICT_KEY}
    assert parse_config({**backend_config, "storage_path": "/data"}).max_facts == 100
    memory_block = yaml.safe_load(example.read_text())["memory"]
    assert set(memory_block) == set(MemoryConfig.model_fields)
    assert config.summarization == SummarizationConfig()
    summarization_block = yaml.safe_load(example.read_text())["summarization"]
    assert set(summarization_block) == set(SummarizationConfig.model_fields)
    model_block = yaml.safe_load(example.read_text())["models"][0]
    assert {"name", "use"} <= set(model_block)
    [server] = yaml.safe_load(example.read_text())["mcp_servers"].values()
    assert set(server) == set(McpServerConfig.model_fields)
    assert re.search(r"\$NAME or \$\{NAME\}", example.read_text())


def test_the_example_shows_deermems_defaults_or_says_it_turns_a_feature_on() -> None:
    text = (REPO_ROOT / "config.example.yaml").read_text()
    example = yaml.safe_load(text)["memory"]["backend_config"]
    defaults = DeerMemConfig(storage_path="/data").model_dump(mode="json")
    lines = {line.split(":")[0].strip(): line for line in text.splitlines() if ":" in line}
    differing = {
        key
        for key, value in example.items()
        if key in defaults and key != "storage_path" and defaults[key] != value
    }
    assert differing == {
        "fact_dedup_enabled",
        "staleness_review_enabled",
        "retrieval_relevance_enabled",
    }
    for key in differing:
        assert defaults[key] is False
        assert "off by default, on here" in lines[key], key


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("{args: [x]}", "mcp_servers.files: a stdio server needs `command`"),
        ("{transport: sse}", "mcp_servers.files: a sse server needs `url`"),
        ("{transport: ftp, url: x}", "mcp_servers.files.transport: Input should be"),
    ],
)
def test_mcp_servers_are_validated_with_their_name(
    tmp_path: Path, server: str, message: str
) -> None:
    path = write(tmp_path / "config.yaml", f"mcp_servers:\n  files: {server}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_a_typo_inside_an_mcp_server_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_loader, "_warned_keys", set())
    path = write(tmp_path / "config.yaml", "mcp_servers:\n  files: {command: npx, arg: [x]}\n")
    with caplog.at_level(logging.WARNING, logger="deerflow.config.loader"):
        config = load_config(path)
    assert any("'mcp_servers.files.arg'" in r.getMessage() for r in caplog.records)
    assert config.mcp_servers["files"].connection() == {
        "transport": "stdio",
        "command": "npx",
        "args": [],
        "env": None,
        "cwd": None,
    }


def test_a_rule_about_a_whole_block_does_not_echo_the_block(tmp_path: Path) -> None:
    # The user saw the whole mcp server (its headers included) after "needs `url`".
    path = write(
        tmp_path / "config.yaml",
        "mcp_servers:\n  api: {transport: sse, headers: {X-Custom: plainvalue123}}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: mcp_servers.api: a sse server needs `url`"


@pytest.mark.parametrize(
    ("page", "parse", "backend_config"),
    [
        ("backend-honcho.md", honcho_config, {"base_ur": "http://h"}),
        (
            "backend-mem0.md",
            mem0_config,
            {"base_url": "http://h", "embedder": {"use": "a:B"}, "embedding_dims": 8},
        ),
        ("backend-openviking.md", openviking_settings, {"retrieval": {"topk": 3}}),
    ],
)
def test_each_backend_page_quotes_what_its_backend_says_of_an_unknown_key(
    page: str, parse: Callable[[dict[str, Any]], object], backend_config: dict[str, Any]
) -> None:
    # The pages said such a key was refused; it is ignored with a warning unless strict.
    text = " ".join((REPO_ROOT / "docs" / page).read_text(encoding="utf-8").split())
    config = {"storage_path": "/data", **backend_config, STRICT_KEY: True}
    with pytest.raises(ValueError, match="unknown key") as info:
        parse(config)
    said = str(info.value).split("; refused because")[0]
    assert f"`{said}`" in text
    assert "refused under `strict: true`" in text


def test_a_patterns_dir_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    # `config check` said valid, and every conversation's extraction then failed.
    patterns = tmp_path / "patterns"
    key = r"^memory\.backend_config\.patterns_dir: "
    with pytest.raises(ValueError, match=key + "signal patterns_dir .* is not a directory"):
        parse_config({"storage_path": str(tmp_path), "patterns_dir": str(patterns)})
    patterns.mkdir()
    (patterns / "goal.yaml").write_text("goal: ['(unclosed']\n", encoding="utf-8")
    with pytest.raises(ValueError, match=key + ".*goal\\.yaml.*invalid regex"):
        parse_config({"storage_path": str(tmp_path), "patterns_dir": str(patterns)})


def _shown(value: object) -> str:
    """A default as the reference writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _documented_range(field: FieldInfo) -> str | None:
    """The range as the reference writes it (`1..100`, `(0, 1]`, `> 0`, `≥ 0`), or None."""
    bounds = {
        name: getattr(item, name)
        for item in field.metadata
        for name in ("ge", "gt", "le")
        if hasattr(item, name)
    }
    low = next((f"{bounds[k]:g}" for k in ("ge", "gt") if bounds.get(k) is not None), None)
    high = f"{bounds['le']:g}" if bounds.get("le") is not None else None
    if low is None:
        return None
    if high is None:
        return f"> {low}" if bounds.get("gt") is not None else f"≥ {low}"
    return f"({low}, {high}]" if bounds.get("gt") is not None else f"{low}..{high}"


def _reference_rows(*sections: str) -> dict[str, tuple[str, str]]:
    """`key: (default, meaning)` of the tables in these `### ` sections of configuration.md."""
    text = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = {}
    for section in sections:
        start = text.index(f"### {section}\n") + 1
        end = re.compile(r"^##", re.M).search(text, start)
        table = text[start : end.start() if end else None]
        for match in re.finditer(r"^\| `([a-z_.]+)` \| (.*?) \| (.*) \|$", table, re.M):
            rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def _check_rows(model: type[BaseModel], rows: dict[str, tuple[str, str]], prefix: str = "") -> None:
    for name, field in model.model_fields.items():
        assert prefix + name in rows, name
        default, meaning = rows[prefix + name]
        if not field.is_required():
            value = field.get_default(call_default_factory=True)
            assert default == f"`{value if isinstance(value, dict) else _shown(value)}`", name
        documented_range = _documented_range(field)
        if documented_range is not None:
            assert documented_range in meaning, name
        if get_origin(field.annotation) is Literal:
            assert all(f"`{value}`" in default + meaning for value in get_args(field.annotation))


def test_the_reference_gives_every_deermem_key_with_its_default_and_range() -> None:
    # Before, the reference gave a few of DeerMem's keys; the ranges of most were nowhere.
    sections = ("DeerMem's keys", "DeerMem on PostgreSQL", "Hybrid retrieval's packages")
    _check_rows(DeerMemConfig, _reference_rows(*sections))


@pytest.mark.parametrize(
    ("section", "model", "prefix"),
    [
        ("`memory`", MemoryConfig, ""),
        ("`summarization`", SummarizationConfig, ""),
        ("`server`", ServerConfig, ""),
        ("`auth`", AuthConfig, ""),
        ("`tracing`", LangfuseConfig, "langfuse."),
    ],
)
def test_the_reference_gives_every_host_key_with_its_default_and_range(
    section: str, model: type[BaseModel], prefix: str
) -> None:
    # The summarisation triggers (> 0) and server.port (0..65535) had no documented range.
    _check_rows(model, _reference_rows(section), prefix)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"provder": "openai", "model": "gpt-4o-mini"}, r"model: unknown keys \['provder'\]"),
        ({"provider": "opnai"}, r"model: provider: unknown provider 'opnai'"),
        ({"model": "gpt-4o-mini"}, r"model: provider: required"),
    ],
)
def test_a_misspelt_extraction_model_stops_the_start(
    tmp_path: Path, model: dict[str, str], message: str
) -> None:
    # `config check` said valid, and every extraction then failed on the same typo.
    with pytest.raises(ValueError, match=r"^memory\.backend_config\." + message):
        parse_config({"storage_path": str(tmp_path), "model": model})


@pytest.mark.parametrize(
    "value", ["${DATABASE_URL:-postgresql://localhost/x}", "${unclosed", "${}"]
)
def test_a_dollar_brace_that_is_no_variable_is_refused(tmp_path: Path, value: str) -> None:
    # A shell default was kept as literal text: the URL became '${DATABASE_URL:-postgresql:…}'.
    path = write(tmp_path / "config.yaml", f"memory:\n  backend_config:\n    note: '{value}'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"DATABASE_URL": "postgresql://db/mem"})
    assert str(info.value).startswith(
        f"{path}: memory.backend_config.note: {value!r} is not a variable reference"
    )


def test_a_block_whose_entries_are_all_commented_out_means_its_defaults(tmp_path: Path) -> None:
    # The user saw "mcp_servers: Input should be a valid dictionary (got None)".
    text = "".join(
        f"{block}:\n  # commented out\n"
        for block in ("models", "mcp_servers", "memory", "server", "auth", "summarization")
    )
    path = write(tmp_path / "config.yaml", text + "tracing:\n  langfuse:\n")
    config = load_config(path)
    assert config.mcp_servers == {}
    assert config.models == []
    assert config.server.port == 8000
    assert config.tracing.langfuse.enabled is True
