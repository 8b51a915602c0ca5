"""DeerFlow memory: the backend-neutral contract, its factory and the built-in backends.

Import the public names from `deerflow.agents.memory.manager`.
"""
