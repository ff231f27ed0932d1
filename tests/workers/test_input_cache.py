"""A worker's input files kept by SHA-256: placed only when what is kept still hashes to its
name, bounded in bytes, least recently placed out first, names that are no hash refused; and an
input placed is unchanged after the run only while nothing wrote it."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
from pathlib import Path

import pytest

from workers.runfiles import InputCache, RunFiles, collect, found_in, place_inputs


def keep(cache: InputCache, data: bytes) -> str:
    sha256 = hashlib.sha256(data).hexdigest()
    keeping = cache.writer(sha256, len(data))
    assert keeping is not None
    keeping.write(data)
    keeping.keep()
    return sha256


def test_a_kept_file_is_placed_byte_for_byte_and_the_folder_is_the_workers_alone(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs")
    data = os.urandom(70_000)
    sha256 = hashlib.sha256(data).hexdigest()
    out = io.BytesIO()
    assert not cache.place(sha256, out) and out.getvalue() == b""
    keep(cache, data)
    assert cache.place(sha256, out)
    assert out.getvalue() == data
    assert stat.S_IMODE((tmp_path / "inputs").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "inputs" / sha256).stat().st_mode) == 0o600


def test_a_kept_file_altered_is_not_placed_and_goes(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs")
    data = b"%PDF-1.7 the real one\n" * 1000
    sha256 = keep(cache, data)
    (tmp_path / "inputs" / sha256).write_bytes(b"%PDF-1.7 planted\n")
    out = io.BytesIO()
    assert not cache.place(sha256, out)
    assert out.getvalue() == b""  # nothing of the planted bytes stays in the run's file
    assert not (tmp_path / "inputs" / sha256).exists()


def test_a_kept_file_placed_unread_while_untouched_and_hashed_again_once_written(
    tmp_path: Path,
):
    cache = InputCache(tmp_path / "inputs")
    data = os.urandom(50_000)
    sha256 = keep(cache, data)
    for _ in range(2):  # proven as fetched, then as placed
        out = io.BytesIO()
        assert cache.place(sha256, out) and out.getvalue() == data
    with open(tmp_path / "placed", "wb") as out:  # a file: the kernel's copy
        assert cache.place(sha256, out)
    assert (tmp_path / "placed").read_bytes() == data
    # Written with as many bytes, later than the file system's clock's tick: the signature
    # changed, so it is hashed again, found other and removed.
    time.sleep(0.05)
    (tmp_path / "inputs" / sha256).write_bytes(bytes(len(data)))
    out = io.BytesIO()
    assert not cache.place(sha256, out) and out.getvalue() == b""
    assert not (tmp_path / "inputs" / sha256).exists()


def test_past_its_bytes_the_least_recently_placed_go_first(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs", max_bytes=9000)
    kept = [keep(cache, bytes([n]) * 1000) for n in range(8)]  # 8,000: within nine tenths
    for when, name in enumerate(kept, start=1):  # kept in this order, long ago
        os.utime(tmp_path / "inputs" / name, ns=(when, when))
    assert cache.place(kept[0], io.BytesIO())  # placed again: now the most recent
    # 9,000 bytes: the least recently placed go, down to nine tenths of the cache (8,100).
    newest = keep(cache, bytes([8]) * 1000)
    left = {p.name for p in (tmp_path / "inputs").iterdir()}
    assert left == {*kept, newest} - {kept[1]}


def test_the_folder_is_read_again_once_a_share_of_the_room_left_is_used(tmp_path: Path):
    """A trim stats every kept file, so it is not done for every file: a process keeps up to a
    quarter of the room the last trim left before it looks again (here 1,975 bytes)."""
    cache = InputCache(tmp_path / "inputs", max_bytes=8000)
    first = keep(cache, b"a" * 100)  # its first file: it trims, 7,900 bytes of room
    planted = tmp_path / "inputs" / ("f" * 64)  # another worker's file, long ago, past the cap
    planted.write_bytes(bytes(9000))
    os.utime(planted, ns=(1, 1))
    small = [keep(cache, bytes([n]) * 100) for n in range(19)]  # 1,900 bytes: within its room
    assert planted.exists()
    last = keep(cache, b"z" * 100)  # 2,000: past its room, so it trims, oldest first
    assert not planted.exists()
    assert {p.name for p in (tmp_path / "inputs").iterdir()} == {first, *small, last}


def test_a_file_over_an_eighth_of_the_cache_is_never_kept(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs", max_bytes=8000)
    assert cache.writer("a" * 64, 1001) is None
    assert cache.writer("a" * 64, 1000) is not None


@pytest.mark.parametrize(
    "name",
    ["../" + "a" * 61, "a" * 63, "a" * 65, "A" * 64, "a" * 63 + "\x00", "/" + "a" * 63, None, 7],
)
def test_a_name_that_is_no_sha256_is_neither_kept_nor_placed(tmp_path: Path, name: object):
    cache = InputCache(tmp_path / "inputs")
    assert cache.writer(name, 10) is None
    assert not cache.place(name, io.BytesIO())
    assert list((tmp_path / "inputs").iterdir()) == []


def test_a_link_planted_under_a_hash_s_name_is_not_followed(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for runs")
    sha256 = hashlib.sha256(b"not for runs").hexdigest()
    (tmp_path / "inputs" / sha256).symlink_to(secret)
    out = io.BytesIO()
    assert not cache.place(sha256, out) and out.getvalue() == b""


def test_a_dropped_fetch_leaves_nothing_kept(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs")
    keeping = cache.writer("b" * 64, 10)
    assert keeping is not None
    keeping.write(b"half")
    keeping.drop()
    assert list((tmp_path / "inputs").iterdir()) == []


def placed_from_the_cache(tmp_path: Path, data: bytes) -> tuple[RunFiles, dict, Path, dict]:
    """An input placed in a run's folder from the worker's cache (no API is reached)."""
    cache = InputCache(tmp_path / "inputs")
    sha256 = keep(cache, data)
    channel = RunFiles("http://127.0.0.1:9", "n1", "token", cache=cache)  # nothing listens
    inputs = {"in.bin": {"id": "f1", "size": len(data), "sha256": sha256}}
    work = tmp_path / "work"
    work.mkdir()
    placed = place_inputs(channel, "r1", inputs, work)
    return channel, inputs, work, placed


def test_an_input_the_run_left_alone_does_not_come_back(tmp_path: Path):
    channel, inputs, work, placed = placed_from_the_cache(tmp_path, b"%PDF-1.7\n" * 500)
    assert (work / "in.bin").read_bytes() == b"%PDF-1.7\n" * 500
    sent = collect(channel, "r1", found_in(work), inputs, placed)
    assert (sent.files, sent.left_out) == ([], [])


@pytest.mark.parametrize("how", ["rewritten", "replaced", "rewritten, its time put back"])
def test_an_input_written_over_with_as_many_bytes_at_once_is_seen_changed(tmp_path: Path, how: str):
    channel, inputs, work, placed = placed_from_the_cache(tmp_path, b"A" * 4096)
    target = work / "in.bin"
    before = target.stat()
    if how == "replaced":  # a new file of the same size under the same name
        target.unlink()
        target.write_bytes(b"B" * 4096)
    else:
        with open(target, "r+b") as out:
            out.write(b"B")
    if how.endswith("put back"):
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    sent = collect(channel, "r1", found_in(work), inputs, placed)
    # Seen changed, it is sent back: here nothing listens, so it is noted as not sent.
    assert [note.split(" (")[0] for note in sent.left_out] == ["in.bin"], sent.left_out


def test_what_a_worker_that_died_mid_fetch_left_goes_when_the_next_one_starts(tmp_path: Path):
    cache = InputCache(tmp_path / "inputs")
    abandoned, current = cache.writer("c" * 64, 10), cache.writer("d" * 64, 10)
    assert abandoned is not None and current is not None
    os.utime(abandoned.temp, ns=(1, 1))  # an hour and more ago
    InputCache(tmp_path / "inputs")
    assert not abandoned.temp.exists() and current.temp.exists()
    current.write(b"0123456789")
    current.keep()
    assert (tmp_path / "inputs" / ("d" * 64)).read_bytes() == b"0123456789"
