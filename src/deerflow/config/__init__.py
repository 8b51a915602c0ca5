"""The `config.yaml` of DeerFlow: schema, loading, interpolation and the runtime home."""

from deerflow.config.loader import (
    ConfigError,
    load_config,
    resolve_config_path,
    runtime_home,
)
from deerflow.config.schema import (
    AppConfig,
    McpServerConfig,
    MemoryConfig,
    ModelConfig,
    SummarizationConfig,
)

__all__ = [
    "AppConfig",
    "ConfigError",
    "McpServerConfig",
    "MemoryConfig",
    "ModelConfig",
    "SummarizationConfig",
    "load_config",
    "resolve_config_path",
    "runtime_home",
]
