"""The herd gauge: a task joining many due at the same instant is led further ahead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.herd import HerdGauge

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_lone_task_gets_the_base_lead() -> None:
    gauge = HerdGauge(10, 60, dispatch_rate=100)
    assert gauge.lead_for(NOW + timedelta(minutes=5), NOW) == 10


def test_the_lead_grows_with_the_herd_up_to_the_maximum() -> None:
    gauge = HerdGauge(10, 60, dispatch_rate=100)
    instant = NOW + timedelta(minutes=5)
    leads = [gauge.lead_for(instant + timedelta(milliseconds=n % 1000), NOW) for n in range(10_000)]
    assert leads[0] == 10 and leads[100] == 11 and leads[1000] == 20
    assert leads == sorted(leads) and max(leads) == 60
    # Neighbours within 2 s belong to the herd, tasks further away do not.
    assert gauge.lead_for(instant + timedelta(seconds=2), NOW) == 60
    assert gauge.lead_for(instant + timedelta(seconds=10), NOW) == 10


def test_old_instants_are_forgotten_and_zero_turns_it_off() -> None:
    gauge = HerdGauge(10, 60, dispatch_rate=100)
    for _ in range(300):
        gauge.lead_for(NOW + timedelta(seconds=1), NOW)
    later = NOW + timedelta(hours=1)
    for _ in range(256):
        gauge.lead_for(later + timedelta(minutes=5), later)
    assert all(second >= int(later.timestamp()) - 2 for second in gauge._counts)
    assert HerdGauge(0, 60, dispatch_rate=100).lead_for(NOW, NOW) == 0
    assert HerdGauge(10, 60, dispatch_rate=0).lead_for(NOW, NOW) == 10
    assert HerdGauge(10, 60, dispatch_rate=100).lead_for(None, NOW) == 10
