#!/usr/bin/env bash
# Build the images docker-compose.yml uses, without an image registry.
#
# Where `postgres:16`, `redis:7`, `haproxy:2.6` and `python:3.11-slim` can't be pulled, this makes
# equivalent images from one Debian root filesystem (debootstrap, as workers/runner/build-offline.sh
# does for the runner image): PostgreSQL, Redis (also its sentinels) and HAProxy (the proxy in
# front of the API replicas) are Debian's packages, and the application image
# is Debian's python3 with skillfleet and its dependencies installed from this machine (wheels
# for CPython 3.11, the same ABI as bookworm's python3). Nothing inside a build needs a network.
#
# Usage: build-images.sh [--force]
#   --force   rebuild the Debian root and the PostgreSQL, Redis and proxy images even if they
#             exist (a Debian root without haproxy, from before the proxy, is rebuilt anyway)
#             (the application image is always rebuilt: it holds this checkout's code)
#
# Environment (the image names docker-compose.yml reads):
#   SKILLFLEET_APP_IMAGE       default skillfleet/app:latest
#   SKILLFLEET_POSTGRES_IMAGE  default skillfleet/postgres:offline
#   SKILLFLEET_REDIS_IMAGE     default skillfleet/redis:offline
#   SKILLFLEET_PROXY_IMAGE     default skillfleet/proxy:offline
#   SKILLFLEET_BASE_IMAGE      the shared Debian root (default skillfleet/debian:bookworm)
#   SKILLFLEET_DEBIAN_MIRROR   default http://deb.debian.org/debian
#   PYTHON                     the CPython 3.11 that installs the wheels (default python3)
#
# Needs root (debootstrap) and a running Docker engine (workers/runner/start-docker.sh).
set -euo pipefail

readonly SUITE=bookworm
# openssh-client: the API checks skill signatures with ssh-keygen (docs/signing.md).
readonly PACKAGES=bash,ca-certificates,python3,postgresql,redis-server,haproxy,curl,tini,openssh-client
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

app_image=${SKILLFLEET_APP_IMAGE:-skillfleet/app:latest}
postgres_image=${SKILLFLEET_POSTGRES_IMAGE:-skillfleet/postgres:offline}
redis_image=${SKILLFLEET_REDIS_IMAGE:-skillfleet/redis:offline}
proxy_image=${SKILLFLEET_PROXY_IMAGE:-skillfleet/proxy:offline}
base_image=${SKILLFLEET_BASE_IMAGE:-skillfleet/debian:bookworm}
mirror=${SKILLFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
python=${PYTHON:-python3}
force=0
workdir=""

say() { printf 'build-images: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

case ${1:-} in
  --force) force=1 ;;
  "") ;;
  -h | --help) sed -n '/^# Usage:/,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument: $1" ;;
esac

