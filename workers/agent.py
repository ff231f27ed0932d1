"""The node agent's sync loop: at start, about every minute, and at once when asked over pub/sub.

Each interval is drawn within JITTER of `every`, so nodes started together spread their syncs
over the minute instead of asking the API all at once, minute after minute. A sync the API did
not answer is tried again sooner, after RETRY_FIRST seconds, then twice as long each time up to
the interval: a node that starts before its API (`skillfleet up` starts both at once) holds its
packages as soon as the API answers, not a minute later.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import redis
import structlog

from relay import naming
from relay.connections import database_number
from relay.errors import RunError
from workers.packages import PackageCache, SyncReport

log = structlog.get_logger(__name__)

# How long one wait for a pub/sub message lasts, so stop() is noticed promptly.
POLL_SECONDS = 0.5
# After Redis failed, wait this long before subscribing again.
RETRY_SECONDS = 2.0
# Each interval between syncs is `every` times a factor drawn from 1 ± JITTER.
JITTER = 0.25
# After a sync the API did not answer, the next try is this many seconds away, then twice as
# many each time, up to the interval.
RETRY_FIRST = 1.0
# Until its first sync succeeds, a node gives its API this long to start (they may start
# together) before a failed sync is worth a warning in its log.
STARTING_SECONDS = 30.0


class SyncLoop:
    """Syncs `cache` in a daemon thread; a failed sync is logged and the loop carries on."""

    def __init__(
        self, cache: PackageCache, redis_client: redis.Redis, node: str, every: float = 60.0
    ) -> None:
        self.cache = cache
        self.redis = redis_client
        self.node = node
        self.every = every
        self.syncs = 0
        self.last_report: SyncReport | None = None
        self.subscribed = threading.Event()
        self._due = 0.0  # the first sync is due at once
        self._retry = RETRY_FIRST  # after a failed sync, the next try is this far away
        self._started = 0.0  # when the loop started (start())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sync-{node}", daemon=True)

    @property
    def channels(self) -> tuple[str, str]:
        db = database_number(self.redis)
        return naming.node_sync(self.node, db), naming.nodes_sync(db)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except redis.RedisError as e:
                self.subscribed.clear()
                log.warning("sync requests unavailable; retrying", node=self.node, error=str(e))
                # Without Redis the loop still syncs on time, it only misses requests.
                if not self._stop.wait(RETRY_SECONDS) and time.monotonic() >= self._due:
                    self._sync()

    def _listen(self) -> None:
        """Subscribe first, so no request is missed, then sync when asked or when due."""
        # Untyped before redis-py 8.2, typed since: the ignore holds for either.
        pubsub: Any = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call,unused-ignore]
        try:
            pubsub.subscribe(*self.channels)
            self.subscribed.set()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=min(POLL_SECONDS, self.every))
                if message is not None:
                    _drain(pubsub)  # a burst of requests needs one sync
                    self._sync()
                elif time.monotonic() >= self._due:
                    self._sync()
        finally:
            pubsub.close()

    def _sync(self) -> None:
        try:
            report = self.cache.sync()
        except RunError as e:  # the API is unreachable or refused: try again soon
            wait = self._failed()
            # As a node started beside its API finds it at first: still starting.
            since = time.monotonic() - self._started
            starting = self.last_report is None and since < STARTING_SECONDS
            say = log.info if starting else log.warning
            say("package sync failed", node=self.node, error=e.message, retry_seconds=wait)
            return
        except Exception:  # noqa: BLE001 - a failed sync must never end the loop
            self._failed()
            log.exception("package sync failed unexpectedly", node=self.node)
            return
        finally:
            self.syncs += 1
        self._retry = RETRY_FIRST
        self._due = time.monotonic() + interval(self.every)
        self.last_report = report
        if report.installed or report.removed or report.refused:
            log.info(
                "packages synced",
                node=self.node,
                installed=report.installed,
                removed=report.removed,
                refused=[key for key, _reason in report.refused],
            )

    def _failed(self) -> float:
        """Put the next try after a failed sync sooner than the interval, later each time;
        the seconds until then."""
        wait = min(self._retry, interval(self.every))
        self._due = time.monotonic() + wait
        self._retry = min(self._retry * 2, self.every)
        return wait


def interval(every: float) -> float:
    """Seconds to the next sync: `every`, give or take JITTER of it."""
    return every * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311 - spreading, not secrecy


def _drain(pubsub: Any) -> None:
    while pubsub.get_message(timeout=0) is not None:
        continue
