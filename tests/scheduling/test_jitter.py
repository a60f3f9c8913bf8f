"""Deterministic jitter spreads a herd over the window."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from scheduling.jitter import jitter_offset

TEN = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_a_thousand_tasks_at_ten_spread_over_the_minute() -> None:
    offsets = [jitter_offset(uuid.uuid4().hex, TEN, 60) for _ in range(1000)]
    assert all(timedelta(0) <= o < timedelta(seconds=60) for o in offsets)
    per_second = [0] * 60
    for offset in offsets:
        per_second[int(offset.total_seconds())] += 1
    # evenly spread: every second of the minute gets some, none gets a crowd
    assert min(per_second) >= 3 and max(per_second) <= 40, per_second


def test_jitter_is_deterministic_per_task_and_fire_and_off_when_zero() -> None:
    assert jitter_offset("task-a", TEN, 60) == jitter_offset("task-a", TEN, 60)
    assert jitter_offset("task-a", TEN, 60) != jitter_offset("task-a", TEN + timedelta(days=1), 60) or \
        jitter_offset("task-a", TEN + timedelta(days=2), 60) != jitter_offset("task-a", TEN, 60)
    assert jitter_offset("task-a", TEN, 0) == timedelta(0)
