# tether's recipes. Run them inside the project's virtual environment
# (README: `. .venv/bin/activate`).

# list the recipes
default:
    @just --list

# the demo, on SQLite: a checkout that fails, resumes, times out on time, survives a SIGKILL
demo *ARGS:
    python -m tether demo {{ARGS}}

# the whole suite: lint, type check, the docs site, every test (slow ones included)
test: lint typecheck docs-site
    python -m pytest

# the tests without the slow exploration ones
test-quick:
    python -m pytest -m "not slow"

# ruff: lint and formatting
lint:
    lint-imports
    ruff check src tests benchmarks examples docs/_hooks
    ruff format --check src tests benchmarks examples docs/_hooks

# mypy, strict
typecheck:
    mypy

# the benchmarks, printed as tables with ratios against a baseline
bench:
    python benchmarks/cancel_latency.py
    python benchmarks/step_overhead.py
    python benchmarks/store_throughput.py
    python benchmarks/resume_scaling.py
    python benchmarks/deterministic.py
    python benchmarks/leases.py
    python benchmarks/regression.py
    python benchmarks/memory.py
    python benchmarks/postgres.py
    python benchmarks/failover.py
    python benchmarks/claim_cost.py
    python benchmarks/chaos.py

# tether against its peers, in their own venv: regenerates docs/benchmarks.md, plots, README table
bench-peers *ARGS:
    python benchmarks/peers/run.py {{ARGS}}
    python benchmarks/peers/report.py

# format the code
fmt:
    ruff format src tests benchmarks examples docs/_hooks
    ruff check --fix src tests benchmarks examples docs/_hooks

# the docs are Markdown under docs/; their examples run as tests
docs:
    python -m pytest tests/test_docs.py -q

# the docs as a website in site/ (MkDocs): strict, so a warning (a broken link,
# a docstring griffe cannot parse, a page missing from the nav) fails the build
docs-site:
    NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir site
