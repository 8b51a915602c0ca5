"""One cold start, run by `deermem_bench` in a fresh interpreter: import, construct, answer.

    python benchmarks/cold_start_child.py STORAGE_PATH USER_ID [--warm] [--lexical]

Prints one JSON line when the first `get_context` answer is ready: wall-clock `started` (taken
as the first statement, for the parent to compare with when it launched this process) and the
import / construct / warm / first get_context durations in ms. Imports nothing else, so the
import time is the manager's own. `--warm` calls `warm()` (tokenizer and embedding model load)
before the answer; `--lexical` sets `retrieval_embeddings: false`.
"""

import time

STARTED = time.time()

import json  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    storage_path, user_id = sys.argv[1], sys.argv[2]
    warm = "--warm" in sys.argv[3:]
    t0 = time.perf_counter()
    from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager

    t1 = time.perf_counter()
    config = {"storage_path": storage_path, "max_facts": 500}
    if "--lexical" in sys.argv[3:]:
        config["retrieval_embeddings"] = False
    manager = DeerMemMemoryManager(backend_config=config)
    t2 = time.perf_counter()
    if warm:
        manager.warm()
    t3 = time.perf_counter()
    text = manager.get_context(user_id)
    t4 = time.perf_counter()
    answered = time.time()
    report = {
        "started": STARTED,
        "answered": answered,
        "import_ms": (t1 - t0) * 1000,
        "construct_ms": (t2 - t1) * 1000,
        "warm_ms": (t3 - t2) * 1000,
        "first_get_context_ms": (t4 - t3) * 1000,
        "chars": len(text),
    }
    print(json.dumps(report), flush=True)
    manager.close()


if __name__ == "__main__":
    main()
