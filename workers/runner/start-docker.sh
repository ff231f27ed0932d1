#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine; start one if needed.
#
# Idempotent: if `docker info` already works, nothing happens. Otherwise (as root) docker.io is
# installed with apt-get when dockerd is missing, and dockerd is started in the background with
# no bridge, no iptables rules and no IP forwarding/masquerading: skillfleet's containers always
# run with --network none, so the engine needs no host networking at all.
#
# Environment:
#   DOCKERD_LOG      where dockerd writes its log (default /var/log/dockerd.log)
#   DOCKERD_TIMEOUT  seconds to wait for the engine to answer (default 60)
set -euo pipefail

log_file=${DOCKERD_LOG:-/var/log/dockerd.log}
timeout=${DOCKERD_TIMEOUT:-60}

say() { printf 'start-docker: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

engine_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if engine_answers; then
  say "the Docker engine already answers."
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  die "no Docker engine answers and this script is not running as root, so it cannot install \
or start one. Start dockerd as root (or run this script with sudo), or join the 'docker' group."
fi

install_docker() {
  command -v apt-get >/dev/null 2>&1 || die "dockerd is missing and apt-get is not available."
  say "dockerd is missing: installing docker.io with apt-get ..."
  # Keep the package's init script from starting a default dockerd (with a bridge and
  # iptables rules) during installation; this script starts its own below.
  local policy=/usr/sbin/policy-rc.d added_policy=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    added_policy=$policy
  fi
  local status=0
  {
    DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io
  } || status=$?
  if [[ -n $added_policy ]]; then rm -f "$added_policy"; fi
  [[ $status -eq 0 ]] || die "installing docker.io failed (apt-get exit status $status)."
  command -v dockerd >/dev/null 2>&1 || die "docker.io is installed but dockerd is not on PATH."
}

command -v dockerd >/dev/null 2>&1 || install_docker
command -v docker >/dev/null 2>&1 || die "dockerd is installed but the docker client is missing."

if pgrep -x dockerd >/dev/null 2>&1; then
  say "dockerd is already running (pid $(pgrep -x dockerd | tr '\n' ' ')); waiting for it to answer."
else
  mkdir -p "$(dirname "$log_file")"
  say "starting dockerd (log: $log_file) ..."
  # setsid + nohup: the engine outlives the shell (and CI step) that started it.
  setsid nohup dockerd \
    --bridge=none \
    --iptables=false \
    --ip-forward=false \
    --ip-masq=false \
    >>"$log_file" 2>&1 </dev/null &
  dockerd_pid=$!
fi

for ((waited = 0; waited < timeout; waited++)); do
  if engine_answers; then
    say "the Docker engine answers (after ${waited}s): $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}' 2>/dev/null || echo 'version unknown')."
    exit 0
  fi
  if [[ -n ${dockerd_pid:-} ]] && ! kill -0 "$dockerd_pid" 2>/dev/null; then
    say "dockerd exited during start-up; the end of $log_file:"
    tail -n 30 "$log_file" >&2 || true
    die "dockerd did not start."
  fi
  sleep 1
done

say "the end of $log_file:"
tail -n 30 "$log_file" >&2 || true
die "dockerd did not answer within ${timeout}s."
