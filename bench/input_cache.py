"""Benchmark: a node worker keeping a new input file in a cache that holds many, against one
that holds few, in the same run.

Run with `python bench/input_cache.py [--files N] [--keeps K]`. A worker keeps each input file
it fetched (workers/runfiles.py InputCache) and bounds the folder's bytes by reading it: a stat
of every kept file. Into a cache that already holds 10 files (the baseline) and one that holds N
(default 20,000, what a node given many small inputs gathers well within its 256 MiB), a worker
that has kept one file since it started (its first trim done) keeps K more of 4 KiB in each,
the two taking turns (so both see the same file system), as its fetches do (`writer`, the
bytes, `keep`); then the same into caches filled to their bytes, where new files make older
ones go. Printed: the mean time a file (the folder's scans are spread over the files, so the
mean is the figure that counts), the median, and each ratio to the baseline's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.runfiles import InputCache  # noqa: E402

FILE_BYTES = 4096
BASELINE_FILES = 10


def filled(folder: Path, count: int, tag: bytes) -> None:
    """`count` kept files of FILE_BYTES, named by their hash as the worker names them, placed
    long ago (oldest first)."""
    folder.mkdir(parents=True, mode=0o700)
    for number in range(count):
        data = tag + number.to_bytes(8, "big") * (FILE_BYTES // 8 - 1)
        path = folder / hashlib.sha256(data).hexdigest()
        path.write_bytes(data)
        os.utime(path, ns=(number + 1, number + 1))


def one_kept(cache: InputCache, tag: bytes) -> float:
    """Seconds for one new file kept, as a fetch keeps one."""
    data = tag + os.urandom(FILE_BYTES - len(tag))
    sha256 = hashlib.sha256(data).hexdigest()
    start = time.perf_counter()
    keeping = cache.writer(sha256, len(data))
    assert keeping is not None
    keeping.write(data)
    keeping.keep()
    return time.perf_counter() - start


def cache_of(root: Path, files: int, full: bool) -> InputCache:
    """A worker's cache holding `files` (to its bytes when `full`), the worker started a while
    ago: its first file kept, its first trim done."""
    folder = root / f"{'full' if full else 'room'}-{files}" / ".inputs"
    folder.parent.mkdir(parents=True)
    filled(folder, files, b"full" if full else b"room")
    max_bytes = files * FILE_BYTES if full else 256 * 1024 * 1024
    cache = InputCache(folder, max_bytes=max(max_bytes, 8 * FILE_BYTES))
    one_kept(cache, b"first")
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--keeps", type=int, default=1000)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-input-cache-") as temp:
        root = Path(temp)
        print(f"A new {FILE_BYTES // 1024} KiB input kept, {arguments.keeps} files each, "
              "the two caches taking turns")  # fmt: skip
        for full in (False, True):
            caches = {
                count: cache_of(root, count, full) for count in (BASELINE_FILES, arguments.files)
            }
            samples: dict[int, list[float]] = {count: [] for count in caches}
            for _ in range(arguments.keeps):  # in turns: both see the same file system
                for count, cache in caches.items():
                    samples[count].append(one_kept(cache, b"new"))
            base = samples[BASELINE_FILES]
            kind = "filled to its bytes" if full else "with room left"
            for count, taken in samples.items():
                mean = statistics.mean(taken) / statistics.mean(base)
                p50 = statistics.median(taken) / statistics.median(base)
                print(
                    f"  {kind:20} {count:>7,} kept  mean {statistics.mean(taken) * 1e3:7.3f} ms"
                    f" ({mean:5.2f}x)  p50 {statistics.median(taken) * 1e3:7.3f} ms"
                    f" ({p50:5.2f}x)"
                )


if __name__ == "__main__":
    main()
