"""How a run dispatched ahead of its instant shows that it is alive while it waits.

A waiting run heartbeats about five times over its wait, and near its instant every **beat**
apart: 2 s, or, for a run sent further ahead than the usual lead (its place in a herd, or
after late timers, policy.lead), by as much as its wait exceeds that lead, up to 20 s. Its
workflow withdraws it only further than a beat and a second ahead of its instant
(policy.may_withdraw): a cancel reaches a waiting run at its next heartbeat. So a withdrawal
still reaches a run sent the usual lead ahead or more for at least the usual lead less 3 s
after its dispatch, as before. Each heartbeat is a write on the server: a herd of 10,000
beating every 2 s would cost it 5,000 writes a second in its last seconds before the
instant, each run at its own beat about 600 (both computed, at the default herd rate).

A run of a herd dispatched minutes ahead gets a heartbeat timeout of half its wait (never less
than the task's own), so that thousands of waiting runs cost the server a few heartbeats each,
not one every 20 s each.
"""

from __future__ import annotations

HEARTBEATS_PER_WAIT = 5
MIN_BEAT_SECONDS = 2.0
# At most: a cancel near a run's instant waits a beat for the run to hear of it
# (workflows/task.py, CANCEL_SLACK). At 10 s a herd of 10,000 ran late (docs/capacity.md).
MAX_BEAT_SECONDS = 20.0
# Without a heartbeat timeout a beat still carries cancels this often.
DEFAULT_BEAT_SECONDS = 10.0


def near_beat(extra_lead_seconds: float) -> float:
    """The beat of a run sent ``extra_lead_seconds`` further ahead than the usual lead."""
    return min(MAX_BEAT_SECONDS, max(MIN_BEAT_SECONDS, extra_lead_seconds))


def waiting_heartbeat_timeout(configured_seconds: float, wait_seconds: float) -> float:
    """The heartbeat timeout of a run that waits ``wait_seconds`` for its instant."""
    return max(configured_seconds, wait_seconds / 2)


def beat_every(remaining_seconds: float, timeout_seconds: float | None,
               beat_seconds: float = MIN_BEAT_SECONDS) -> float:
    """Seconds between heartbeats of a run with ``remaining_seconds`` left to wait: a fifth of
    the rest, never closer than its beat, and two thirds of the timeout apart at most, so a
    slow server still sees it alive (a shorter timeout only brings beats closer)."""
    ceiling = 2 * timeout_seconds / 3 if timeout_seconds else DEFAULT_BEAT_SECONDS
    spread = max(beat_seconds, remaining_seconds / HEARTBEATS_PER_WAIT)
    return max(0.5, min(ceiling, spread))
