"""Deterministic jitter: the same task and fire time always get the same offset, so a replayed
workflow computes the very same instant, while a 10:00 herd spreads over the jitter window."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta


def jitter_offset(task_id: str, scheduled_at: datetime, jitter_seconds: float) -> timedelta:
    """An offset in [0, jitter_seconds), by millisecond, from a hash of task and fire time."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{task_id}|{scheduled_at.isoformat()}".encode()).digest()
    span_ms = max(1, int(jitter_seconds * 1000))
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % span_ms)
