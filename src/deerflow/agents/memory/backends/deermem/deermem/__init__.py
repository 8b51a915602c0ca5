"""DeerMem: memory as files (JSON summaries, one Markdown file per fact) plus a SQLite FTS5 index.

This package imports nothing from `deerflow` except the contract module
(`deerflow.agents.memory.manager`), so it can be shipped on its own.
"""
