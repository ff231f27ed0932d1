"""Failed authentication per client address, counted in Redis for every API process.

A request whose token is wrong adds one to its address's count, a key that lives for the window
from the first failure on. The failure that reaches the limit locks the address until that key
expires: it goes on the lockouts stream, and the lockouts generation is bumped
(relay/generations.py), so that every API process hears of it.

Clients on the API's own host (loopback) are neither counted nor locked out: behind a proxy on
that host, every client would share its address unless SKILLFLEET_TRUSTED_PROXIES says to read
X-Forwarded-For. An IPv6 client counts by its /64.

Each process keeps the lockouts it read (`Lockouts`) and consults them before a token is checked,
from memory while the lockouts generation, read with the tokens' from the process's watch, is
the one it read them under. A request from an address that is not locked pays no Redis command
for this; a process reads the stream again only after a lockout, and only what is new.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any

import redis
import structlog

from relay import generations, naming
from relay.counters import FAILED_LOGINS

log = structlog.get_logger(__name__)

# Lockouts kept on the stream; older ones have ended long before it holds this many.
KEPT_LOCKOUTS = 10_000
# Outcomes of a failed token, as counted in skillfleet_failed_logins_total.
REFUSED = "refused"
LOCKED = "locked"

# KEYS: the address's count, the lockouts stream. ARGV: window (ms), limit, address, kept.
# Returns the count, and the milliseconds the address is locked for when this failure locked it
# (one past the limit, from a process that had not heard of the lock yet, locks it again).
_FAIL = """
local count = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if count == 1 or left < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  left = tonumber(ARGV[1])
end
if count < tonumber(ARGV[2]) then
  return {count, 0}
end
local now = redis.call('TIME')
local ends = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + left
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'address', ARGV[3], 'ends', ends)
return {count, left}
"""


def counted_as(address: str) -> str | None:
    """What wrong tokens from `address` count against: the address, an IPv6 client's /64 (the
    block one subscriber gets), or None for a client on this host (loopback), which is never
    locked out: a proxy there that does not say whom it forwards for would lock out everyone."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:64] or "unknown"
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    if parsed.is_loopback:
        return None
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def record_failure(client: redis.Redis, address: str, limit: int, window: int) -> float:
    """Count a wrong token from `address`: the seconds it is locked for when this failure
    reached the limit, `limit` in `window` seconds, else 0. Raises redis.RedisError."""
    script = client.register_script(_FAIL)
    with client.pipeline(transaction=False) as pipe:
        keys = [naming.failed_logins(address), naming.lockouts()]
        script(keys=keys, args=[window * 1000, limit, address, KEPT_LOCKOUTS], client=pipe)
        FAILED_LOGINS.add_to(pipe, REFUSED)
        replies: list[Any] = pipe.execute()
    locked_ms = int(replies[0][1])
    if not locked_ms:
        return 0.0
    FAILED_LOGINS.add(client, LOCKED)
    generations.bump(client, naming.lockouts_generation())
    return locked_ms / 1000


class Lockouts:
    """The locked addresses one process knows of, and until when (see the module's text)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = b"0"  # nothing was ever locked before the first bump
        self._cursor = "0-0"
        self._ends: dict[str, float] = {}  # address -> time.monotonic() its lock ends

    def seconds_left(self, client: redis.Redis, address: str, generation: bytes | None) -> float:
        """How long `address` stays locked (0 when it is not). Reads the lockouts stream only
        when `generation` moved since the last read; None (Redis away) reads nothing."""
        if generation is not None and generation != self._generation:
            self._catch_up(client, generation)
        ends = self._ends.get(address)
        return 0.0 if ends is None else max(ends - time.monotonic(), 0.0)

    def _catch_up(self, client: redis.Redis, generation: bytes) -> None:
        with self._lock:
            if generation == self._generation:
                return  # another thread read it meanwhile
            try:
                with client.pipeline(transaction=False) as pipe:
                    pipe.time()
                    pipe.xrange(naming.lockouts(), min=f"({self._cursor}", max="+")
                    (seconds, micros), entries = pipe.execute()
            except redis.RedisError as e:  # counted as unlocked until Redis answers again
                log.warning("lockouts not read", error_type=type(e).__name__)
                return
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            here = time.monotonic()
            ends = {a: end for a, end in self._ends.items() if end > here}
            for entry_id, fields in entries:
                left_ms = int(fields[b"ends"]) - now_ms
                if left_ms > 0:
                    ends[fields[b"address"].decode()] = here + left_ms / 1000
                self._cursor = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            self._ends, self._generation = ends, generation
