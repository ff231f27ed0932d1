"""Benchmark: importing a 200-file / 5 MiB skill, and list_skills with 200 skills installed.

Run with `python bench/skills.py`. Each figure is a median over several rounds, next to a
baseline measured in the same run:
- import: skillfleet's full import (bounded read, hostile-entry checks, validation, syntax
  checks, hashing, index row, one rename) against a bare `zipfile.extractall` + content hash;
- list_skills: the real tool call through the API (auth, envelope, call record) against the
  same Flask app answering a static catalog, and against re-reading every SKILL.md per call;
- over HTTP: list_skills and load_skill through a real `skillfleet api` (gunicorn) against
  `GET /api/health` (a database and a Redis round trip) sent with the same token and connection;
  each tool as agents call it (a `chat_id` and a `turn_id`, a new turn every 10 calls; for
  load_skill a new chat with each turn, as a skill is loaded once per chat), and list_skills
  without them too.
"""

from __future__ import annotations

import io
import logging
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from sqlalchemy import select  # noqa: E402

from api import create_app  # noqa: E402
from bench.runs import Agent  # noqa: E402
from store.db import transaction  # noqa: E402
from store.hashing import content_hash  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.models import Owner  # noqa: E402
from store.settings import Settings  # noqa: E402
from store.skillmd import parse_skill_md  # noqa: E402
from store.tokens import create_owner_token  # noqa: E402

IMPORT_ROUNDS = 7
LIST_CALLS = 300
HTTP_CALLS = 300


def big_skill_zip() -> bytes:
    """200 files, about 5 MiB unpacked, mostly incompressible like real assets."""
    rng = random.Random(7)
    buffer = io.BytesIO()
    header = "---\nname: big-skill\ndescription: A large skill for the benchmark.\n---\nBody.\n"
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("big-skill/SKILL.md", header)
        for index in range(10):
            archive.writestr(f"big-skill/scripts/s{index}.py", f"print({index})\n" * 50)
        for index in range(189):
            archive.writestr(f"big-skill/assets/a{index:03}.bin", rng.randbytes(27_000))
    data = buffer.getvalue()
    assert len(data) <= 5 * 1024 * 1024, len(data)
    return data


def timed(action: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def make_app(root: Path):  # type: ignore[no-untyped-def]
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    settings = Settings(data_dir=root / "var", redis_url=redis_url, dry_run=True)
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.database)
    app = create_app(settings)
    services = app.extensions["skillfleet"]
    with transaction(services.sessions) as session:
        token = create_owner_token(session, "bench")
    return app, {"Authorization": f"Bearer {token}"}


def bench_import(root: Path) -> tuple[float, float]:
    app, auth = make_app(root / "import")
    client = app.test_client()
    data = big_skill_zip()

    def ours() -> None:
        body = {"file": (io.BytesIO(data), "big.zip")}
        response = client.post("/api/skills?replace=true", headers=auth, data=body)
        assert response.status_code == 201, response.json

    def baseline() -> None:
        target = Path(tempfile.mkdtemp(dir=root))
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            archive.extractall(target)
        content_hash(target / "big-skill")
        shutil.rmtree(target)

    ours()  # warm up
    baseline()
    return statistics.median(timed(ours, IMPORT_ROUNDS)), statistics.median(
        timed(baseline, IMPORT_ROUNDS)
    )


def install_many(app, auth, count: int) -> None:  # type: ignore[no-untyped-def]
    client = app.test_client()
    for index in range(count):
        name = f"skill-{index:03}"
        header = f"---\nname: {name}\ndescription: Skill number {index} for the benchmark.\n---\n"
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(f"{name}/SKILL.md", header + "Instructions.\n" * 40)
            archive.writestr(f"{name}/references/notes.md", "notes\n")
        body = {"file": (io.BytesIO(buffer.getvalue()), "s.zip")}
        assert client.post("/api/skills", headers=auth, data=body).status_code == 201


