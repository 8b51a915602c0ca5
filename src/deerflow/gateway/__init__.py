"""The HTTP gateway of DeerFlow (`deerflow serve`): the memory API, the web page, health checks."""

from deerflow.gateway.app import create_app

__all__ = ["create_app"]
