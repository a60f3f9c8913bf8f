"""What a jobs worker tells a task's workflow about a run: that its job started (a signal,
sent after the start, so a herd starts first), or, for an attempt that would start late, a
question whether it still may (an update, answered before the job starts)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from activities.on_time import due_of
from activities.payloads import CLAIM_RUN, RUN_STARTED, JobInput, RunStart, job_failure
from scheduling.policy import UNTAKEN_AFTER, fresh_grant
from scheduling.status import JobFailure

log = structlog.get_logger("task_scheduler.jobs")

# A claim waits for its answer while a grant could still start the job in time (claim_patience):
# a backlogged workflow answers late, and a refusal on a short timeout only adds a failed
# attempt and a catch-up to the backlog. The grant's own time says whether it is still fresh
# (policy.fresh_grant). A workflow of older code answers a bare True, trusted only when it came
# within CLAIM_TIMEOUT of the ask (its grant is no earlier than the ask).
CLAIM_TIMEOUT = timedelta(seconds=3)
# Room left, past the job's run timeout, in the attempt's start-to-close timeout: the attempt
# reports its end only once its start report is out (retried up to UNTAKEN_AFTER), then
# completes over one more call.
CLAIM_MARGIN = UNTAKEN_AFTER + timedelta(seconds=2)
# A start report that fails is sent again, until the workflow would find the run untaken.
REPORT_RETRY_SECONDS = 0.5


class StartReports:
    """Start reports and late-start claims, through the worker's Temporal client."""

    def __init__(self, client: Client | None) -> None:
        self._client = client
        self._sending: dict[tuple[str, int], asyncio.Task[bool]] = {}

    def report(self, job_input: JobInput, workflow_id: str | None, attempt: int,
               at: datetime) -> None:
        """Tell the workflow that the run's job started; never waits for the answer."""
        if self._client is None or workflow_id is None:
            return
        info = activity.info()
        key = (info.activity_id, attempt)  # a ghost and its catch-up share the execution id
        # To the workflow run that sent it: never a later run after a continue-as-new.
        handle = self._client.get_workflow_handle(workflow_id, run_id=info.workflow_run_id)
        task = asyncio.create_task(self._send(handle, RunStart(
            execution_id=job_input.execution_id, attempt=attempt, at=at,
            activity_id=info.activity_id)))
        self._sending[key] = task
        task.add_done_callback(lambda done: self._delivered(key, done))

    def _delivered(self, key: tuple[str, int], done: asyncio.Task[bool]) -> None:
        # A report given up on stays until its attempt asks (``sent``), which every attempt does.
        if not done.cancelled() and done.exception() is None and done.result():
            self._forget(key, done)

    def _forget(self, key: tuple[str, int], task: asyncio.Task[bool]) -> None:
        if self._sending.get(key) is task:
            del self._sending[key]

    async def sent(self, attempt: int) -> bool:
        """Return once the attempt's start report is sent (or given up on): an attempt reports
        its end only after its start, so the workflow never learns them the other way round.
        False if it was given up on."""
        key = (activity.info().activity_id, attempt)
        task = self._sending.get(key)
        if task is None:
            return True
        try:
            return await asyncio.shield(task)
        finally:  # asked once per attempt, even when its wait is cut short
            self._forget(key, task)

    async def claim(self, job_input: JobInput, workflow_id: str | None, attempt: int) -> None:
        """Ask the workflow whether the run may start now; raise Late if not."""
        if self._client is None or workflow_id is None:
            return
        info = activity.info()
        handle = self._client.get_workflow_handle(workflow_id, run_id=info.workflow_run_id)
        asked = datetime.now(UTC)
        claim = RunStart(execution_id=job_input.execution_id, attempt=attempt, at=asked,
                         activity_id=info.activity_id, timed=True)
        patience = claim_patience(job_input, info, asked)
        try:
            async with asyncio.timeout(patience.total_seconds()):
                answer = await handle.execute_update(
                    CLAIM_RUN, claim, rpc_timeout=patience,
                    id=f"claim-{claim.activity_id}-{attempt}")  # a ghost's catch-up asks anew
        except (TimeoutError, RPCError, WorkflowUpdateFailedError,
                WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
            # Unanswered (or this worker is stopping): it does not start.
            log.warning("job.claim_unanswered", execution_id=job_input.execution_id,
                        waited=round((datetime.now(UTC) - asked).total_seconds(), 3), error=str(exc))
            answer = False
        if not granted(answer, asked, datetime.now(UTC)):
            raise job_failure(
                JobFailure.LATE,
                "not started: it reached its worker late and its workflow did not let it start in time",
                retryable=False,
            )

    async def _send(self, handle: WorkflowHandle[Any, Any], report: RunStart) -> bool:
        tries = int(UNTAKEN_AFTER.total_seconds() / REPORT_RETRY_SECONDS)
        for _ in range(tries):
            try:
                await handle.signal(RUN_STARTED, report)
                return True
            except RPCError as exc:
                last = exc
                await asyncio.sleep(REPORT_RETRY_SECONDS)
        log.warning("job.start_unreported", execution_id=report.execution_id, error=str(last))
        return False


def claim_patience(job_input: JobInput, info: activity.Info, now: datetime) -> timedelta:
    """How long a claim waits for its answer: while a grant would still start the run within
    its grace (late_after_seconds past its due time) and leave the job its whole run timeout
    in the attempt's start-to-close timeout; never less than CLAIM_TIMEOUT."""
    ends = []
    if info.start_to_close_timeout is not None:
        ends.append(info.started_time + info.start_to_close_timeout - CLAIM_MARGIN
                    - timedelta(seconds=job_input.run_timeout_seconds))
    if job_input.late_after_seconds is not None:
        ends.append(due_of(job_input) + timedelta(seconds=job_input.late_after_seconds))
    return max(CLAIM_TIMEOUT, min(ends) - now) if ends else CLAIM_TIMEOUT


def granted(answer: object, asked: datetime, now: datetime) -> bool:
    """Whether the workflow's answer to a claim lets the run start now."""
    if answer is True:  # older workflow code: its grant came after the ask
        return now - asked <= CLAIM_TIMEOUT
    if isinstance(answer, str):
        try:
            answer = datetime.fromisoformat(answer)
        except ValueError:
            return False
    return isinstance(answer, datetime) and answer.tzinfo is not None and fresh_grant(answer, now)
