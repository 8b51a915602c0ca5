"""The Honcho backend's own keys under `memory.backend_config`, with their defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deerflow.agents.memory.manager import parse_backend_config

__all__ = ["FailurePolicy", "HonchoConfig", "parse_config"]


class FailurePolicy(BaseModel):
    """What a failed call does: reads per the read policy, writes as mem0's `failure_policy`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read: Literal["fail_open", "fail_closed"] = "fail_open"
    write: Literal["log_and_drop", "raise"] = "log_and_drop"


class HonchoConfig(BaseModel):
    """Validated Honcho settings. Unknown keys are warned about (`parse_backend_config`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Added by the factory to every backend; Honcho keeps nothing on local disk.
    storage_path: str | None = None
    base_url: str = "http://localhost:8000"
    # The name of the variable holding the API key; None talks to a server without auth.
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    max_retries: int = Field(default=1, ge=0, le=10)
    # Starts every workspace id, so that several deployments can share one Honcho server.
    workspace_prefix: str = Field(default="deerflow", pattern=r"^[A-Za-z0-9-]{1,40}$")
    max_context_chars: int = Field(default=4000, gt=0)
    # Longer turns are sent as several consecutive messages; Honcho's own limit is its
    # MAX_MESSAGE_SIZE setting, so keep this at or below it.
    max_message_chars: int = Field(default=25000, gt=0)
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value.rstrip("/")

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key from the environment, or None when `api_key_env` is not set.

        Raises:
            ValueError: `api_key_env` names a variable that is unset or empty.
        """
        if self.api_key_env is None:
            return None
        key = (os.environ if environ is None else environ).get(self.api_key_env, "")
        if not key:
            raise ValueError(
                f"memory.backend_config.api_key_env: environment variable {self.api_key_env} "
                "is not set"
            )
        return key


def parse_config(backend_config: Mapping[str, Any]) -> HonchoConfig:
    """Validate `backend_config`.

    Raises:
        ValueError: naming each bad or unknown key as `memory.backend_config.<key>`.
    """
    return parse_backend_config(HonchoConfig, backend_config)
