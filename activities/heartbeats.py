"""How a run dispatched ahead of its instant shows that it is alive while it waits.

A waiting run heartbeats about five times over its wait, at least 2 s apart: a cancel, pause or
update that arrives more than one beat before the instant withdraws it (2 s with the usual
10 s lead). A run of a herd dispatched minutes ahead gets a heartbeat timeout of half its wait
(never less than the task's own), so that thousands of waiting runs cost the server a few
heartbeats each, not one every 20 s each.
"""

from __future__ import annotations

HEARTBEATS_PER_WAIT = 5
MIN_BEAT_SECONDS = 2.0
# Without a heartbeat timeout a beat still carries cancels this often.
DEFAULT_BEAT_SECONDS = 10.0


def waiting_heartbeat_timeout(configured_seconds: float, wait_seconds: float) -> float:
    """The heartbeat timeout of a run that waits ``wait_seconds`` for its instant."""
    return max(configured_seconds, wait_seconds / 2)


def beat_every(remaining_seconds: float, timeout_seconds: float | None) -> float:
    """Seconds between heartbeats of a run with ``remaining_seconds`` left to wait: two thirds
    of the timeout apart at most, so a slow server still sees it alive."""
    ceiling = 2 * timeout_seconds / 3 if timeout_seconds else DEFAULT_BEAT_SECONDS
    spread = max(MIN_BEAT_SECONDS, remaining_seconds / HEARTBEATS_PER_WAIT)
    return max(0.5, min(ceiling, spread))
