"""DeerMem's PostgreSQL engine: one memory shared by several processes and hosts.

Every module here speaks SQL to one database; what lies above the engine seam (`engine.py`)
never imports it, so `psycopg` is needed only with `backend_config.storage: postgres`.
"""
