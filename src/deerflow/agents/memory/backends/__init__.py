"""Built-in memory backends: one folder each, whose `__init__.py` exposes `MANAGER_CLASS`.

The folder name is the `memory.manager_class` value that selects it.
"""
