"""Pydantic models of `config.yaml`. `config.example.yaml` documents every key shown here.

Unknown keys are kept (`extra="allow"`) so that the loader can warn about them by name instead of
failing: a typo should be visible, not fatal.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "AppConfig",
    "AuthConfig",
    "ConfigSection",
    "MemoryConfig",
    "ModelConfig",
    "ServerConfig",
]


class ConfigSection(BaseModel):
    """A block of config.yaml whose unknown keys are reported as likely typos."""

    model_config = ConfigDict(extra="allow")


class ModelConfig(BaseModel):
    """One chat model. Keys other than `name` and `use` go to the model class's constructor."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, description="How agents and backends refer to this model.")
    use: str = Field(
        description="The LangChain chat model class, as 'pkg.mod:Class' or 'pkg.mod.Class'."
    )

    @field_validator("use")
    @classmethod
    def _looks_like_a_class_path(cls, value: str) -> str:
        module, sep, attr = value.partition(":") if ":" in value else value.rpartition(".")
        if not sep or not module or not attr:
            raise ValueError("must be a class path like 'langchain_openai:ChatOpenAI'")
        return value

    def constructor_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for the model class (everything but `name` and `use`)."""
        return dict(self.model_extra or {})


class MemoryConfig(ConfigSection):
    """The host-side `memory:` block. `backend_config` belongs to the backend alone."""

    enabled: bool = True
    injection_enabled: bool = True
    mode: Literal["middleware", "tool"] = "middleware"
    manager_class: str = Field(default="deermem", min_length=1)
    shutdown_flush_timeout_seconds: float = Field(default=30.0, ge=0)
    injection_timeout_seconds: float = Field(default=5.0, gt=0)
    backend_config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("backend_config", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class ServerConfig(ConfigSection):
    """`server:`, where `deerflow serve` listens. The command line overrides each key."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8000, ge=0, le=65535)
    # With `auth.mode: none` anyone who reaches the port owns the memory, so a non-loopback
    # host needs this explicit consent.
    allow_remote: bool = False


class AuthConfig(ConfigSection):
    """`auth:`, who may use the gateway. `token`: bearer tokens from `deerflow auth add-token`."""

    mode: Literal["none", "token"] = "none"


class AppConfig(ConfigSection):
    """The whole `config.yaml`."""

    models: list[ModelConfig] = Field(default_factory=list)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        names = [model.name for model in models]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique; repeated: {', '.join(duplicates)}")
        return models

    def default_model(self) -> ModelConfig | None:
        """The first configured model, or None."""
        return self.models[0] if self.models else None
