"""The `deerflow` command line."""
