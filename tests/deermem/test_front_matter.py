"""Fact files read and written without PyYAML match PyYAML exactly; the rest goes to PyYAML."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import frontmatter
import pytest
import yaml
from frontmatter.default_handlers import YAMLHandler

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core import front_matter
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    FRONT_MATTER_ORDER,
    parse_fact,
    read_fact_file,
    render_fact,
)
from deerflow.agents.memory.backends.deermem.deermem.core.front_matter import (
    FrontMatterError,
    read_front_matter,
    write_front_matter,
)
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.deermem.storage_helpers import fact

KEYS = frozenset(FRONT_MATTER_ORDER)
# Text that YAML reads specially somewhere: indicators, YAML 1.1 words, numbers, timestamps,
# line breaks other than \n, characters PyYAML's reader refuses, and plain unicode.
HOSTILE = [
    "'", "''", '"', ":", ": ", " :", "#", " #", "- ", "-", "--- ", "...", "? ", "|", ">", "!",
    "!!str ", "&a ", "*a", "%", "@", "`", "[", "]", "{", "}", ",", "<<", "=", "~", "\\", "\\n",
    "yes", "No", "ON", "off", "y", "n", "true", "False", "null", "Null", "NULL",
    "0", "-1", "+1", "007", "0x1F", "0o17", "0b101", "1_000", "12:30", "1:20:30.5", "1.5",
    "-0.0", ".5", "1.", "1e5", "1.0e+5", ".inf", "-.Inf", ".NaN", "2026-12-01",
    "2026-12-01T10:00:00Z", "2026-1-2 3:04:05 +1", "fact_00ab", "__default__", "a@b.c",
    " ", "  ", "\n", "\n\n", "\t", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\ufeff", "\x00",
    "\x07", "\x7f", "\x9f", "\xa0", "\ufffe", "é", "用户喜欢喝茶", "🦌", "a\u0301", "x" * 90,
]  # fmt: skip


def hostile_text(rng: random.Random, *, nonblank: bool = False) -> str:
    text = "".join(
        rng.choice(HOSTILE) if rng.random() < 0.6 else rng.choice("abc XYZ 123")
        for _ in range(rng.randint(0, 6))
    )
    if nonblank and not text.strip():
        text += "x"
    return text


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.45:
        return hostile_text(rng)
    if roll < 0.55:
        return rng.choice([None, True, False])
    if roll < 0.65:
        return rng.choice([0, -7, 12, 10**20, rng.randint(-(10**6), 10**6)])
    if roll < 0.75:
        return rng.choice([0.0, -0.0, 0.5, 1e-05, 1e16, 1.5e300, float("inf"), rng.random()])
    if depth >= 2:
        return hostile_text(rng)
    if roll < 0.88:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        hostile_text(rng, nonblank=True): hostile_value(rng, depth + 1)
        for _ in range(rng.randint(0, 3))
    }


def hostile_record(rng: random.Random) -> dict[str, Any]:
    record = fact(
        hostile_text(rng, nonblank=True),
        category=rng.choice(["preference", "correction", hostile_text(rng)]),
        confidence=rng.choice([0.5, 1, 0, 1e-05, rng.random()]),
        createdAt=rng.choice(["2026-12-01T10:00:00Z", hostile_text(rng)]),
        source={"type": rng.choice(["manual", "conversation"]), "threadId": hostile_value(rng)},
        user_id=rng.choice(["alice@example.com", "123", "default", hostile_text(rng)]),
        revision=rng.randint(1, 5),
        status="active",
        schemaVersion=1,
    )
    optional = {
        "sourceError": hostile_text(rng),
        "expected_valid_days": rng.choice([None, 30, "30"]),
        "lastConfirmedAt": hostile_text(rng),
        "confirmationCount": rng.randint(0, 3),
        "consolidatedFrom": [f"fact_{rng.getrandbits(32):08x}" for _ in range(rng.randint(0, 2))],
        "topics": [hostile_text(rng) for _ in range(rng.randint(0, 3))],
        "event_time": hostile_value(rng),
    }
    record.update(rng.sample(sorted(optional.items()), rng.randint(0, len(optional))))
    if rng.random() < 0.25:
        record[hostile_text(rng, nonblank=True)] = hostile_value(rng)  # a key DeerMem does not know
    return record


def typed(value: Any) -> Any:
    """`value` with every scalar's type beside it: 1, 1.0 and True must not compare equal."""
    if isinstance(value, dict):
        return {typed(key): typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, repr(value))


