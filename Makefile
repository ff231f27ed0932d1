# skillfleet: `make up` runs the whole system on this machine, `make test` runs every test.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAUNCHER := $(BIN)/skillfleet-launch
# Exact versions, with hashes, of what pyproject.toml's ranges resolve to: the application's
# (the images install it) and, for this checkout, with the dev and sandbox extras.
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
# The standard environment skills' scripts get (store/environment.py): the runner image and
# every node install exactly these versions.
ENV_LOCK := store/environment.lock

.PHONY: up standard-env test test-fast test-unfenced compose-test lint format bench screenshots clean lock

# Installed by uv (the lock's version), compiled as pip compiles them: half the time pip takes.
$(STAMP): pyproject.toml $(LOCK) $(DEV_LOCK) $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes -r $(DEV_LOCK)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@$(BIN)/pip check >/dev/null || { $(BIN)/pip check; \
		echo "$(DEV_LOCK) does not satisfy pyproject.toml: run make lock" >&2; exit 1; }
	touch $(STAMP)

# uv alone, at its locked version: the lock can be rewritten when it no longer installs.
$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "uv==$$(sed -n 's/^uv==\([^ ;]*\).*/\1/p' $(DEV_LOCK))"

# Rewrites both lock files from pyproject.toml, keeping every locked version the ranges still
# allow; LOCK_ARGS=--upgrade moves everything to the newest allowed, --upgrade-package NAME one.
LOCK_FLAGS := --universal --python-version 3.11 --generate-hashes --annotation-style line --quiet \
	--custom-compile-command "make lock" $(LOCK_ARGS)
lock: $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra sandbox $(LOCK_FLAGS) -o $(DEV_LOCK)
	$(BIN)/uv pip compile pyproject.toml -c $(DEV_LOCK) $(LOCK_FLAGS) -o $(LOCK)
	$(BIN)/python -m store.environment | $(BIN)/uv pip compile - --no-build $(LOCK_FLAGS) -o $(ENV_LOCK)

# Node scripts start through this: it sets their parent-death signal about 0.9 ms sooner than
# setpriv, which the node runner uses where it can't be built (no C compiler, not x86_64).
$(LAUNCHER): workers/runners/launch.c workers/runners/build-launcher.sh $(STAMP)
	sh workers/runners/build-launcher.sh $@

up: $(STAMP) $(LAUNCHER)
	$(BIN)/skillfleet db upgrade
	$(BIN)/skillfleet up

# Every tier (docs/operations.md, "Tests"). Test files are spread over TEST_PROCESSES
# processes, the longest first, in the order tests/conftest.py gives them; the Docker tier
# runs after them in one process, since a Spark worker's start removes the run containers it
# finds. PYTEST_ARGS=--databases=both runs each database test on both.
TEST_PROCESSES ?= 3
XDIST = -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder
# pytest's "no tests ran" (5) is no failure for a pass that PYTEST_ARGS left empty.
ANY = || [ $$? -eq 5 ]

# Node workers find the standard environment ready (built once per machine, then a check).
standard-env: $(STAMP)
	$(BIN)/skillfleet env build

# Bytecode caches on for the tests, whatever the shell says (PYTHONDONTWRITEBYTECODE=1 turns
# them off): a run starts some 300 Python processes, each of which would compile skillfleet's
# modules again, and every pytest process would rewrite every test module's asserts again
# (10 s of CPU each). They go to __pycache__, which git ignores.
test test-fast test-unfenced screenshots: export PYTHONDONTWRITEBYTECODE =

# The docker tier runs after the first pass, in one process: beside it, on two cores, its
# containers slowed the first pass by more than the tier's own time (docs/operations.md).
test: $(STAMP) $(LAUNCHER) standard-env
	$(BIN)/python -m pytest $(XDIST) -m "not docker" $(PYTEST_ARGS) $(ANY)
	$(BIN)/python -m pytest -m docker $(PYTEST_ARGS) $(ANY)

# The inner loop: SQLite only, no worker processes, browser, Docker or slow tests.
test-fast: $(STAMP) $(LAUNCHER)
	$(BIN)/python -m pytest $(XDIST) -m "not (postgres or fleet or browser or docker or slow)" \
		$(PYTEST_ARGS)

# The tiers that run worker processes and serve HTTP, with relay/fenced/'s overrides of
# kombu's and uvicorn's internals turned off: what they guard fails (xfail, strict) and the
# rest passes on the libraries' own code. A strict xfail that passes says an override can go.
test-unfenced: $(STAMP) $(LAUNCHER) standard-env
	SKILLFLEET_FENCED_KOMBU=false SKILLFLEET_FENCED_UVICORN=false \
		$(BIN)/python -m pytest $(XDIST) -m "(fleet or fenced) and not docker" $(PYTEST_ARGS) $(ANY)

# The docker-compose deployment, built without a registry and proven across containers.
compose-test: $(STAMP) $(LAUNCHER)
	PYTHON=$(BIN)/python bash deploy/compose-test.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) $(LAUNCHER) standard-env
	$(BIN)/python bench/skills.py
	$(BIN)/python bench/dependencies.py --spark
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/verification.py
	$(BIN)/python bench/runs.py --spark
	$(BIN)/python bench/streams.py
	$(BIN)/python bench/mcp_gateway.py
	$(BIN)/python bench/oauth_tokens.py

# A picture of every console page, taken in Chromium against a real fleet, into docs/img/.
screenshots: $(STAMP)
	SKILLFLEET_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/python -m pytest -q \
		tests/console/test_console_pages.py::test_screenshots_of_every_page \
		tests/console/test_console_chat.py::test_the_chat_page_fits_a_phones_width_with_a_call_waiting

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
