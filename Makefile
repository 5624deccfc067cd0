# mindflow: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export MINDFLOW_HOME ?= $(CURDIR)/data
export DAGSTER_HOME ?= $(MINDFLOW_HOME)/dagster
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# A run over a range of daily partitions records one planned event per asset instead of one
# per day (mindflow.runner sets the same for the CLI): a failed run's days show as missing.
export DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS ?= true
# A range run's partition materializations reach the event log storage as one batch.
export DAGSTER_EVENT_BATCH_SIZE ?= 1000

.PHONY: install browser postgres demo demo-scale test dev serve bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first, so sentence-transformers does not pull a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[server,test,scale]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/mindflow demo

# The scale profile on this machine: PostgreSQL (the OS package, a cluster under data/scale) and an
# S3 server (moto) on free loopback ports, then the demo on them (mindflow/scale.py).
demo-scale: install postgres
	$(PY) -m mindflow.scale demo

# The browser test (tests/test_review_page.py) drives Debian's Chromium through its chromedriver.
# Installed here when missing and this user may (root, or sudo without a password); this step
# never fails the build: without them that one test is skipped and says why.
BROWSER_NOTE := note: Chromium or chromedriver missing; the /review browser test will be skipped. \
	Install them with: sudo apt-get install chromium chromium-driver
browser:
	@if command -v chromedriver >/dev/null 2>&1 && { command -v chromium || command -v chromium-browser \
		|| command -v google-chrome; } >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "$(BROWSER_NOTE)"; \
	elif [ "$$(id -u)" = 0 ]; then \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null; } || echo "$(BROWSER_NOTE)"; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		{ sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null; } || echo "$(BROWSER_NOTE)"; \
	else echo "$(BROWSER_NOTE)"; fi

# PostgreSQL for the scale profile's tests and `make demo-scale` (tests/test_scale_profile.py):
# installed like the browser when missing and this user may; otherwise those tests skip and say why.
PG_NOTE := note: PostgreSQL missing; the scale profile tests will be skipped. \
	Install it with: sudo apt-get install postgresql
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "$(PG_NOTE)"; \
	elif [ "$$(id -u)" = 0 ]; then \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } \
		|| echo "$(PG_NOTE)"; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		{ sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			postgresql >/dev/null; } || echo "$(PG_NOTE)"; \
	else echo "$(PG_NOTE)"; fi

test: install browser postgres
	$(PY) -m pytest -q

dev: install
	$(VENV)/bin/mindflow init
	@echo "mindflow: to make 'mindflow run' submit its runs to this UI (Runs tab, timeline, Re-execute):"
	@echo "  export MINDFLOW_DAGSTER_URL=http://127.0.0.1:3000"
	$(VENV)/bin/dagster dev -w workspace.yaml

serve: install
	$(VENV)/bin/mindflow serve

bench: install
	$(PY) bench/run_all.py

clean:
	-test -x $(PY) && $(PY) -m mindflow.scale down --purge
	rm -rf $(VENV) data/mindflow.duckdb* data/lance data/inbox data/events data/dagster data/workspace
