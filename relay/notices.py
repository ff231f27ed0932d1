"""How many notices agents sent an owner: per turn and per clock hour, counted in Redis.

Every notice an agent's call sends the owner counts: `notify_owner`'s, and the push each
`ask_owner` and `request_secret` question sends. `take` counts one only when both counts are
below their limits, in one script, so of any number of calls racing exactly the limit's number
get through and a refused one is never counted.
"""

from __future__ import annotations

import time
from enum import StrEnum

import redis

from relay import naming

HOUR = 3600
TURN_COUNT_SECONDS = 86_400  # a turn's count outlives any turn

_TAKE = """
local hour = tonumber(redis.call('GET', KEYS[1]) or '0')
local turn = tonumber(redis.call('GET', KEYS[2]) or '0')
if turn >= tonumber(ARGV[2]) then return 'turn' end
if hour >= tonumber(ARGV[1]) then return 'hour' end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return ''
"""


class Passed(StrEnum):
    """Which limit a refused notice would have passed."""

    TURN = "turn"
    HOUR = "hour"


def this_hour() -> int:
    """The current clock hour, in hours since the epoch."""
    return int(time.time()) // HOUR


def take(
    client: redis.Redis, owner_id: int, turn: str, per_turn: int, per_hour: int
) -> Passed | None:
    """Count one notice of the owner's `turn` and this hour; None when it fit, else the limit
    it would have passed (and it is not counted)."""
    keys = [naming.notices_of_hour(owner_id, this_hour()), naming.notices_of_turn(owner_id, turn)]
    args = [per_hour, per_turn, HOUR + 60, TURN_COUNT_SECONDS]
    passed = client.register_script(_TAKE)(keys=keys, args=args)
    text = passed.decode() if isinstance(passed, bytes) else str(passed or "")
    return Passed(text) if text else None


def give_back(client: redis.Redis, owner_id: int, turn: str) -> None:
    """Uncount a notice `take` counted that was never sent (its question was not saved)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.decr(naming.notices_of_hour(owner_id, this_hour()))
        pipe.decr(naming.notices_of_turn(owner_id, turn))
        pipe.execute()
