"""The words of a task's history: who changed it, and how a change names itself.

A task's events are written by its workflow, the one place every change reaches: through the
API (the actor is the API key's id, sent with the message), a plain Temporal signal or update
(sent without one: ``temporal signal``), or the scheduler itself. ``TaskRecord.event`` records
one; pure models, imported by the workflow and the API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from scheduling.spec import TaskChanges

# The actor of a message that named none: an operator's plain Temporal signal or update.
TEMPORAL_SIGNAL = "temporal signal"
# The actor of the reconciler's repairs.
RECONCILER = "reconciler"
# The actor of what the task's own policies do (the circuit breaker's pause).
SCHEDULER = "scheduler"

# The actions of a task's history (other parts of the scheduler add their own words).
CREATE, UPDATE, ROLLBACK = "create", "update", "rollback"
PAUSE, RESUME, CANCEL, TRIGGER, REPLAY = "pause", "resume", "cancel", "trigger", "replay"
RESTART, MARKED = "restart", "marked"
BACKFILL, BACKFILL_DONE, BACKFILL_STOPPED = "backfill", "backfill_done", "backfill_stopped"
PROBE_FAILED = "probe_failed"  # the breaker's probe failed: paused again, the cool-down doubled


class Origin(BaseModel):
    """Who sent a change of the spec, and as what: the API sends its key's id; a rollback
    names the version it restores."""

    actor: str | None = None
    action: str = UPDATE
    detail: dict[str, Any] | None = Field(default=None, description="e.g. the version restored")


def actor_of(actor: str | None) -> str:
    """The actor a message names, or ``temporal signal`` for one that names none."""
    return actor or TEMPORAL_SIGNAL


class SpecChange(BaseModel):
    """A change of the spec as the API sends it: the changes, who asked as what, and the herd
    the task's first run under the new schedule would join."""

    changes: TaskChanges
    origin: Origin = Field(default_factory=Origin)
    crowd: int = Field(default=0, ge=0, description="tasks due in the second ``crowd_at`` "
                       "when the API sent the change (TaskState.crowd)")
    crowd_at: datetime | None = Field(
        default=None, description="the second of the next run the API expects after the change; "
        "the count holds only if a retime puts the next run there (None: not counted)")
