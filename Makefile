# skillfleet: `make up` runs the whole system on this machine, `make test` runs every test.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAUNCHER := $(BIN)/skillfleet-launch

.PHONY: up test compose-test lint format bench screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,sandbox]"
	touch $(STAMP)

# Node scripts start through this: it sets their parent-death signal about 0.9 ms sooner than
# setpriv, which the node runner uses where it can't be built (no C compiler, not x86_64).
$(LAUNCHER): workers/runners/launch.c workers/runners/build-launcher.sh $(STAMP)
	sh workers/runners/build-launcher.sh $@

up: $(STAMP) $(LAUNCHER)
	$(BIN)/skillfleet db upgrade
	$(BIN)/skillfleet up

test: $(STAMP) $(LAUNCHER)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The docker-compose deployment, built without a registry and proven across containers.
compose-test: $(STAMP) $(LAUNCHER)
	PYTHON=$(BIN)/python bash deploy/compose-test.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) $(LAUNCHER)
	$(BIN)/python bench/skills.py
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/verification.py
	$(BIN)/python bench/runs.py --spark
	$(BIN)/python bench/streams.py

# A picture of every console page, taken in Chromium against a real fleet, into docs/img/.
screenshots: $(STAMP)
	SKILLFLEET_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/python -m pytest -q \
		tests/console/test_console_pages.py::test_screenshots_of_every_page

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
