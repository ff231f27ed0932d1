"""The floor for `bench/runs.py`: a bare Celery task that spawns the script and returns its output.

Same Redis, same pool (threads) and concurrency as skillfleet's node worker, late acks like it;
nothing else: no API, no database, no stream. Started by the bench as
`celery -A bench.celery_floor worker -Q <queue> --pool threads --concurrency 8`.
"""

from __future__ import annotations

import os
import subprocess

from celery import Celery

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")

app = Celery("floor", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_disable_rate_limits=True,
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="floor.spawn")
def spawn(command: list[str]) -> str:
    """Run the command and hand back what it printed."""
    return subprocess.run(command, capture_output=True, check=True, text=True).stdout
