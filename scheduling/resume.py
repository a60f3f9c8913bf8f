"""What resuming a paused task now would do with the fires that came due in its pause, for
each choice of ``missed``: decided by the workflow's own functions (``policy.on_resume``, then
``policy.decide_due`` pass after pass), so the preview is what the resume records. Pure."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from datetime import datetime

from pydantic import BaseModel, Field

from scheduling.policy import FIRES_PER_PASS, Flight, Position, decide_due, on_resume
from scheduling.status import ResumeMissed, SkipReason, Trigger

MAX_RESUME_FIRES = 1000
# Fires a preview decides at most (a per-second cron paused for a day has 86,400): past them
# the answer says it is not complete rather than keep a read busy for long.
MAX_RESUME_DECIDED = 400 * FIRES_PER_PASS


class ResumeFire(BaseModel):
    """One fire of the pause and what the resume does with it: runs (as ``trigger``) or is
    SKIPPED (with ``skipped``, the reason its execution records)."""

    scheduled_at: datetime
    runs: bool
    trigger: Trigger | None = Field(default=None, description="how it runs: schedule (on time) "
                                    "or catchup")
    skipped: SkipReason | None = Field(default=None, description="why it does not run")


class ResumeChoice(BaseModel):
    """What one choice of ``missed`` does with the fires due so far in the pause."""

    missed: ResumeMissed
    runs: int = Field(description="fires that would run")
    skipped: int = Field(description="fires that would be SKIPPED")
    fires: list[ResumeFire] = Field(description="the newest fires decided, oldest first")
    more: int = Field(description="older fires decided but not listed")
    complete: bool = Field(default=True, description="false when the pause holds more fires "
                           "than a preview decides (100,000): the newest are then not among them")


def decide_resume(pos: Position, flight: Flight, missed: ResumeMissed, now: datetime, *,
                  limit: int = MAX_RESUME_FIRES) -> ResumeChoice:
    """The fires a resume at ``now`` with ``missed`` decides, as the workflow's passes decide
    them (``FIRES_PER_PASS`` at a time); the newest ``limit`` listed."""
    pos = on_resume(pos, missed, now)
    before = list(pos.queue)
    skipped: dict[datetime, SkipReason] = {}
    started: dict[datetime, Trigger] = {}
    complete = True
    while True:
        due = decide_due(pos, flight, now)
        skipped.update(due.skipped)
        started.update((run.scheduled_at, run.trigger) for run in due.start if run.trigger.scheduled)
        taken = max(filter(None, [pos.latest_taken, due.taken]), default=None)
        pos = replace(pos, next_fire_at=due.next_fire_at, queue=tuple(due.queue), latest_taken=taken)
        if not due.more:
            break
        if len(skipped) + len(started) >= MAX_RESUME_DECIDED:
            complete = False
            break
    # Runs of the schedule the passes queued (behind one another) start in turn.
    started.update((run.scheduled_at, run.trigger) for run in pos.queue
                   if run.trigger.scheduled and run not in before)
    fires = [ResumeFire(scheduled_at=at, runs=False, skipped=reason)
             for at, reason in skipped.items() if at not in started]
    fires += [ResumeFire(scheduled_at=at, runs=True, trigger=trigger) for at, trigger in started.items()]
    fires.sort(key=lambda fire: fire.scheduled_at)
    runs = sum(1 for fire in fires if fire.runs)
    listed = deque(fires, maxlen=limit)
    return ResumeChoice(missed=missed, runs=runs, skipped=len(fires) - runs, fires=list(listed),
                        more=len(fires) - len(listed), complete=complete)
