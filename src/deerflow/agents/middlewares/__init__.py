"""LangChain v1 agent middleware of the DeerFlow harness: memory and the summarisation flush."""