cleanup() {
  local status=$? target
  if [[ -n $workdir && -d $workdir ]]; then
    while read -r target; do
      if [[ $target == "$workdir"/* ]]; then umount -l "$target" 2>/dev/null || true; fi
    done < <(findmnt -rn -o TARGET | sort -r)
    rm -rf --one-file-system "$workdir"
  fi
  exit "$status"
}
trap cleanup EXIT

exists() { docker image inspect "$1" >/dev/null 2>&1 && ((force == 0)); }

docker info >/dev/null 2>&1 || die "no Docker engine answers; run workers/runner/start-docker.sh first."
workdir=$(mktemp -d "${TMPDIR:-/var/tmp}/skillfleet-images.XXXXXX")

# A Debian root made before the proxy image lacks haproxy: it is made again.
base_complete() {
  docker run --rm --entrypoint /bin/sh "$base_image" -c 'command -v haproxy' >/dev/null 2>&1
}

build_base() {
  if exists "$base_image" && base_complete; then say "$base_image exists."; return; fi
  [[ $(id -u) -eq 0 ]] || die "debootstrap needs root."
  command -v debootstrap >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
  if [[ -z ${http_proxy:-} ]] && command -v apt-config >/dev/null 2>&1; then
    eval "$(apt-config shell http_proxy Acquire::http::Proxy)"
    [[ -n ${http_proxy:-} ]] && export http_proxy
  fi
  local root=$workdir/rootfs
  SECONDS=0
  say "bootstrapping Debian $SUITE ($PACKAGES) from $mirror ..."
  if ! debootstrap --variant=minbase --components=main \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    --include="$PACKAGES" "$SUITE" "$root" "$mirror" >"$workdir/debootstrap.out" 2>&1; then
    tail -n 40 "$workdir/debootstrap.out" >&2
    die "debootstrap failed."
  fi
  say "bootstrapped in ${SECONDS}s."
  # The package's own cluster is not used: the postgres image makes one in its data volume.
  rm -rf "$root"/var/lib/postgresql/15 "$root"/etc/postgresql/15
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/debootstrap \
    "$root"/usr/share/man/* "$root"/usr/share/doc/* "$root"/usr/share/locale/*
  find "$root/var/log" -type f -delete
  : >"$root/etc/resolv.conf"
  echo localhost >"$root/etc/hostname"
  find "$root/dev" -mindepth 1 -delete
  tar --numeric-owner -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    --message "debootstrap $SUITE minbase + $PACKAGES" - "$base_image" >/dev/null
  rm -rf --one-file-system "$root"
}

build_from_base() {  # build_from_base IMAGE CONTEXT
  if exists "$1"; then say "$1 exists."; return; fi
  say "building $1 ..."
  docker build --quiet --build-arg "BASE=$base_image" -t "$1" "$2" >/dev/null
}

build_app() {  # always: it holds this checkout's code
  local context=$workdir/app
  mkdir -p "$context"
  say "installing skillfleet and its dependencies for CPython 3.11 ..."
  "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' ||
    die "$python is not CPython 3.11 (bookworm's python3 is 3.11)."
  # The dependencies at the versions and hashes of requirements.lock, as the Dockerfile installs
  # them. pip reads dependency markers for this machine's Python, not the image's: redis needs
  # async-timeout before 3.11.3 (bookworm has 3.11.2), so it is named here, at its locked
  # version. Wheels are preferred; a pure-Python package published only as source (http_ece)
  # is built here.
  local async_timeout
  async_timeout=$(sed -n 's/^\(async-timeout==[^ ;]*\).*/\1/p' "$repo/requirements.lock")
  [[ -n $async_timeout ]] || die "requirements.lock names no async-timeout."
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$workdir/wheel" "$repo" 2>/dev/null
  "$python" -m pip install --quiet --no-compile --target "$context/site-packages" \
    --prefer-binary --require-hashes -r "$repo/requirements.lock" 2>&1 |
    grep -v '^WARNING: Location' >&2 || true
  rm -rf "$context/site-packages/bin"  # console scripts: the image writes its own
  "$python" -m pip install --quiet --no-compile --target "$context/site-packages" --no-deps \
    "$workdir"/wheel/skillfleet-*.whl "$async_timeout" 2>&1 | grep -v '^WARNING: Location' >&2 || true
  [[ -d $context/site-packages/skillfleet ]] || die "pip did not install skillfleet."
  [[ -d $context/site-packages/redis ]] || die "pip did not install the locked dependencies."
  rm -rf "$context/site-packages/bin"
  # Built here (the image has no C compiler); an empty bin/ where it can't be: setpriv is used.
  mkdir -p "$context/bin"
  sh "$repo/workers/runners/build-launcher.sh" "$context/bin/skillfleet-launch"
  cp "$here/app.Dockerfile" "$context/Dockerfile"
  say "building $app_image ..."
  docker build --quiet --build-arg "BASE=$base_image" -t "$app_image" "$context" >/dev/null
}

build_base
build_from_base "$postgres_image" "$here/postgres"
build_from_base "$redis_image" "$here/redis"
build_from_base "$proxy_image" "$here/proxy"
build_app
say "images: $base_image $postgres_image $redis_image $proxy_image $app_image"
