"""Regular expressions compiled on first use.

`re` compiles a character class by walking every code point of its ranges: the CJK classes
(tens of thousands of code points) take 2-4 ms each. Compiled at import, they made up about 7%
of a cold start whose text may never hold such a character (measured in docs/benchmarks.md,
"Cold start: regular expressions compiled on first use").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

__all__ = ["lazy_pattern"]


def lazy_pattern(source: str) -> Callable[[], re.Pattern[str]]:
    """A function returning `re.compile(source)`, compiled at its first call and kept."""
    return functools.cache(lambda: re.compile(source))
