"""DeerMem's write pipeline, one module per concern.

Step 1 lives in `filtering` and `signals`: `filtering.prepare_conversation` turns a LangChain
conversation into the user/assistant turns worth extracting from, plus the signals (correction,
preference, …) found in the latest user turns; `signals.SignalPatterns` holds the regexes behind
those signals and the trivial-turn filter, bundled as `patterns/*.yaml` package data.
"""
