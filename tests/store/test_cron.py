"""Cron times in the job's time zone, across daylight saving changes (croniter's rules)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from store.cron import check_cron, latest_time, next_time, time_zone
from store.errors import CronInvalid, CronNeverFires, TimeZoneUnknown


def times(expression: str, zone: str, start: datetime, count: int) -> list[str]:
    found, at = [], start
    for _ in range(count):
        at = next_time(expression, zone, at)
        found.append(at.isoformat())
    return found


def test_half_past_two_in_berlin_keeps_local_time_across_the_march_change():
    # 2026-03-29 02:00 CET jumps to 03:00 CEST: 02:30 does not exist that night.
    start = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert times("30 2 * * *", "Europe/Berlin", start, 4) == [
        "2026-03-28T01:30:00+00:00",  # 02:30 CET
        "2026-03-29T01:00:00+00:00",  # the gap: croniter runs at 03:00 CEST, the first minute after
        "2026-03-30T00:30:00+00:00",  # 02:30 CEST
        "2026-03-31T00:30:00+00:00",
    ]


def test_half_past_two_in_berlin_runs_in_both_hours_of_the_october_repeat():
    start = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)
    assert times("30 2 * * *", "Europe/Berlin", start, 3) == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST
        "2026-10-25T01:30:00+00:00",  # 02:30 CET, the repeated hour
        "2026-10-26T01:30:00+00:00",
    ]


def test_nine_on_mondays_in_new_york_stays_nine_across_the_november_change():
    # DST ends 2026-11-01: 09:00 EDT is 13:00 UTC, 09:00 EST is 14:00 UTC.
    start = datetime(2026, 10, 20, 0, 0, tzinfo=UTC)
    assert times("0 9 * * 1", "America/New_York", start, 3) == [
        "2026-10-26T13:00:00+00:00",
        "2026-11-02T14:00:00+00:00",
        "2026-11-09T14:00:00+00:00",
    ]


def test_the_latest_time_counts_a_time_that_is_exactly_now():
    now = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert latest_time("0 9 * * *", "Europe/Berlin", now) == now
    assert latest_time("0 9 * * *", "Europe/Berlin", now.replace(minute=59)) == now


def test_the_latest_time_half_a_second_before_a_minute_is_the_minute_that_came_not_the_next():
    almost = datetime(2026, 12, 6, 17, 53, 59, 500_000, tzinfo=UTC)
    assert latest_time("* * * * *", "Asia/Kolkata", almost) == almost.replace(
        second=0, microsecond=0
    )
    # So a tick then claims this minute's time and names the next one as still to come.
    assert next_time("* * * * *", "Asia/Kolkata", almost) == datetime(
        2026, 12, 6, 17, 54, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("* * * *", "exactly 5 fields"),
        ("0 0 * * * *", "exactly 5 fields"),
        ("61 * * * *", "not a valid cron expression"),
        ("every day", "exactly 5 fields"),
        ("a b c d e", "not a valid cron expression"),
        (7, "five-field cron expression"),
        ("1 " * 60, "at most 100 characters"),
    ],
)
def test_cron_garbage_is_refused_with_a_clear_message(expression, words):
    with pytest.raises(CronInvalid) as refused:
        check_cron(expression)
    assert words in refused.value.message
    assert refused.value.code == "cron_invalid" and refused.value.status == 422


def test_cron_whitespace_is_normalised():
    assert check_cron("  30   2 * *  1-5 ") == "30 2 * * 1-5"


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../../etc/passwd", "Europe/berlin!", None])
def test_unknown_time_zones_are_refused(name):
    with pytest.raises(TimeZoneUnknown) as refused:
        time_zone(name)
    assert "IANA time zone" in refused.value.message


@pytest.mark.parametrize(
    "expression", ["0 0 31 2 *", "0 0 30 2 *", "15 4 31 4,6,9,11 *", "*/5 * 30,31 2 *"]
)
def test_a_cron_naming_no_date_that_exists_is_refused_as_never_firing(expression):
    with pytest.raises(CronNeverFires) as refused:
        check_cron(expression)
    assert refused.value.code == "cron_never_fires" and refused.value.status == 422
    assert refused.value.message.startswith(f"'cron' never fires: '{expression}'")


@pytest.mark.parametrize("expression", ["0 0 29 2 *", "0 0 31 * *", "0 0 31 2 1", "0 0 30 1-3 *"])
def test_a_cron_that_fires_rarely_or_on_some_months_is_kept(expression):
    assert check_cron(expression) == expression
    assert next_time(expression, "UTC", datetime(2024, 3, 1, tzinfo=UTC)) is not None
