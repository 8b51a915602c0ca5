"""The mem0 backend's own keys under `memory.backend_config`, one model per transport.

`transport` picks the model; a key it does not know (`base_url` under `transport: local`) is
warned about, or refused under `strict: true`, like every backend's (`parse_backend_config`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deerflow.agents.memory.manager import parse_backend_config
from deerflow.importing import import_object
from deerflow.redaction import redact_text

__all__ = [
    "ClassSpec",
    "FailurePolicy",
    "HttpConfig",
    "LocalConfig",
    "Mem0Config",
    "parse_config",
]

_PREFIX = "memory.backend_config"
# mem0 refuses entity ids with whitespace; refusing them here names the key.
_ENTITY_ID = r"^\S+$"


class FailurePolicy(BaseModel):
    """What a failed call to mem0 does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read: Literal["fail_open", "fail_closed"] = "fail_open"
    write: Literal["log_and_drop", "raise"] = "log_and_drop"


class ClassSpec(BaseModel):
    """A LangChain class to construct: `use: pkg.mod:Class`, every other key a constructor kwarg.

    The same shape as an entry of `models:`, without `name`.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    use: str = Field(min_length=1)

    def build(self, key: str) -> Any:
        """Import and construct the class.

        Raises:
            ValueError: naming `key` when the class cannot be imported or constructed; the
                message never shows a credential.
        """
        try:
            cls = import_object(self.use)
        except ImportError as exc:
            raise ValueError(f"{_PREFIX}.{key}.use: cannot load {self.use!r}: {exc}") from exc
        try:
            return cls(**(self.model_extra or {}))
        except Exception as exc:
            detail = redact_text(f"{type(exc).__name__}: {exc}")
            raise ValueError(f"{_PREFIX}.{key}: constructing {self.use} failed: {detail}") from exc


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    storage_path: str | None = None  # added by the factory
    default_agent_id: str = Field(default="__default__", pattern=_ENTITY_ID)
    infer: bool = True
    failure_policy: FailurePolicy = FailurePolicy()
    startup_policy: Literal["fail_fast", "tolerate"] = "fail_fast"
    max_injection_chars: int = Field(default=4000, gt=0)
    context_top_k: int = Field(default=20, ge=1, le=1000)
    score_threshold: float = Field(default=0.1, ge=0, le=1)
    list_limit: int = Field(default=1000, ge=1, le=100_000)


class LocalConfig(_Common):
    """`transport: local`: mem0's open-source engine in this process."""

    transport: Literal["local"] = "local"
    storage_path: str = Field(min_length=1)
    embedder: ClassSpec
    embedding_dims: int = Field(gt=0, le=65536)
    model: ClassSpec | None = None
    vector_store: dict[str, Any] | None = None

    @field_validator("vector_store")
    @classmethod
    def _mem0_block(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and not isinstance(value.get("provider"), str):
            raise ValueError("must be mem0's block: {provider: ..., config: {...}}")
        return value


class HttpConfig(_Common):
    """`transport: http`: the mem0 Platform, or a server that speaks its REST API."""

    transport: Literal["http"]
    base_url: str = Field(default="https://api.mem0.ai", pattern=r"^https?://[^\s/]+")
    api_key_env: str | None = Field(default="MEM0_API_KEY", min_length=1)
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)


Mem0Config = LocalConfig | HttpConfig


def parse_config(backend_config: dict[str, Any]) -> Mem0Config:
    """Validate `backend_config` with the model of its `transport` (default `local`).

    Raises:
        ValueError: naming each bad key as `memory.backend_config.<key>`.
    """
    transport = backend_config.get("transport", "local")
    model: type[LocalConfig | HttpConfig]
    if transport == "local":
        model = LocalConfig
    elif transport == "http":
        model = HttpConfig
    else:
        raise ValueError(f"{_PREFIX}.transport: must be 'local' or 'http' (got {transport!r})")
    return parse_backend_config(model, backend_config)
