#!/usr/bin/env bash
# `make compose-test`: build every image without a registry, bring docker-compose.yml up, prove
# the deployment works across containers (deploy/compose_check.py: two API replicas behind the
# proxy, and the Redis primary killed mid-run), and tear it all down, whatever happened.
#
# Environment:
#   PYTHON                    the Python with skillfleet's dependencies (default .venv/bin/python)
#   COMPOSE_TEST_TIMEOUT      seconds the checks may take (default 900)
#   COMPOSE_TEST_KEEP=1       leave the stack running after a failure, to look into it
#   COMPOSE_TEST_ONLY=a,b     run only these checks (names in deploy/compose_check.py's main)
#   SKILLFLEET_*_IMAGE        images to use (see deploy/build-images.sh)
#
# Needs root (debootstrap, apt-get) or a Docker engine and images that already exist.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'compose-test: %s\n' "$*" >&2; }

python=${PYTHON:-.venv/bin/python}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-skillfleet-compose-test}
export SKILLFLEET_APP_IMAGE=${SKILLFLEET_APP_IMAGE:-skillfleet/app:latest}
export SKILLFLEET_POSTGRES_IMAGE=${SKILLFLEET_POSTGRES_IMAGE:-skillfleet/postgres:offline}
export SKILLFLEET_REDIS_IMAGE=${SKILLFLEET_REDIS_IMAGE:-skillfleet/redis:offline}
export SKILLFLEET_PROXY_IMAGE=${SKILLFLEET_PROXY_IMAGE:-skillfleet/proxy:offline}
export SKILLFLEET_RUNNER_IMAGE=${SKILLFLEET_RUNNER_IMAGE:-skillfleet/runner:latest}
# A killed worker's unacknowledged message comes back quickly, to prove it does not run twice.
export SKILLFLEET_VISIBILITY_TIMEOUT=10
# Two API replicas of two processes each.
export SKILLFLEET_API_WORKERS=2

bash workers/runner/start-docker.sh
if ! command -v docker-compose >/dev/null 2>&1; then
  say "installing docker-compose with apt-get ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose >/dev/null
fi
# Bounded: a Debian mirror that stalls fails the build instead of hanging CI.
timeout 1200 bash workers/runner/build-offline.sh
timeout 1800 bash deploy/build-images.sh

# Free loopback ports, so a `skillfleet up` on this machine is not in the way.
read -r SKILLFLEET_PORT SKILLFLEET_FLOWER_PORT < <("$python" -c '
import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
print(*ports)')
export SKILLFLEET_PORT SKILLFLEET_FLOWER_PORT

compose() { docker-compose --file docker-compose.yml "$@"; }

teardown() {
  local status=$?
  if ((status != 0)); then
    say "failed (exit status $status); the last lines of each service:"
    compose ps >&2 || true
    compose logs --no-color --tail=40 >&2 || true
  fi
  if ((status != 0)) && [[ ${COMPOSE_TEST_KEEP:-} == 1 ]]; then
    say "left running (COMPOSE_TEST_KEEP=1); stop it with: docker-compose -p $COMPOSE_PROJECT_NAME down -v"
    exit "$status"
  fi
  say "tearing down ..."
  compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting the stack (API on 127.0.0.1:$SKILLFLEET_PORT, Flower on 127.0.0.1:$SKILLFLEET_FLOWER_PORT) ..."
SECONDS=0
timeout 300 docker-compose --file docker-compose.yml up --detach --no-build --quiet-pull
say "up in ${SECONDS}s; checking ..."
timeout "${COMPOSE_TEST_TIMEOUT:-900}" "$python" deploy/compose_check.py \
  --api "http://127.0.0.1:$SKILLFLEET_PORT" --flower "http://127.0.0.1:$SKILLFLEET_FLOWER_PORT" \
  --only "${COMPOSE_TEST_ONLY:-}"
say "passed in ${SECONDS}s."
