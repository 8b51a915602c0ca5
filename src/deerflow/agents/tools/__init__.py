"""Tools of the DeerFlow harness: the memory tools of tool mode."""
