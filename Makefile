# `make demo` and `make test` work on a fresh machine: they install uv when it is missing,
# then build the locked environment.
# `python3 -m uv` works right after `pip install uv`, before any shell has rehashed its PATH.
UV ?= $(shell command -v uv 2>/dev/null || echo python3 -m uv)
# The tests exercise every adapter, so they run with the remote backends' extras installed, the
# `openai` provider that config.example.yaml names, and `langfuse` for the tracing test.
# `local` (the offline model, a 7-minute compile) is left out; `deerflow demo` and `deerflow chat`
# install it on first use when no model is configured. Syncs are --inexact so that they keep it.
TEST_EXTRAS = --extra mem0 --extra honcho --extra openviking --extra postgres --extra embeddings \
	--extra openai --extra langfuse
UV_RUN = $(UV) run --locked $(TEST_EXTRAS)

.PHONY: demo test lint typecheck format env docs docs-check cli-reference

env:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --locked --inexact $(TEST_EXTRAS)

demo: env
	$(UV_RUN) deerflow demo --config examples/demo.yaml

test: env lint typecheck docs-check
	$(UV_RUN) pytest

lint: env
	$(UV_RUN) ruff check src tests benchmarks
	$(UV_RUN) ruff format --check src tests benchmarks

# The benchmarks are type-checked too, with the bench group (matplotlib) installed for their plots.
typecheck: env
	$(UV_RUN) mypy
	$(UV_RUN) --group bench mypy benchmarks

# The docs site (mkdocs.yml): --strict fails on a link to a missing page or anchor.
# NO_MKDOCS_2_WARNING silences the theme's notice about its successor.
DOCS_RUN = NO_MKDOCS_2_WARNING=1 $(UV_RUN) --group docs mkdocs
docs-check: env
	$(DOCS_RUN) build --strict --site-dir site

# Regenerates the options reference at the end of docs/cli.md from the `deerflow` app.
cli-reference: env
	$(UV_RUN) python -m scripts.cli_reference

# Serves the site on loopback, rebuilt on each save.
docs: env
	$(DOCS_RUN) serve --dev-addr 127.0.0.1:8001

format: env
	$(UV_RUN) ruff format src tests benchmarks
	$(UV_RUN) ruff check --fix src tests benchmarks

# `make bench` measures DeerMem (benchmarks/deermem_bench.py, about 3 minutes on 2 cores) and
# writes benchmarks/results/deermem.{json,png,md}, then the HTTP gateway under 100 concurrent
# clients (benchmarks/gateway_bench.py, about a minute): benchmarks/results/gateway.{json,png,md},
# then the files and PostgreSQL engines side by side (benchmarks/engines_bench.py, an embedded
# PostgreSQL started for the run): benchmarks/results/engines.{json,png,md}, then one mixed load
# through 1 and 3 gateway replicas over one memory of each engine (benchmarks/replicas_bench.py):
# benchmarks/results/replicas.{json,png,md}.
# Their extra packages live in the `bench` group and the `postgres` extra.
.PHONY: bench
bench:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --locked --inexact $(TEST_EXTRAS) --group bench
	$(UV_RUN) --group bench python -m benchmarks.deermem_bench \
		--json benchmarks/results/deermem.json --png benchmarks/results/deermem.png \
		--markdown benchmarks/results/deermem.md
	$(UV_RUN) --group bench python -m benchmarks.gateway_bench \
		--json benchmarks/results/gateway.json --png benchmarks/results/gateway.png \
		--markdown benchmarks/results/gateway.md
	$(UV_RUN) --group bench python -m benchmarks.engines_bench \
		--json benchmarks/results/engines.json --png benchmarks/results/engines.png \
		--markdown benchmarks/results/engines.md
	$(UV_RUN) --group bench python -m benchmarks.replicas_bench --engine files --engine postgres \
		--json benchmarks/results/replicas.json --png benchmarks/results/replicas.png \
		--markdown benchmarks/results/replicas.md