def bench_list(root: Path) -> tuple[dict[str, list[float]], dict[str, str]]:
    app, auth = make_app(root / "list")
    catalog: list[tuple[str, str]] = []
    folders: list[Path] = []

    @app.post("/bench/static")
    def static_catalog():  # type: ignore[no-untyped-def]
        return {"skills": [{"name": n, "description": d} for n, d in catalog]}

    @app.post("/bench/reread")
    def reread_catalog():  # type: ignore[no-untyped-def]
        skills = []
        for folder in folders:
            header, _ = parse_skill_md((folder / "SKILL.md").read_text(encoding="utf-8"))
            skills.append({"name": header["name"], "description": header["description"]})
        return {"skills": skills}

    install_many(app, auth, 199)  # + the built-in skill-authoring = 200
    services = app.extensions["skillfleet"]
    client = app.test_client()
    with services.sessions() as session:
        owner = session.scalar(select(Owner.id).where(Owner.name == "bench"))
    catalog.extend(services.store.catalog(owner))
    assert len(catalog) == 200
    folders.extend(services.store.folder(s) for s in services.store.installed(owner))

    def call(path: str, body: dict[str, object] | None = None) -> Callable[[], None]:
        def action() -> None:
            response = client.post(path, headers=auth, json=body or {})
            assert response.status_code == 200
            assert response.json.get("status", "done") == "done", response.json

        return action

    # No chat: the calls of one chat count against its turn, and past 50 an hour they are
    # refused, which would time refusals instead of listings.
    ours = call("/api/tools/list_skills", {"arguments": {}})
    for action in (ours, call("/bench/static"), call("/bench/reread")):
        action()
    return {
        "list_skills (ours)": timed(ours, LIST_CALLS),
        "static catalog (floor)": timed(call("/bench/static"), LIST_CALLS),
        "re-read every SKILL.md": timed(call("/bench/reread"), LIST_CALLS),
    }, auth


def bench_http(root: Path, auth: dict[str, str]) -> dict[str, list[float]]:
    """The read tools through a real API process on the list benchmark's data dir."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
        "SKILLFLEET_DATA_DIR": str(root / "list" / "var"),
        "SKILLFLEET_PORT": str(port),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    log = open(root / "api.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "skillfleet", "api", "--workers", "1"], env=env, stdout=log,
        stderr=log,
    )  # fmt: skip
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.get("/api/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start; see {root / 'api.log'}")
            time.sleep(0.1)

        def tool(
            name: str, arguments: dict[str, object], agent: Agent | None = None
        ) -> Callable[[], None]:
            def action() -> None:
                body = {"arguments": arguments, **(agent.fields() if agent else {})}
                response = client.post(f"/api/tools/{name}", json=body)
                assert response.json()["status"] == "done", response.text

            return action

        def health() -> None:
            assert client.get("/api/health").status_code == 200

        actions = {
            "GET /api/health (floor)": health,
            "list_skills, no chat": tool("list_skills", {}),
            "list_skills": tool("list_skills", {}, Agent("bench-list")),
            "load_skill": tool(
                "load_skill", {"skill_name": "skill-100"}, Agent("bench-load", new_chats=True)
            ),
        }
        samples: dict[str, list[float]] = {label: [] for label in actions}
        for action in actions.values():
            timed(action, 20)  # warm up
        for _ in range(HTTP_CALLS):  # interleaved, so all see the same machine
            for label, action in actions.items():
                samples[label] += timed(action, 1)
        return samples
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ours, baseline = bench_import(root)
        print("Import of a 200-file / 5 MiB skill (median of 7)")
        print(f"  skillfleet import      {ours * 1000:8.1f} ms")
        print(f"  extractall + hash      {baseline * 1000:8.1f} ms")
        print(f"  ratio                  {ours / baseline:8.2f}x")
        print()
        results, auth = bench_list(root)
        print(f"list_skills with 200 skills installed ({LIST_CALLS} calls)")
        report(results, "static catalog (floor)")
        print()
        print(f"Read tools over HTTP, 200 skills, one API process ({HTTP_CALLS} calls each)")
        report(bench_http(root, auth), "GET /api/health (floor)")


def report(results: dict[str, list[float]], floor_label: str) -> None:
    floor = statistics.median(results[floor_label])
    for label, samples in results.items():
        median = statistics.median(samples)
        p99 = sorted(samples)[int(len(samples) * 0.99) - 1]
        print(
            f"  {label:24} p50 {median * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms  "
            f"ratio to floor {median / floor:5.2f}x"
        )


if __name__ == "__main__":
    main()
