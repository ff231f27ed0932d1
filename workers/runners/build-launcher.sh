#!/bin/sh
# Build skillfleet-launch (launch.c) as OUT. Where it can't be built (not x86_64, no C
# compiler), say so and succeed: the node runner then starts scripts through setpriv.
#
# Usage: build-launcher.sh OUT
set -eu
out=${1:?usage: build-launcher.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
skipped() { echo "skillfleet-launch not built ($1): node scripts start through setpriv" >&2; }

if [ "$(uname -m)" != x86_64 ]; then skipped "it is written for x86_64"; exit 0; fi
if ! command -v "$cc" >/dev/null 2>&1; then skipped "no C compiler '$cc'"; exit 0; fi
mkdir -p "$(dirname "$out")"
"$cc" -Os -static -nostdlib -ffreestanding -fno-stack-protector \
  -fno-asynchronous-unwind-tables -o "$out" "$here/launch.c" || skipped "$cc failed"
