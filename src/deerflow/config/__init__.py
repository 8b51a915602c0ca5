"""The `config.yaml` of DeerFlow: schema, loading, interpolation and the runtime home."""

from deerflow.config.loader import (
    ConfigError,
    load_config,
    resolve_config_path,
    runtime_home,
)
from deerflow.config.schema import (
    AppConfig,
    AuthConfig,
    McpServerConfig,
    MemoryConfig,
    ModelConfig,
    ServerConfig,
    SummarizationConfig,
)

__all__ = [
    "AppConfig",
    "AuthConfig",
    "ConfigError",
    "McpServerConfig",
    "MemoryConfig",
    "ModelConfig",
    "ServerConfig",
    "SummarizationConfig",
    "load_config",
    "resolve_config_path",
    "runtime_home",
]
