"""Cron times: standard five-field expressions evaluated in an IANA time zone (croniter).

Daylight saving time follows croniter: a time that falls in the spring gap runs at the first
minute after the gap (`30 2 * * *` in Europe/Berlin runs at 03:00 that day), and a time that
falls in the autumn repeat runs in both hours (02:30 CEST and 02:30 CET).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from store.errors import CronInvalid, CronNeverFires, TimeZoneUnknown
from store.limits import MAX_CRON_CHARS

FIELDS = 5
# Where check_cron looks for a first time: any fixed start will do, and a fixed one keeps the
# answer the same on every call.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def time_zone(name: object) -> ZoneInfo:
    """The IANA time zone `name`; anything else is refused."""
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith(("/", ".")):
        raise TimeZoneUnknown("'time_zone' must be an IANA time zone name such as Europe/Berlin.")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TimeZoneUnknown(
            f"'{name}' is not an IANA time zone; use a name such as Europe/Berlin or UTC."
        ) from None


def check_cron(expression: object) -> str:
    """A standard five-field cron expression, whitespace normalised; anything else is refused."""
    if not isinstance(expression, str):
        raise CronInvalid("'cron' must be a five-field cron expression such as '30 2 * * *'.")
    if len(expression) > MAX_CRON_CHARS:
        raise CronInvalid(f"'cron' has at most {MAX_CRON_CHARS} characters.")
    fields = expression.split()
    if len(fields) != FIELDS:
        raise CronInvalid(
            f"'cron' must have exactly 5 fields (minute hour day month weekday), "
            f"not {len(fields)}: '{expression}'."
        )
    normalised = " ".join(fields)
    try:
        schedule = croniter(normalised, _EPOCH)
    except (CroniterError, ValueError, KeyError) as e:
        raise CronInvalid(f"'cron' is not a valid cron expression: '{normalised}' ({e}).") from e
    try:
        schedule.get_next(datetime)
    except CroniterBadDateError as e:
        raise CronNeverFires(
            f"'cron' never fires: '{normalised}' names no date that exists, such as the 31st "
            "of a month that has 30 days or fewer."
        ) from e
    return normalised


def next_time(expression: str, zone: str, after: datetime) -> datetime:
    """The first cron time strictly after `after`, in UTC."""
    local = after.astimezone(time_zone(zone))
    found: datetime = croniter(expression, local).get_next(datetime)
    return found.astimezone(UTC)


def latest_time(expression: str, zone: str, at_or_before: datetime) -> datetime:
    """The last cron time at or before `at_or_before`, in UTC."""
    local = at_or_before.astimezone(time_zone(zone))
    # get_prev is strictly before; a whole second past now's whole second, so a time exactly
    # now counts and none still to come does (now's fraction would carry 59.5 s into the
    # next minute, and a tick then ran a time that had not come, claiming it as its next).
    nudged = math.floor(local.timestamp()) + 1
    found: datetime = croniter(expression, datetime.fromtimestamp(nudged, local.tzinfo)).get_prev(
        datetime
    )
    return found.astimezone(UTC)
