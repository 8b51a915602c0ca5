"""The HTTP gateway of DeerFlow (`deerflow serve`): the memory API, the web page, health checks.

The app is built by `deerflow.gateway.app.create_app`. This package module imports nothing, so
that `deerflow auth` (which only needs `deerflow.gateway.tokens`) does not load the chat route's
agent machinery.
"""