def pyyaml(text: str) -> tuple[Any, ...]:
    """What python-frontmatter and PyYAML make of a file: (metadata, body), or the error type.
    PyYAML's safe loader, less aliases (`test_an_alias_is_refused`)."""
    try:
        post = frontmatter.loads(text, handler=front_matter._handler())
    except yaml.YAMLError as exc:
        return ("error", "YAMLError", str(exc))
    except (ValueError, TypeError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return typed(post.metadata), post.content


def ours(text: str) -> tuple[Any, ...]:
    try:
        meta, body = read_front_matter(text, KEYS)
    except FrontMatterError as exc:
        return ("error", "YAMLError", str(exc))
    except (ValueError, TypeError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return typed(meta), body


@pytest.fixture
def full_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text that went to python-frontmatter and PyYAML instead of the subset reader."""
    texts: list[str] = []
    full = front_matter._full

    def spy(text: str) -> tuple[dict[str, Any], str]:
        texts.append(text)
        return full(text)

    monkeypatch.setattr(front_matter, "_full", spy)
    return texts


def test_hostile_records_read_back_as_pyyaml_reads_them(full_reads: list[str]) -> None:
    rng = random.Random(20261203)
    trials = 3000
    for _ in range(trials):
        record = hostile_record(rng)
        text = render_fact(record).decode("utf-8")
        assert ours(text) == pyyaml(text), text
    read_by_subset = trials - len(full_reads)
    assert trials * 0.15 < read_by_subset < trials * 0.85, "both readers must be exercised"


def test_what_deermem_writes_for_ordinary_facts_needs_no_pyyaml(full_reads: list[str]) -> None:
    records = [
        fact("Prefers uv over pip", category="preference", confidence=0.9),
        fact(
            "Use pnpm, not npm",
            category="correction",
            confidence=1e-05,
            revision=3,
            status="active",
            user_id="alice@example.com",
            schemaVersion=1,
            source={"type": "conversation", "threadId": "5d1c8e4a-0f3b-4c2e-9a7d-2b6f1e0c9d8a"},
            sourceError="used npm: it said 'no' # twice",
            expected_valid_days=30,
            lastConfirmedAt="2026-12-02T08:00:00Z",
            confirmationCount=2,
            consolidatedFrom=["fact_0a", "fact_1b"],
            topics=["js", "用户喜欢喝茶", "1.5", "yes", "2fa"],
            event_time=None,
        ),
    ]
    for record in records:
        text = render_fact(record).decode("utf-8")
        assert ours(text) == pyyaml(text)
        meta = read_front_matter(text, KEYS)[0]
        assert meta["confidence"] == record["confidence"]
        assert meta["source"] == record["source"]
    assert full_reads == []


@pytest.mark.parametrize(
    "edit",
    [
        "lastConfirmedAt: 2026-12-01T10:00:00Z",  # unquoted: a timestamp
        "expected_valid_days: .5",
        "expected_valid_days: 0x1F",
        "expected_valid_days: 1_000",
        "expected_valid_days: 017",
        "expected_valid_days: +3",
        "status: yes",
        "status: ~",
        "status: Null",
        "status: 'active' # a comment",
        "status: active # a comment",
        "# a comment line",
        "pinned: true",  # a key DeerMem does not write is kept, through PyYAML
        "sourceError: |\n  first line\n  second line",
        "sourceError: >-\n  folded\n  text",
        "sourceError: a long text that goes on\n  on the next line",
        "sourceError: 'quoted over\n\n  two lines'",
        'sourceError: "double \\u00e9 quoted"',
        "sourceError: &anchor shared\nevent_time: *anchor",
        "event_time: {at: noon}",
        "topics: [a, b]",
        "topics:\n  - indented\n  - list",
        "topics:\n- a: mapping item",
        "topics:\n- - nested",
        "event_time:\n  at:\n    nested: deeper",
        "event_time:\n  yes: a bool key",
        "event_time:\n  at: noon\n  at: twice",
        "event_time:",
        "status: active\nstatus: twice",
        "status:  two spaces",
        "status: trailing space ",
        "status:\tactive",
        "status:active",
        "\nstatus: active",  # a blank line inside
        "status: !!str active",
        "status: ?odd",
        "status: -odd",
    ],
)
def test_hand_edits_outside_the_subset_are_read_by_pyyaml(full_reads: list[str], edit: str) -> None:
    written = render_fact(fact("Likes tea", user_id="carol", status="active")).decode("utf-8")
    text = written.replace("status: active\n", edit + "\n")
    assert ours(text) == pyyaml(text)
    assert full_reads == [text]


def test_crlf_line_endings_and_surrounding_blank_lines_read_as_pyyaml_reads_them(
    full_reads: list[str],
) -> None:
    text = "\n\n" + render_fact(fact("Likes tea")).decode("utf-8").replace("\n", "\r\n") + "\n"
    assert ours(text) == pyyaml(text)
    assert full_reads == []


def test_mutated_files_read_as_pyyaml_reads_them_or_fail_alike(full_reads: list[str]) -> None:
    """Random edits near the subset's edges: whatever the subset reader accepts is PyYAML's."""
    rng = random.Random(7)
    pieces = [*HOSTILE, "\n", "\n  ", "\n- ", ": ", "  ", "'", "x"]
    base = [render_fact(hostile_record(rng)).decode("utf-8") for _ in range(20)]
    trials, accepted = 4000, 0
    for _ in range(trials):
        text = rng.choice(base)
        end = text.index("\n---", 3)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(4, end)
            cut = rng.choice([0, 0, 1, 2])
            text = text[:at] + rng.choice(pieces) * rng.randint(0, 1) + text[at + cut :]
        before = len(full_reads)
        assert ours(text) == pyyaml(text), text
        accepted += len(full_reads) == before
    assert accepted > trials * 0.1, "the subset reader must be exercised"


def pyyaml_render(record: dict[str, Any]) -> bytes:
    """The fact file as python-frontmatter and PyYAML write it (what render_fact wrote before)."""
    meta = {key: record[key] for key in FRONT_MATTER_ORDER if key in record}
    meta.update((k, record[k]) for k in sorted(record) if k not in meta and k != "content")
    title = record["content"].strip().splitlines()[0].strip()[:160]
    post = frontmatter.Post(f"# {title}\n\n{record['content']}", **meta)
    return (frontmatter.dumps(post, sort_keys=False, allow_unicode=True) + "\n").encode("utf-8")


# Strings near the fast writer's edges: every character it takes, and the ones next to them.
WRITABLE_PIECES = [*"aZ09_@.:+/-", "---", "...", "yes", "null", "1e5", "0x1", "12:30",
                   "2026-12-01", "T10:00:00Z", "1_000", ".inf"]  # fmt: skip
OTHER_PIECES = ["<<", "=", "~", "'", " ", "#", "é", "!", "?", ","]


def writer_text(rng: random.Random) -> str:
    return "".join(
        rng.choice(OTHER_PIECES if rng.random() < 0.03 else WRITABLE_PIECES)
        for _ in range(rng.randint(0, 5))
    )


def test_records_are_written_byte_for_byte_as_pyyaml_writes_them() -> None:
    rng = random.Random(20261202)
    trials, fast = 4000, 0
    for trial in range(trials):
        record = hostile_record(rng)
        if trial % 2:  # values the fast writer mostly takes, to exercise its quoting rules
            record.update(
                status=writer_text(rng),
                sourceError=rng.choice([writer_text(rng), rng.random() * 10 ** rng.randint(-9, 9)]),
                topics=[writer_text(rng) for _ in range(rng.randint(0, 3))],
                source={"type": "manual", "threadId": rng.choice([None, writer_text(rng)])},
                category="preference",
                user_id="alice@example.com",
                createdAt="2026-12-01T10:00:00Z",
            )
            for key in ("lastConfirmedAt", "event_time", "expected_valid_days"):
                record.pop(key, None)
            for key in [k for k in record if k not in KEYS and k != "content"]:
                del record[key]
        fast += write_front_matter({k: v for k, v in record.items() if k != "content"}) is not None
        assert render_fact(record) == pyyaml_render(record), record
    assert trials * 0.3 < fast < trials * 0.9, "both writers must be exercised"


def test_what_deermem_writes_for_ordinary_facts_needs_no_pyyaml_writer() -> None:
    record = fact(
        "Use pnpm, not npm",
        category="correction",
        confidence=0.85,
        revision=3,
        status="active",
        user_id="alice@example.com",
        schemaVersion=1,
        source={"type": "conversation", "threadId": "5d1c8e4a-0f3b-4c2e-9a7d-2b6f1e0c9d8a"},
        consolidatedFrom=["fact_0a", "fact_1b"],
        expected_valid_days=30,
        event_time=None,
    )
    meta = {key: value for key, value in record.items() if key != "content"}
    assert write_front_matter(meta) is not None
    assert render_fact(record) == pyyaml_render(record)


def test_resolvers_and_boundary_are_pyyamls_and_python_frontmatters() -> None:
    theirs = {
        first: [(tag.rsplit(":", 1)[1], regexp.pattern) for tag, regexp in resolvers]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
        # "!&*": a resolver for documentation only (no plain scalar starts so); "": the empty
        # scalar, which the subset never reads
        if first not in ("!", "&", "*", "")
    }
    copied = {
        first: [(kind, pattern.pattern) for kind, pattern in resolvers]
        for first, resolvers in front_matter.RESOLVERS.items()
    }
    assert copied == theirs
    assert front_matter.BOUNDARY.pattern == YAMLHandler.FM_BOUNDARY.pattern


def test_unreadable_front_matter_keeps_its_message(tmp_path: Path) -> None:
    path = tmp_path / "fact_00.md"
    path.write_text("---\nid: fact_00\nstatus: [unclosed\n---\n\n# x\n\nx\n")
    with pytest.raises(MemoryCorruptionError, match=r"unreadable front matter: while parsing"):
        parse_fact(path.read_bytes(), path, user_id="u", bucket="__default__")
    with pytest.raises(ValueError, match=r"fact_00\.md: unreadable front matter"):
        read_fact_file(path)
    path.write_bytes(b"---\nid: fact_00\nstatus: \xff\n---\n")
    with pytest.raises(MemoryCorruptionError, match=r"unreadable front matter: 'utf-8' codec"):
        parse_fact(path.read_bytes(), path, user_id="u", bucket="__default__")


def test_a_hand_added_key_survives_an_update(tmp_path: Path) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    _, fact_id = manager.create_fact("Likes tea", user_id="u")
    path = next(tmp_path.glob(f"users/u/agents/__default__/facts/*/{fact_id}.md"))
    path.write_text(path.read_text().replace("status: active\n", "status: active\npinned: yes\n"))
    manager.reload_memory(user_id="u")
    manager.update_fact(fact_id, "Likes green tea", user_id="u")
    manager.close()
    assert "\npinned: true\n" in path.read_text()
    assert "Likes green tea" in path.read_text()


def test_empty_lists_and_mappings_are_new_objects_on_every_read(full_reads: list[str]) -> None:
    # Lines are read once and remembered; a remembered `[]` must not be shared between records.
    text = render_fact(fact("Likes tea", topics=[], source={})).decode("utf-8")
    first, second = read_front_matter(text, KEYS)[0], read_front_matter(text, KEYS)[0]
    first["topics"].append("changed")
    first["source"]["type"] = "changed"
    assert second["topics"] == []
    assert second["source"] == {}
    assert full_reads == []


def test_the_subset_refuses_exactly_what_pyyaml_calls_unprintable_and_the_other_breaks() -> None:
    """`_OUTSIDE` is written as the characters refused (fast to compile); checked against
    PyYAML's own definition over every code point."""
    every = "".join(map(chr, range(0x110000)))
    unprintable = set(yaml.reader.Reader.NON_PRINTABLE.findall(every))
    refused = set(front_matter._OUTSIDE.findall(every))
    assert refused == unprintable | set("\t\r\x85\u2028\u2029\ufeff")


def test_an_alias_is_refused_and_an_anchor_alone_is_read() -> None:
    """A few hundred bytes of nested aliases expand into gigabytes: a Markdown import's bomb."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join([f'*{chr(97 + n)}'] * 9)}]\n" for n in range(8)
    )
    with pytest.raises(FrontMatterError, match="aliases"):
        read_front_matter(f"---\nid: x\n{bomb}---\nbody", KEYS)
    assert read_front_matter("---\nid: x\nsourceError: &a kept\n---\nbody", KEYS)[0] == {
        "id": "x",
        "sourceError": "kept",
    }


def test_a_front_matter_nested_too_deeply_is_unreadable_not_a_crash() -> None:
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(FrontMatterError, match="nest"):
        read_front_matter(f"---\nid: x\nsourceError: {deep}\n---\nbody", KEYS)
