"""Signal patterns: regexes per class, bundled in English and Chinese, overridable by a directory.

A pattern file maps class names to lists of regexes (YAML; single-quote them so backslashes stay
literal):

    correction:
      - '\\bthat(?:''s| is) wrong\\b'

The signal classes (`SIGNAL_CLASSES`) are searched for anywhere in a text, case-insensitively, with
`^` and `$` matching at line boundaries. The `trivial` class lists whole messages that carry nothing
("ok", "谢谢"): one of its patterns must match the entire text once surrounding whitespace and
trailing punctuation are removed.

A directory of pattern files overrides the bundled ones class by class: a class named in any of its
files gets exactly the patterns those files list (an empty list turns the class off), and the
classes it does not name keep the bundled patterns.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Final

import yaml

from deerflow.agents.memory.backends.deermem.deermem import pipeline

__all__ = ["SIGNAL_CLASSES", "TRIVIAL_CLASS", "SignalPatterns"]

SIGNAL_CLASSES: Final = (
    "correction",
    "reinforcement",
    "preference",
    "identity",
    "goal",
    "decision",
)
TRIVIAL_CLASS: Final = "trivial"
_CLASSES: Final = frozenset((*SIGNAL_CLASSES, TRIVIAL_CLASS))
_SUFFIXES: Final = (".yaml", ".yml")
_SIGNAL_FLAGS: Final = re.IGNORECASE | re.MULTILINE
_TRIVIAL_FLAGS: Final = re.IGNORECASE
# Tildes (ASCII and full-width) end casual replies, but Unicode files them as math symbols.
_TRAILING_SYMBOLS: Final = frozenset("~\uff5e")

_Patterns = tuple[re.Pattern[str], ...]


@dataclass(frozen=True, slots=True)
class SignalPatterns:
    """Compiled patterns: one tuple per signal class, plus the trivial-message patterns.

    Attributes:
        signals: Patterns per signal class; every class of `SIGNAL_CLASSES` is present.
        trivial: Full-match patterns of messages too trivial to learn from.
    """

    signals: Mapping[str, _Patterns]
    trivial: _Patterns

    @classmethod
    def load(cls, patterns_dir: Path | None = None) -> SignalPatterns:
        """The bundled patterns, with the classes named in `patterns_dir`'s files replaced.

        Args:
            patterns_dir: A directory of `*.yaml`/`*.yml` pattern files, or None for the bundled
                patterns alone (loaded once per process).

        Raises:
            ValueError: `patterns_dir` is not a directory, or one of its files is not valid YAML,
                names an unknown class or holds an invalid regex (the message names file and class).
        """
        if patterns_dir is None:
            return _bundled()
        if not patterns_dir.is_dir():
            raise ValueError(f"signal patterns_dir {str(patterns_dir)!r} is not a directory")
        bundled = _bundled()
        overrides = _read_files(_pattern_files(patterns_dir))
        return _build({TRIVIAL_CLASS: bundled.trivial, **bundled.signals, **overrides})

    def detect(self, texts: Iterable[str]) -> frozenset[str]:
        """The signal classes with a pattern found in at least one of `texts`."""
        found: set[str] = set()
        for text in texts:
            found.update(
                name
                for name, patterns in self.signals.items()
                if name not in found and any(pattern.search(text) for pattern in patterns)
            )
        return frozenset(found)

    def is_trivial(self, text: str) -> bool:
        """Whether `text`, without trailing punctuation, is a trivial message ("ok", "谢谢")."""
        core = _strip_trailing_punctuation(text.strip())
        return bool(core) and any(pattern.fullmatch(core) for pattern in self.trivial)


@cache
def _bundled() -> SignalPatterns:
    return _build(_read_files(_pattern_files(resources.files(pipeline) / "patterns")))


def _build(classes: Mapping[str, _Patterns]) -> SignalPatterns:
    signals = {name: classes.get(name, ()) for name in SIGNAL_CLASSES}
    return SignalPatterns(MappingProxyType(signals), classes.get(TRIVIAL_CLASS, ()))


def _pattern_files(directory: Traversable) -> list[Traversable]:
    """The pattern files of `directory`, sorted by name so that loading is deterministic."""
    entries = (entry for entry in directory.iterdir() if entry.name.endswith(_SUFFIXES))
    return sorted((entry for entry in entries if entry.is_file()), key=lambda entry: entry.name)


def _read_files(files: Iterable[Traversable]) -> dict[str, _Patterns]:
    """The classes named in `files`, each with the patterns of every file that names it."""
    merged: dict[str, _Patterns] = {}
    for source in files:
        for name, patterns in _read_file(source).items():
            merged[name] = merged.get(name, ()) + patterns
    return merged


def _read_file(source: Traversable) -> dict[str, _Patterns]:
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(
            f"signal pattern file {str(source)!r} is not readable YAML: {exc}"
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(
            f"signal pattern file {str(source)!r} must map class names to lists of regexes"
        )
    return {str(name): _compile(source, str(name), patterns) for name, patterns in data.items()}


def _compile(source: Traversable, name: str, patterns: object) -> _Patterns:
    where = f"signal pattern file {str(source)!r}, class {name!r}"
    if name not in _CLASSES:
        raise ValueError(f"{where}: unknown class (expected one of {sorted(_CLASSES)})")
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise ValueError(f"{where}: expected a list of non-empty regex strings")
    flags = _TRIVIAL_FLAGS if name == TRIVIAL_CLASS else _SIGNAL_FLAGS
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern, flags))
        except re.error as exc:
            raise ValueError(f"{where}: invalid regex {pattern!r}: {exc}") from exc
    return tuple(compiled)


def _strip_trailing_punctuation(text: str) -> str:
    end = len(text)
    while end and _is_trailing_noise(text[end - 1]):
        end -= 1
    return text[:end]


def _is_trailing_noise(char: str) -> bool:
    return char.isspace() or char in _TRAILING_SYMBOLS or unicodedata.category(char).startswith("P")
