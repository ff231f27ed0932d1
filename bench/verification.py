"""Benchmark: what proving a cached skill folder costs a run, against reading it in full.

Run with `python bench/verification.py`. For skills of 5, 50 and 200 files (the last one 5 MiB,
the largest skill allowed) it measures, in the same run:

- a remembered proof: `FolderVerifier.verify` on a folder it proved before and nothing changed
  (what every run after the first pays);
- a full proof: the same call on a fresh verifier, which reads and hashes every file (what the
  first run after an install or a change pays);
- the old check, `Path.is_dir()`, which trusted any folder with the right name.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from store.hashing import content_hash  # noqa: E402
from workers.verification import FolderVerifier  # noqa: E402

SIZES = ((5, 2_000), (50, 10_000), (200, 25_000))  # files, bytes per file
ROUNDS = 200


def build(root: Path, files: int, size: int) -> Path:
    folder = root / f"skill-{files}"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: demo\ndescription: A demo.\n---\n")
    for i in range(files - 1):
        part = "scripts" if i % 5 == 0 else "references"
        path = folder / part / f"file-{i:03}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes([65 + i % 26]) * size)
    return folder


def median_us(action: Callable[[], object], rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    print(f"Proving a cached skill folder (median of {ROUNDS})")
    print(f"  {'skill':<18}{'is_dir()':>12}{'remembered':>14}{'full proof':>14}{'full/rem.':>11}")
    with tempfile.TemporaryDirectory() as scratch:
        for files, size in SIZES:
            folder = build(Path(scratch), files, size)
            expected = content_hash(folder)
            verifier = FolderVerifier()
            verifier.verify(folder, expected)
            trusted = median_us(folder.is_dir)
            remembered = median_us(lambda: verifier.verify(folder, expected))  # noqa: B023
            full = median_us(lambda: FolderVerifier().verify(folder, expected), 30)  # noqa: B023
            label = f"{files} files, {files * size // 1024} KiB"
            print(
                f"  {label:<18}{trusted:>9.1f} µs{remembered:>11.1f} µs{full:>11.1f} µs"
                f"{full / remembered:>10.1f}x"
            )


if __name__ == "__main__":
    main()
