"""Splitting a fact file into its front matter and body, fast for the files DeerMem writes.

PyYAML builds every node of a document in Python, about 60 us for a fact file: most of a full
reindex and of a cold start's first read. DeerMem's writer (`render_fact`: python-frontmatter,
PyYAML's block style) uses a small part of YAML, which `_subset` reads directly:

* lines `key: scalar` with a key the writer knows (`keys`: `FRONT_MATTER_ORDER`);
* `key:` then `  name: scalar` lines (a mapping of scalars) or `- scalar` lines (a list);
* scalars on one line: `'single quoted'`, `[]`, `{}`, or plain text. Plain text is resolved with
  PyYAML's own implicit resolvers (copied below, pinned by a test), and only the spellings PyYAML
  writes are built here: `true`, `false`, `null`, decimal integers, `0.5` or `1.0e-05` floats;
  any other bool, null, number, timestamp, `<<` or `=` is left to PyYAML.

Anything else (an unknown key, a comment, a blank line inside, a multi-line or double-quoted
scalar, an anchor, a tab, a character YAML refuses or reads as a line break, a duplicate key)
makes `_subset` give up, and the file is read by python-frontmatter and PyYAML exactly as before,
with the same errors. So the result is always PyYAML's; the tests compare both readers on random
hostile records and on hand edits.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from typing import Any, Final

__all__ = ["FrontMatterError", "read_front_matter", "write_front_matter"]

# python-frontmatter's YAMLHandler.FM_BOUNDARY (pinned by a test): the same split, without
# importing python-frontmatter and PyYAML when no file needs them.
BOUNDARY: Final = re.compile(r"^-{3,}\s*$", re.MULTILINE)

# Characters the subset does not take: the subset takes what PyYAML's reader calls printable
# (\n, \x20-\x7e, \xa0-\ud7ff, \ue000-\ufffd, \U00010000-\U0010ffff) less the line breaks other than
# \n (PyYAML also breaks lines at \r, \x85, \u2028, \u2029), the tab and the byte-order mark.
# Written as that complement, which compiles in 0.6 ms against 9.8 for the class of what it
# takes (`re` walks every code point of a class's ranges; docs/benchmarks.md).
_OUTSIDE: Final = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]"
)
_KEY_LINE: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?: (.*))?")
_SINGLE_QUOTED: Final = re.compile(r"'((?:[^']|'')*)'")
# A plain scalar may not start with an indicator (nor a space), nor hold ": " or " #".
_INDICATORS: Final = frozenset("-?:,[]{}#&*!|>'\"%@` ")

# PyYAML's implicit resolvers (yaml/resolver.py, YAML 1.1), by the first characters they apply to.
_BOOL: Final = re.compile(
    r"""^(?:yes|Yes|YES|no|No|NO
                    |true|True|TRUE|false|False|FALSE
                    |on|On|ON|off|Off|OFF)$""",
    re.X,
)
_FLOAT: Final = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_INT: Final = re.compile(
    r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+
                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
    re.X,
)
_MERGE: Final = re.compile(r"^(?:<<)$")
_NULL: Final = re.compile(
    r"""^(?: ~
                    |null|Null|NULL
                    | )$""",
    re.X,
)
_TIMESTAMP: Final = re.compile(
    r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
                    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
                     (?:[Tt]|[ \t]+)[0-9][0-9]?
                     :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
                     (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
    re.X,
)
_VALUE: Final = re.compile(r"^(?:=)$")
RESOLVERS: Final[dict[str, tuple[tuple[str, re.Pattern[str]], ...]]] = {
    **dict.fromkeys("yYtTfFoO", (("bool", _BOOL),)),
    **dict.fromkeys("nN", (("bool", _BOOL), ("null", _NULL))),
    **dict.fromkeys("-+", (("float", _FLOAT), ("int", _INT))),
    ".": (("float", _FLOAT),),
    **dict.fromkeys("0123456789", (("float", _FLOAT), ("int", _INT), ("timestamp", _TIMESTAMP))),
    "<": (("merge", _MERGE),),
    "~": (("null", _NULL),),
    "=": (("value", _VALUE),),
}

# Strings `write_front_matter` writes itself: no space (so PyYAML never folds them), no quote,
# no character that needs escaping; PyYAML writes them plain or in single quotes.
_WRITABLE: Final = re.compile(r"[A-Za-z0-9_@.:+/-]*")
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# The spellings PyYAML writes for each type; another spelling of the same type goes to PyYAML.
_CANONICAL_INT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
_CANONICAL_FLOAT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+(?:e[-+][0-9]+)?")
_WORDS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}


class FrontMatterError(ValueError):
    """The front matter is not readable YAML (the message is PyYAML's)."""


class _Outside(Exception):
    """The text is not in the subset `_subset` reads."""


def read_front_matter(text: str, keys: Collection[str]) -> tuple[dict[str, Any], str]:
    """`(metadata, body)` of a fact file, as `frontmatter.loads(text)` gives them.

    `keys` are the keys the writer writes; a file with another key is read by PyYAML.

    Raises:
        FrontMatterError: PyYAML cannot read the front matter.
    """
    text = text.replace("\r\n", "\n")
    stripped = text.strip()
    if BOUNDARY.match(stripped):
        parts = BOUNDARY.split(stripped, 2)
        if len(parts) == 3:
            try:
                return _subset(parts[1], keys), parts[2].strip()
            except _Outside:
                pass
    return _full(text)


def _full(text: str) -> tuple[dict[str, Any], str]:
    import frontmatter
    import yaml

    try:
        post = frontmatter.loads(text, handler=_handler())
    except yaml.YAMLError as exc:
        raise FrontMatterError(str(exc)) from exc
    except RecursionError:
        raise FrontMatterError("the front matter is nested too deeply") from None
    return post.metadata, post.content


@functools.cache
def _handler() -> Any:
    """python-frontmatter's YAML handler (its safe loader, in C when PyYAML has it), refusing
    aliases: a few hundred bytes of `&a [*b, *b, ...]` references expand into gigabytes
    (DeerMem never writes one; a Markdown import may bring one). The C scanner finds them
    before anything is built."""
    import yaml
    from frontmatter.default_handlers import SafeLoader, YAMLHandler

    class Handler(YAMLHandler):
        def load(self, fm: str, **kwargs: object) -> Any:
            if any(isinstance(token, yaml.AliasToken) for token in yaml.scan(fm, SafeLoader)):
                raise yaml.YAMLError("aliases (*name) are not allowed in a fact file")
            return yaml.load(fm, Loader=SafeLoader)

    return Handler()


def _subset(front_matter: str, keys: Collection[str]) -> dict[str, Any]:
    if _OUTSIDE.search(front_matter):
        raise _Outside
    lines = front_matter.strip("\n").split("\n")
    meta: dict[str, Any] = {}
    at = 0
    while at < len(lines):
        key, value = _entry(lines[at])
        if key not in keys or key in meta:
            raise _Outside
        at += 1
        if value is not _BLOCK:
            meta[key] = _fresh(value)
        elif at < len(lines) and lines[at].startswith("- "):
            items = []
            while at < len(lines) and lines[at].startswith("- "):
                items.append(_scalar(lines[at][2:]))
                at += 1
            meta[key] = items
        elif at < len(lines) and lines[at].startswith("  "):
            mapping: dict[str, Any] = {}
            while at < len(lines) and lines[at].startswith("  "):
                name, item = _entry(lines[at][2:])
                if name in mapping or item is _BLOCK or _resolve(name) != "str":
                    raise _Outside
                mapping[name] = _fresh(item)
                at += 1
            meta[key] = mapping
        else:
            raise _Outside  # `key:` with nothing under it: PyYAML writes `null`
    return meta


_BLOCK: Final = object()
"""`_entry`'s value of a `key:` line: a list or a mapping follows on the next lines."""


# Most lines recur from file to file (`category: preference`, `status: active`, the user id, the
# source's type): reading each spelling once saves about half of a reindex's parsing.
@functools.lru_cache(maxsize=4096)
def _entry(line: str) -> tuple[str, Any]:
    """`(key, value)` of a `key: scalar` or `key:` line (value `_BLOCK`).

    The value is `_cached_scalar`'s: pass it through `_fresh` before storing it.
    """
    match = _KEY_LINE.fullmatch(line)
    if match is None:
        raise _Outside
    if match[2] is None:
        return match[1], _BLOCK
    return match[1], _cached_scalar(match[2])


def _fresh(value: Any) -> Any:
    """A `_cached_scalar` value as the record holds it: a new list or dict for `[]` or `{}`."""
    return value() if value is list or value is dict else value


def _scalar(text: str) -> Any:
    """A scalar on one line, as PyYAML reads it."""
    return _fresh(_cached_scalar(text))


# Most values recur from file to file (category, status, scope, source, confidence), and a
# reindex reads 10^5 files: reading each spelling once saves about 30% of the parse.
@functools.lru_cache(maxsize=4096)
def _cached_scalar(text: str) -> Any:
    """A scalar on one line, immutable so that it can be cached: `[]` and `{}` are given as the
    types `list` and `dict`, for `_fresh` to build a new one (a caller may change it)."""
    if text in ("[]", "{}"):
        return list if text == "[]" else dict
    if text.startswith("'"):
        match = _SINGLE_QUOTED.fullmatch(text)
        if match is None:
            raise _Outside
        return match[1].replace("''", "'")
    if not text or text[-1] in " :" or ": " in text or " #" in text:
        raise _Outside
    kind = _resolve(text)
    if kind == "str" and text[0] not in _INDICATORS:
        return text
    if text in _WORDS:
        return _WORDS[text]
    if kind == "int" and _CANONICAL_INT.fullmatch(text):
        return int(text)
    if kind == "float" and _CANONICAL_FLOAT.fullmatch(text):
        return float(text)
    raise _Outside


def _resolve(plain: str) -> str:
    """The type PyYAML gives a plain scalar."""
    for kind, pattern in RESOLVERS.get(plain[0], ()):
        if pattern.match(plain):
            return kind
    return "str"


def write_front_matter(meta: dict[str, Any]) -> str | None:
    """The YAML python-frontmatter writes for `meta` (without the `---` lines), or None.

    Covers what DeerMem's own records hold: scalars, and lists or mappings of scalars, whose
    strings `_WRITABLE` takes. None means "not covered": the caller uses PyYAML, so the bytes
    are PyYAML's either way (a test compares both writers on random hostile records).
    """
    lines: list[str] = []
    for key, value in meta.items():
        if not _is_plain_key(key):
            return None
        if isinstance(value, list | dict) and value:
            lines.append(f"{key}:")
            if isinstance(value, list):
                items = [_write_scalar(item) for item in value]
                lines.extend(f"- {item}" for item in items)
            else:
                if not all(_is_plain_key(name) for name in value):
                    return None
                items = [_write_scalar(item) for item in value.values()]
                lines.extend(f"  {name}: {item}" for name, item in zip(value, items, strict=True))
            if None in items:
                return None
            continue
        text = "[]" if value == [] else "{}" if value == {} else _write_scalar(value)
        if text is None:
            return None
        lines.append(f"{key}: {text}")
    return "\n".join(lines)


def _is_plain_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_PLAIN_KEY.fullmatch(key)) and _resolve(key) == "str"


