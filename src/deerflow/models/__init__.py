"""Chat models named in the `models:` block of config.yaml, and the offline fallback."""

from deerflow.models.factory import OFFLINE_MODEL, create_chat_model, model_entry, uses_local_model

__all__ = ["OFFLINE_MODEL", "create_chat_model", "model_entry", "uses_local_model"]
