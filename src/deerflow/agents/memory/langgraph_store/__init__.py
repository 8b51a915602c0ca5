"""A LangGraph `BaseStore` over DeerFlow Memory: graphs given `store=` and LangMem's memory tools
read and write the facts of the configured backend.

    from deerflow.agents.memory.langgraph_store import DeerFlowStore
    store = DeerFlowStore(memory)     # memory: a MemoryManager, e.g. build_memory_manager(...)
"""

from deerflow.agents.memory.langgraph_store.store import DEFAULT_ROOT, DeerFlowStore

__all__ = ["DEFAULT_ROOT", "DeerFlowStore"]
