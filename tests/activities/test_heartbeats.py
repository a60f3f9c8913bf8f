"""How often a run dispatched ahead heartbeats while it waits, and its heartbeat timeout."""

from __future__ import annotations

from activities.heartbeats import beat_every, near_beat, waiting_heartbeat_timeout


def test_the_usual_lead_beats_every_two_seconds() -> None:
    assert beat_every(10.0, 30.0) == 2.0
    assert beat_every(3.0, 30.0) == 2.0  # never more often than every 2 s


def test_a_long_wait_beats_about_five_times_within_its_timeout() -> None:
    wait = 200.0
    timeout = waiting_heartbeat_timeout(30.0, wait)
    assert timeout == 100.0
    every = beat_every(wait, timeout)
    assert every == 40.0 and wait / every == 5
    # With the task's own 30 s timeout it would have to beat every 20 s: ten times.
    assert beat_every(wait, 30.0) == 20.0


def test_the_timeout_is_never_shorter_than_the_tasks_own() -> None:
    assert waiting_heartbeat_timeout(30.0, 10.0) == 30.0
    assert waiting_heartbeat_timeout(30.0, 0.0) == 30.0
    assert waiting_heartbeat_timeout(30.0, -5.0) == 30.0
    assert waiting_heartbeat_timeout(300.0, 200.0) == 300.0


def test_a_beat_always_comes_well_inside_the_timeout() -> None:
    for timeout in (1.0, 2.0, 5.0, 30.0, 300.0):
        for remaining in (0.0, 1.0, 10.0, 100.0, 1000.0):
            assert 0.5 <= beat_every(remaining, timeout) <= max(0.5, 2 * timeout / 3)
    assert beat_every(100.0, None) == 10.0


def test_a_run_sent_further_ahead_beats_that_much_further_apart_up_to_twenty_seconds() -> None:
    assert [near_beat(extra) for extra in (-4.0, 0.0, 1.9, 6.0, 20.0, 200.0)] == [
        2.0, 2.0, 2.0, 6.0, 20.0, 20.0]
    assert beat_every(8.0, 30.0, 6.0) == 6.0  # not a fifth of the rest
    assert beat_every(200.0, 100.0, 20.0) == 40.0  # far out, still a fifth
    # The timeout only brings beats closer: sooner is always safe for a withdrawal.
    assert beat_every(8.0, 6.0, 20.0) == 4.0
