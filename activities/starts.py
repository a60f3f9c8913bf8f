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

from activities.payloads import CLAIM_RUN, RUN_STARTED, JobInput, RunStart, job_failure
from scheduling.policy import UNTAKEN_AFTER
from scheduling.status import JobFailure

log = structlog.get_logger("task_scheduler.jobs")

# A claim the workflow has not answered in this time is refused: the workflow decides the
# fire (it finds the run untaken), and a later answer cannot start a job nobody waits for.
# Shorter than UNTAKEN_AFTER - CLAIM_AFTER: an answer that comes later is not waited for, so a
# granted claim never starts a job after the workflow found the run untaken.
CLAIM_TIMEOUT = timedelta(seconds=3)
# How long a cancelled job waits for its start report to go out before it reports its end.
REPORT_WAIT_ON_CANCEL = 2.0
# A start report that fails is sent again, until the workflow would find the run untaken.
REPORT_RETRY_SECONDS = 0.5


class StartReports:
    """Start reports and late-start claims, through the worker's Temporal client."""

    def __init__(self, client: Client | None) -> None:
        self._client = client
        self._sending: dict[tuple[str, int], asyncio.Task[None]] = {}

    def report(self, job_input: JobInput, workflow_id: str | None, attempt: int,
               at: datetime) -> None:
        """Tell the workflow that the run's job started; never waits for the answer."""
        if self._client is None or workflow_id is None:
            return
        key = (job_input.execution_id, attempt)
        info = activity.info()
        # To the workflow run that sent it: never a later run after a continue-as-new.
        handle = self._client.get_workflow_handle(workflow_id, run_id=info.workflow_run_id)
        task = asyncio.create_task(self._send(handle, RunStart(
            execution_id=job_input.execution_id, attempt=attempt, at=at,
            activity_id=info.activity_id)))
        self._sending[key] = task
        task.add_done_callback(lambda _: self._sending.pop(key, None))

    async def sent(self, job_input: JobInput, attempt: int) -> None:
        """Return once the attempt's start report is sent (or given up on): an attempt reports
        its end only after its start, so the workflow never learns them the other way round."""
        task = self._sending.get((job_input.execution_id, attempt))
        if task is not None:
            await asyncio.shield(task)

    async def claim(self, job_input: JobInput, workflow_id: str | None, attempt: int) -> None:
        """Ask the workflow whether the run may start now; raise Late if not."""
        if self._client is None or workflow_id is None:
            return
        handle = self._client.get_workflow_handle(workflow_id,
                                                  run_id=activity.info().workflow_run_id)
        claim = RunStart(execution_id=job_input.execution_id, attempt=attempt,
                         at=datetime.now(UTC), activity_id=activity.info().activity_id)
        try:
            allowed = await handle.execute_update(
                CLAIM_RUN, claim, result_type=bool, rpc_timeout=CLAIM_TIMEOUT,
                id=f"claim-{claim.activity_id}-{attempt}")  # a ghost's catch-up asks anew
        except (TimeoutError, RPCError, WorkflowUpdateFailedError,
                WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
            # Unanswered (or this worker is stopping): it does not start.
            log.warning("job.claim_unanswered", execution_id=job_input.execution_id, error=str(exc))
            allowed = False
        if not allowed:
            raise job_failure(
                JobFailure.LATE,
                "not started: it reached its worker late and its fire was decided again",
                retryable=False,
            )

    async def _send(self, handle: WorkflowHandle[Any, Any], report: RunStart) -> None:
        tries = int(UNTAKEN_AFTER.total_seconds() / REPORT_RETRY_SECONDS)
        for _ in range(tries):
            try:
                await handle.signal(RUN_STARTED, report)
                return
            except RPCError as exc:
                last = exc
                await asyncio.sleep(REPORT_RETRY_SECONDS)
        log.warning("job.start_unreported", execution_id=report.execution_id, error=str(last))
