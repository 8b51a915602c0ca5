"""The conformance kit for memory backends. Needs pytest, nothing more.

    from deerflow.agents.memory.testing import MemoryManagerConformanceTests

Subclass `MemoryManagerConformanceTests`, return a fresh empty manager from a `manager` fixture,
and the standard behaviours of the contract run against your backend. Pin the deerflow version
you test against: a new release may add standard tests.
"""

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "deerflow.agents.memory.testing is a pytest kit: install pytest to use it "
        "(pip install pytest, or uv add --dev pytest)."
    ) from exc

# Before the imports below, so that the kit's assert statements explain their failures.
pytest.register_assert_rewrite(
    "deerflow.agents.memory.testing.conformance", "deerflow.agents.memory.testing.loop"
)

from deerflow.agents.memory.testing.conformance import (  # noqa: E402
    MESSAGES,
    OPTIONAL_OPERATIONS,
    Call,
    MemoryManagerConformanceTests,
    standard_test_problems,
)
from deerflow.agents.memory.testing.loop import (  # noqa: E402
    LoopReport,
    assert_does_not_block,
    measure_loop,
)

__all__ = [
    "MESSAGES",
    "OPTIONAL_OPERATIONS",
    "Call",
    "LoopReport",
    "MemoryManagerConformanceTests",
    "assert_does_not_block",
    "measure_loop",
    "standard_test_problems",
]
