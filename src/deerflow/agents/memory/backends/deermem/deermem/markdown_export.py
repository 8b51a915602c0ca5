"""A bucket as a folder of Markdown: `memory.json` (the summaries) and `facts/{id}.md`.

In the files engine the folder has the layout the memory is stored in; in the PostgreSQL engine
it is the way to read a memory as files. `read_export` gives the document `import_memory` takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    read_fact_file,
    render_fact,
)

__all__ = ["read_export", "write_export"]


def write_export(
    document: Mapping[str, Any], facts: Mapping[str, Mapping[str, Any]], destination: Path
) -> int:
    """Write the summaries of `document` and each of `facts` (stored records, by id) into
    `destination`; return the number of facts written."""
    destination.mkdir(parents=True, exist_ok=True)
    summaries = {key: document[key] for key in ("version", "user", "history")}
    (destination / "memory.json").write_text(json.dumps(summaries, indent=2, ensure_ascii=False))
    folder = destination / "facts"
    folder.mkdir(exist_ok=True)
    for fact_id, record in facts.items():
        (folder / f"{fact_id}.md").write_bytes(render_fact(dict(record)))
    return len(facts)


def read_export(source: Path) -> dict[str, Any]:
    """The memory document of a folder made by `write_export`, facts as whole records.

    Raises:
        ValueError: the folder is not an export, or a fact in it is invalid.
    """
    manifest = source / "memory.json"
    if not manifest.is_file():
        raise ValueError("not a DeerMem Markdown export (no memory.json)")
    try:
        document = json.loads(manifest.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"memory.json: unreadable: {exc}") from None
    # `write_export` writes a version; without one this is some other memory.json, and reading
    # it as an export without facts would empty the bucket. (A zip of an export of no facts
    # has no `facts` folder: zips keep files, not empty folders.)
    if not isinstance(document, dict) or "version" not in document:
        raise ValueError("not a DeerMem Markdown export (memory.json has no version)")
    paths = sorted((source / "facts").glob("*.md"))
    if odd := next((path for path in paths if not path.is_file()), None):
        raise ValueError(f"facts/{odd.name}: not a fact file")
    # The whole record, not the public dict: the front matter's unknown keys and the structured
    # source come back too (the fact's scope and bookkeeping are set anew).
    document["facts"] = [read_fact_file(path, shown=f"facts/{path.name}") for path in paths]
    return document
