"""Chat models named in the `models:` block of config.yaml."""

from deerflow.models.factory import create_chat_model

__all__ = ["create_chat_model"]
