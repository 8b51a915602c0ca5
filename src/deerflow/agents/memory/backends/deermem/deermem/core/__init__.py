"""DeerMem's storage engine: layout, fact files, journaled commits, the retrieval index."""
