"""The `backend_config` keys of the openviking backend (unknown keys: `parse_backend_config`)."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from deerflow.agents.memory.manager import parse_backend_config

__all__ = ["FailurePolicy", "OpenVikingSettings", "RetrievalSettings", "parse_settings"]

logger = logging.getLogger(__name__)

_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FailurePolicy(BaseModel):
    """What a failed remote call does: `fail_closed`/`raise` raise, the others log and go on."""

    model_config = ConfigDict(extra="forbid")

    read: Literal["fail_open", "fail_closed"] = "fail_open"
    write: Literal["log_and_drop", "raise"] = "log_and_drop"

    @field_validator("read", mode="before")
    @classmethod
    def _raise_is_fail_closed(cls, value: Any) -> Any:
        # The original DeerFlow spelled the strict read policy `raise`; both mean the same.
        return "fail_closed" if value == "raise" else value


class RetrievalSettings(BaseModel):
    """How `get_context` and `search` ask OpenViking for memories."""

    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(default=8, ge=1, le=100)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    max_injection_chars: int = Field(default=8000, ge=256, le=100_000)


class OpenVikingSettings(BaseModel):
    """Every key of `memory.backend_config` for `manager_class: openviking`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    storage_path: str = Field(min_length=1)  # the factory always adds it; cursors live under it
    base_url: str = "http://127.0.0.1:1933"
    owner_user_id: str = Field(default="default", min_length=1)
    api_key_env: str = "OPENVIKING_API_KEY"
    allow_insecure_http: bool = False
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # DeerFlow spells it max_seen_message_ids.
    max_seen_messages: int = Field(
        default=512,
        ge=16,
        le=100_000,
        validation_alias=AliasChoices("max_seen_messages", "max_seen_message_ids"),
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)

    @field_validator("owner_user_id")
    @classmethod
    def _owner_is_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a user")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _is_a_variable_name(cls, value: str) -> str:
        if not _ENV_NAME.fullmatch(value):
            raise ValueError("must be the name of an environment variable, not the key itself")
        return value

    @model_validator(mode="after")
    def _base_url_is_safe(self) -> OpenVikingSettings:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "base_url: must be an absolute http(s) URL such as http://127.0.0.1:1933"
            )
        if parts.username or parts.password:
            raise ValueError("base_url: must not carry credentials; use api_key_env")
        if parts.query or parts.fragment:
            raise ValueError("base_url: must not have a query or a fragment")
        if (
            parts.scheme == "http"
            and not self.allow_insecure_http
            and not _is_loopback(parts.hostname)
        ):
            # DeerFlow's documented block uses http://openviking:1933 (a container network), so
            # this starts; the risk is said once, at start.
            logger.warning(
                "memory.backend_config.base_url: plain http to %s sends the OpenViking API key "
                "and every remembered message unencrypted over the network; use https, or set "
                "allow_insecure_http: true once the network is trusted",
                parts.hostname,
            )
        return self

    def api_key(self, environ: Mapping[str, str] = os.environ) -> str:
        """The API key from the environment variable `api_key_env` names.

        Raises:
            ValueError: the variable is unset or empty. The message names the variable only.
        """
        key = environ.get(self.api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"memory.backend_config.api_key_env: environment variable {self.api_key_env} is "
                f"not set; it must hold the OpenViking API key of user {self.owner_user_id!r}"
            )
        return key


def parse_settings(backend_config: Mapping[str, Any]) -> OpenVikingSettings:
    """Validate `backend_config`; errors name each key as `memory.backend_config.<key>`."""
    return parse_backend_config(OpenVikingSettings, backend_config)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
