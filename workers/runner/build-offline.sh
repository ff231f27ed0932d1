#!/usr/bin/env bash
# Build the skillfleet runner image without an image registry.
#
# The image is equivalent to workers/runner/Dockerfile (Debian bookworm with python3, nodejs,
# bash and ca-certificates; no compilers; user 65534:65534; working directory /skill), but its
# root filesystem is made with debootstrap from a Debian package mirror and handed to
# `docker import`, so only the mirror has to be reachable.
#
# Usage: build-offline.sh [--mirror URL] [--force]
#   --mirror URL  Debian mirror to bootstrap from (default: the one apt on this host uses,
#                 else http://deb.debian.org/debian)
#   --force       rebuild even when the image already exists
#
# Environment:
#   SKILLFLEET_RUNNER_IMAGE  image to build (default skillfleet/runner:latest)
#   TMPDIR                   where the root filesystem is assembled (default /var/tmp)
#
# Needs root (debootstrap) and a running Docker engine (see start-docker.sh).
set -euo pipefail

readonly SUITE=bookworm
readonly PACKAGES=bash,python3,nodejs,ca-certificates
readonly DEFAULT_MIRROR=http://deb.debian.org/debian
readonly RUNTIME_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

image=${SKILLFLEET_RUNNER_IMAGE:-skillfleet/runner:latest}
mirror=""
force=0
workdir=""

say() { printf 'build-offline: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
  sed -n '/^# Usage:/,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//'
}