def _write_scalar(value: Any) -> str | None:
    """A scalar as PyYAML's SafeDumper writes it in block context, or None if not covered."""
    if value is None or isinstance(value, bool):
        return _WRITTEN_WORDS[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _write_float(value)
    if isinstance(value, str) and _WRITABLE.fullmatch(value):
        return value if _plain_allowed(value) else f"'{value}'"
    return None


_WRITTEN_WORDS: Final[dict[bool | None, str]] = {True: "true", False: "false", None: "null"}


def _write_float(value: float) -> str | None:
    # SafeRepresenter.represent_float, then a plain scalar when it reads back as a float.
    if value != value:
        return ".nan"
    if value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value).lower()
    if "." not in text and "e" in text:
        text = text.replace("e", ".0e", 1)
    return text if _resolve(text) == "float" else None


def _plain_allowed(text: str) -> bool:
    """Whether PyYAML's emitter writes this `_WRITABLE` string plain rather than quoted.

    Its rules, for strings without spaces or quotes: not empty, read back as a string, no
    document marker, no indicator first (`@`; `-`, `:` alone), no `:` last.
    """
    return (
        bool(text)
        and _resolve(text) == "str"
        and text[0] != "@"
        and text not in ("-", ":")
        and not text.endswith(":")
        and not text.startswith(("---", "..."))
    )
