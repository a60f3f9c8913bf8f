"""The workflow worker's runtime options, handed to each task workflow run by a local activity.

A workflow may not read settings (its code must replay the same anywhere): it asks the worker
that runs it, once per workflow run, and the answer is recorded in its history."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import activity

from config.settings import Settings

RUN_OPTIONS = "run_options"
# The options reach a run before its first pass: a worker answers at once.
RUN_OPTIONS_TIMEOUT = timedelta(seconds=10)
# The workflow code's release, recorded with each workflow run's options: a change that may
# only apply to runs started on it checks it instead of asking a patch, which would cost every
# new workflow a marker and a search-attribute upsert (docs/upgrades.md lists each release).
RELEASE = 11
# The first release of each change that checks it:
QUIET_STATUS = 1  # TaskStatus never shows RUNNING; a run sent ahead alone writes no row
START_RELEASE = 2  # a start input carries its starter's release; from it on, no patch is asked
NEXT_RUN_KEPT = 2  # NextRunAt keeps a run's instant until the task's next upsert
HERD_BEAT = 3  # a run sent further ahead than the usual lead beats further apart near its instant
CANCEL_FIRST = 4  # a run's cancel is sent before a row write, which would hold it, starts
DELAY_GOES_ON = 5  # a fixed_delay fire skipped as missed plans the next fire (policy.take_back)
ROWS_CARRIED = 6  # a run continues as new while its rows wait for the database, carrying them
REFUSED_WITHDRAWN = 7  # a refused run waiting to be sent again is withdrawn however near its instant
HELD_KEPT = 8  # a schedule change while a workflow run drains keeps the runs the drain holds
SPARED_UNTAKEN = 8  # a run a pause spared, found untaken, goes back to the pause, not the policy
CALENDARS_CHANGED = 9  # a calendar read records only the calendars changed since the last one
PAUSE_KEEPS_SPARE = 9  # a run a pause spared stays the pause's when a later withdrawal spares it
CANCEL_TRIPS_NOTHING = 10  # a run that fails as its task is cancelled trips no breaker
NAME_FITS = 10  # TaskName shows as much of the name as fits (attributes.shown_name)
CANCELLED_RUNNING = 10  # a run cancelled while running, its start report lost, is recorded so
COMPLETION_READ = 11  # a run whose last attempt timed out after its job started reads its row


class RunOptions(BaseModel):
    """What a task workflow run takes from its worker (the defaults: no lead, as a workflow
    started without options ran)."""

    lead_seconds: float = Field(
        default=0.0, ge=0,
        description="dispatch each run this long before its instant; the job waits for the "
        "instant on the worker's clock (0: dispatch at the instant)",
    )
    max_lead_seconds: float = Field(default=60.0, ge=0,
                                    description="the lead grows with the task's backlog up to this")
    herd_rate: float = Field(
        default=0.0, ge=0,
        description="runs per second dispatched ahead of a herd (policy.herd_lead; 0: off)",
    )
    history_limit: int = Field(default=10_000, gt=0, description="continue-as-new past this length")
    release: int = Field(default=0, ge=0, description="the workflow code's release of the worker "
                         "that answered (0: a run recorded before releases were)")

    @classmethod
    def of(cls, settings: Settings) -> RunOptions:
        """The options a workflow worker with these settings gives its workflow runs."""
        return cls(lead_seconds=settings.dispatch.lead_seconds,
                   max_lead_seconds=settings.dispatch.max_lead_seconds,
                   herd_rate=settings.dispatch.herd_rate,
                   history_limit=settings.worker.history_limit)


class RunOptionsActivities:
    """Answers a workflow run's question for its options with the worker's own."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options

    @activity.defn(name=RUN_OPTIONS)
    async def run_options(self) -> RunOptions:
        """This worker's options and its code's release, for the workflow run that asks (a
        local activity)."""
        return self._options.model_copy(update={"release": RELEASE})