while (($#)); do
  case $1 in
    --mirror)
      (($# >= 2)) || die "--mirror needs a URL."
      mirror=$2
      shift 2
      ;;
    --mirror=*)
      mirror=${1#--mirror=}
      shift
      ;;
    --force)
      force=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      usage >&2
      die "unknown argument: $1"
      ;;
  esac
done

# Print the first Debian mirror apt uses for $SUITE (one-line .list and deb822 .sources files);
# failing that, the first enabled "deb" URI whose path ends in /debian. Prints nothing if none.
host_mirror() {
  local files=() f
  [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk -v suite="$SUITE" '
    function usable(uri) { return uri ~ /^(https?|file):\/\// }
    function consider(uri, suites,    n, i, s) {
      if (!usable(uri)) return
      n = split(suites, s, /[ \t]+/)
      for (i = 1; i <= n; i++) if (s[i] == suite && exact == "") exact = uri
      if (fallback == "" && uri ~ /\/debian\/?$/) fallback = uri
    }
    function end_stanza(    n, i, u) {
      if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no") {
        n = split(uris, u, /[ \t]+/)
        for (i = 1; i <= n; i++) if (u[i] != "") consider(u[i], suites)
      }
      types = ""; uris = ""; suites = ""; enabled = ""
    }
    FNR == 1 { if (prev ~ /\.sources$/) end_stanza(); prev = FILENAME }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*#/) next
      if ($0 ~ /^[ \t]*$/) { end_stanza(); next }
      if ($0 ~ /^[ \t]/) next                       # continuation line (e.g. an inline key)
      key = tolower($0); sub(/:.*/, "", key)
      value = $0; sub(/^[^:]*:[ \t]*/, "", value); sub(/[ \t]+$/, "", value)
      if (key == "types") types = value
      else if (key == "uris") uris = value
      else if (key == "suites") suites = value
      else if (key == "enabled") enabled = value
      next
    }
    {
      line = $0; sub(/#.*/, "", line)
      n = split(line, f, /[ \t]+/)
      i = 1; if (f[i] == "") i++
      if (f[i] != "deb") next
      i++
      if (f[i] ~ /^\[/) { while (i <= n && f[i] !~ /\]$/) i++; i++ }
      if (i + 1 <= n) consider(f[i], f[i + 1])
    }
    END {
      if (prev ~ /\.sources$/) end_stanza()
      if (exact != "") print exact; else if (fallback != "") print fallback
    }
  ' "${files[@]}"
}

cleanup() {
  local status=$? target
  if [[ -n $workdir && -d $workdir ]]; then
    ((status == 0)) || say "stopped (exit status $status); removing $workdir ..."
    # debootstrap mounts /proc and /sys (sometimes /dev) inside the target; an interrupted run
    # can leave them mounted, and they must never be deleted through.
    while read -r target; do
      if [[ $target == "$workdir"/* ]]; then umount -l "$target" 2>/dev/null || true; fi
    done < <(findmnt -rn -o TARGET | sort -r)
    rm -rf --one-file-system "$workdir"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v docker >/dev/null 2>&1 || die "the docker client is not installed; run workers/runner/start-docker.sh first."
docker info >/dev/null 2>&1 || die "no Docker engine answers; run workers/runner/start-docker.sh first."

old_id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [[ -n $old_id && $force -eq 0 ]]; then
  say "$image already exists ($(docker image inspect --format '{{.Size}}' "$image" | numfmt --to=iec-i --suffix=B)); use --force to rebuild."
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "debootstrap needs root; run this script as root."

if ! command -v debootstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "debootstrap is missing and apt-get is not available."
  say "installing debootstrap with apt-get ..."
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [[ ! -f $keyring ]] && command -v apt-get >/dev/null 2>&1; then
  say "installing debian-archive-keyring with apt-get ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debian-archive-keyring
fi
[[ -f $keyring ]] || die "$keyring is missing (install debian-archive-keyring); refusing to bootstrap without signature checks."

if [[ -z $mirror ]]; then
  mirror=$(host_mirror)
  mirror=${mirror:-$DEFAULT_MIRROR}
fi

# debootstrap fetches with wget, which does not read apt's configuration: pass apt's proxy on.
if [[ -z ${http_proxy:-} ]] && command -v apt-config >/dev/null 2>&1; then
  eval "$(apt-config shell http_proxy Acquire::http::Proxy)"
  [[ -n ${http_proxy:-} ]] && export http_proxy
fi

workdir=$(mktemp -d "${TMPDIR:-/var/tmp}/skillfleet-runner.XXXXXX")
root=$workdir/rootfs
SECONDS=0
say "bootstrapping Debian $SUITE ($PACKAGES) from $mirror into $root ..."
if ! debootstrap --variant=minbase --components=main --keyring="$keyring" \
  --include="$PACKAGES" "$SUITE" "$root" "$mirror" >"$workdir/debootstrap.out" 2>&1; then
  tail -n 40 "$workdir/debootstrap.out" >&2
  [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 40 "$root/debootstrap/debootstrap.log" >&2
  die "debootstrap failed (see above)."
fi
say "bootstrapped in ${SECONDS}s; trimming ..."

if findmnt -rn -o TARGET | grep -qF "$root/"; then
  die "something is still mounted under $root after debootstrap."
fi

# Caches, package lists, logs, documentation (license files stay), man pages, translations.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/debootstrap \
  "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
  "$root"/usr/share/lintian "$root"/usr/share/linda
find "$root/var/log" -type f -delete
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
# Keep it that way in images derived from this one (as debian:*-slim does).
mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
cat >"$root/etc/dpkg/dpkg.cfg.d/skillfleet-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG

# Nothing from the build host: debootstrap copies its resolver and host name (the engine
# provides both at run time), and device nodes are the engine's business too.
: >"$root/etc/resolv.conf"
echo localhost >"$root/etc/hostname"
find "$root/dev" -mindepth 1 -delete

# The skill is mounted at /skill; nothing but /tmp is writable for anyone.
install -d -m 0755 -o 0 -g 0 "$root/skill"
find "$root" -xdev \( -path "$root/tmp" -o -path "$root/proc" -o -path "$root/sys" \) -prune \
  -o -perm -0002 -type d -print0 | xargs -0r chmod 0755
find "$root" -xdev \( -path "$root/proc" -o -path "$root/sys" \) -prune \
  -o -perm -0002 ! -type d ! -type l -print0 | xargs -0r chmod o-w
chmod 1777 "$root/tmp"

say "importing the root filesystem as $image ..."
tar --numeric-owner -C "$root" -c . | docker import \
  --change "ENV PATH=$RUNTIME_PATH LANG=C.UTF-8 HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1" \
  --change 'USER 65534:65534' \
  --change 'WORKDIR /skill' \
  --change 'CMD ["bash"]' \
  --change 'LABEL org.opencontainers.image.title=skillfleet-runner' \
  --message "skillfleet runner: debootstrap $SUITE minbase + $PACKAGES" \
  - "$image" >/dev/null

say "checking the image ..."
docker run --rm --network none --read-only --tmpfs /tmp --cap-drop ALL \
  --security-opt no-new-privileges --user 65534:65534 "$image" \
  bash -c 'python3 --version && echo "node $(node --version)" && echo "bash $BASH_VERSION"' >&2

new_id=$(docker image inspect --format '{{.Id}}' "$image")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
  docker image rm "$old_id" >/dev/null 2>&1 || say "the previous image $old_id is still in use; left in place."
fi

size=$(docker image inspect --format '{{.Size}}' "$image")
say "built $image in ${SECONDS}s: $(numfmt --to=iec-i --suffix=B "$size") ($size bytes)."
