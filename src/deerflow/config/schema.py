"""Pydantic models of `config.yaml`. `config.example.yaml` documents every key shown here.

Unknown keys are kept (`extra="allow"`) so that the loader can warn about them by name instead of
failing: a typo should be visible, not fatal.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AppConfig",
    "AuthConfig",
    "ConfigSection",
    "McpServerConfig",
    "MemoryConfig",
    "ModelConfig",
    "ServerConfig",
    "SummarizationConfig",
    "TracingConfig",
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


class SummarizationConfig(ConfigSection):
    """The `summarization:` block: when the agent compacts a long thread, and what it keeps.

    Summarisation runs before a model call once the thread reaches `trigger_tokens` (approximate
    count) or `trigger_messages`, whichever comes first; everything but the last `keep_messages`
    messages is replaced by a summary. With memory on, the replaced messages are handed to the
    backend's `add_nowait` first, so nothing compacted away is lost to memory.
    """

    enabled: bool = True
    trigger_tokens: int | None = Field(default=20000, gt=0)
    trigger_messages: int | None = Field(default=None, gt=0)
    keep_messages: int = Field(default=20, gt=0)

    @model_validator(mode="after")
    def _needs_a_trigger(self) -> SummarizationConfig:
        if self.enabled and self.trigger_tokens is None and self.trigger_messages is None:
            raise ValueError(
                "enabled summarisation needs trigger_tokens or trigger_messages "
                "(or set enabled: false)"
            )
        return self


class McpServerConfig(ConfigSection):
    """One MCP server whose tools the lead agent gets (through langchain-mcp-adapters)."""

    transport: Literal["stdio", "streamable_http", "sse"] = "stdio"
    command: str | None = Field(default=None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] | None = Field(
        default=None, description="stdio: its environment; None: a safe subset of ours."
    )
    cwd: str | None = Field(default=None, description="stdio: its working directory.")
    url: str | None = Field(default=None, description="streamable_http / sse: the endpoint.")
    headers: dict[str, str] | None = Field(default=None, description="HTTP headers to send.")

    @model_validator(mode="after")
    def _has_an_address(self) -> McpServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio server needs `command`")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"a {self.transport} server needs `url`")
        return self

    def connection(self) -> dict[str, Any]:
        """The connection mapping langchain-mcp-adapters takes for this server."""
        if self.transport == "stdio":
            stdio = {"command": self.command, "args": self.args, "env": self.env, "cwd": self.cwd}
            return {"transport": "stdio", **stdio}
        return {"transport": self.transport, "url": self.url, "headers": self.headers}


class LangfuseConfig(ConfigSection):
    """`tracing.langfuse:`; each key left out is read from LANGFUSE_PUBLIC_KEY, … instead."""

    enabled: bool = True
    public_key: str | None = None
    secret_key: str | None = None
    host: str | None = Field(default=None, description="Default: the SDK's (Langfuse Cloud).")


class _SectionsOnly(ConfigSection):
    """A block whose every key is itself a block (or a list of them)."""

    @model_validator(mode="before")
    @classmethod
    def _empty_block_is_default(cls, data: Any) -> Any:
        # `mcp_servers:` with its entries commented out is YAML null: it means the defaults.
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v is not None or k not in cls.model_fields}


class TracingConfig(_SectionsOnly):
    """`tracing:`, where memory's LLM calls are traced (the `langfuse` extra)."""

    langfuse: LangfuseConfig = Field(default_factory=LangfuseConfig)


class AppConfig(_SectionsOnly):
    """The whole `config.yaml`."""

    models: list[ModelConfig] = Field(default_factory=list)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    tracing: TracingConfig = Field(default_factory=TracingConfig)

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
