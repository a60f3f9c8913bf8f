"""The job activity: runs one attempt of a task's job (HTTP call, handler or workflow)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import structlog
from opentelemetry import propagate, trace
from sqlalchemy import Engine
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ApplicationError,
    WorkflowAlreadyStartedError,
)

from activities.execution_rows import RunRows, completed_result
from activities.handlers import Handler, HandlerContext, call_handler
from activities.on_time import (
    WaitingRuns,
    due_of,
    heartbeat_forever,
    heartbeat_while_waiting,
    refuse_if_late,
    wait_for_instant,
)
from activities.payloads import RUN_JOB, STARTED, JobInput, JobResult, job_failure, tenant_busy
from activities.precision import after_the_starts, queued_bookkeeping_done
from activities.share import DEFAULT_SLOTS, SlotShare
from activities.signing import Signer
from activities.starts import StartReports
from activities.workflow_jobs import WorkflowJobRules, refusal
from outbound.calls import Outbound, OutboundLimits, Signing
from outbound.egress import EgressRefused
from outbound.signing import traceparent
from scheduling.policy import UNTAKEN_AFTER, must_claim, retryable_http_status
from scheduling.spec import (
    ATTEMPT_HEADER,
    SCHEDULED_AT_HEADER,
    TASK_ID_HEADER,
    HandlerJob,
    HttpJob,
    WorkflowJob,
    redact_url,
)
from scheduling.status import JobFailure
from store.batch import BatchWriter
from store.quotas import Quota, quota_for

log = structlog.get_logger("task_scheduler.jobs")

_tracer = trace.get_tracer("task_scheduler.jobs")


class JobActivities:
    """Job runners; the worker builds one with its HTTP client, handlers and Temporal client."""

    def __init__(
        self,
        *,
        http: httpx.AsyncClient,
        handlers: Mapping[str, Handler],
        client: Client | None,
        workflow_jobs: WorkflowJobRules | None = None,
        max_response_bytes: int = 1024,
        engine: Engine | None = None,
        writer: BatchWriter | None = None,
        outbound: Outbound | None = None,
        signer: Signer | None = None,
        share: SlotShare | None = None,
    ) -> None:
        self._rows = RunRows(engine, writer) if engine is not None else None
        self._starts = StartReports(client)
        # The worker shares one Outbound (its slots) between jobs and webhooks.
        self._outbound = outbound or Outbound(http, OutboundLimits(max_body_bytes=max_response_bytes))
        self._handlers = dict(handlers)
        self._client = client
        self._engine = engine
        self._signer = signer
        self._share = share or SlotShare(DEFAULT_SLOTS)
        self._waiting = WaitingRuns()
        # None: no workflow job may start anything.
        self._workflow_jobs = workflow_jobs or WorkflowJobRules()

    @activity.defn(name=RUN_JOB)
    async def run_job(self, job_input: JobInput) -> JobResult:
        """Wait for the run's instant on this worker's clock, then run one attempt of the job,
        heartbeating so a cancel or a dead worker is noticed."""
        info = activity.info()
        # The run's attempt: a run sent again after a refused retry counts on.
        attempt = job_input.attempts_used + info.attempt
        bound = log.bind(
            task_id=job_input.task_id,
            execution_id=job_input.execution_id,
            tenant=job_input.tenant_id,
            workflow_id=info.workflow_id,
            attempt=attempt,
        )
        # The server retries an attempt whose completion it never got: the job ran already.
        previous = await self._rows.previous(job_input) if attempt > 1 and self._rows else None
        done = completed_result(previous, job_input.trigger)
        if done is not None:
            bound.info("job.already_completed", completed_attempt=done.attempt)
            return done
        started_before = job_input.started or STARTED in info.heartbeat_details or (
            previous is not None and previous.started_at is not None)
        # An attempt over its tenant's share gives its slot back at once and its workflow
        # sends the run again (workflows/inflight.py), counting on from the attempts made. A
        # retry sent by older code is never refused (that would cost its run an attempt), nor
        # a run refused BUSY_RESENDS times already.
        retry = attempt > 1 or started_before
        refusable = job_input.refusable and (job_input.carries_attempts or not retry)
        if not self._share.take(job_input.tenant_id, refusable=refusable):
            bound.warning("job.tenant_share_full", held=self._share.held(job_input.tenant_id),
                          fair=self._share.fair())
            raise tenant_busy(f"the tenant's runs hold their share of this jobs worker's "
                              f"{self._share.slots} slots; the run is sent again", attempt,
                              started=started_before)
        try:
            return await self._in_slot(job_input, info, attempt, bound, started_before)
        finally:
            self._share.give_back(job_input.tenant_id)

    async def _in_slot(self, job_input: JobInput, info: activity.Info, attempt: int, bound: Any,
                       started_before: bool) -> JobResult:
        # Once running, it heartbeats at a third of the heartbeat timeout.
        heartbeats = asyncio.create_task(
            heartbeat_while_waiting(job_input, info.heartbeat_timeout)
        )
        try:
            await wait_for_instant(job_input, self._waiting, attempt)
            refuse_if_late(job_input, started_before=started_before)
            if not started_before and must_claim(job_input.trigger, due_of(job_input),
                                                 datetime.now(UTC)):
                # Past the time its workflow may have decided the fire again: ask first. The
                # answer carries a withdrawal: beat only to show the worker alive meanwhile.
                heartbeats.cancel()
                heartbeats = asyncio.create_task(heartbeat_forever(info.heartbeat_timeout))
                await self._starts.claim(job_input, info.workflow_id, attempt)
            heartbeats.cancel()
            # From here the job has started: a retry after a crash is a retry, not a late start.
            heartbeats = asyncio.create_task(heartbeat_forever(info.heartbeat_timeout, STARTED))
            async with asyncio.timeout(job_input.run_timeout_seconds):
                return await self._attempt(job_input, attempt, bound)
        except TimeoutError as exc:
            raise job_failure(
                JobFailure.RUN_TIMEOUT,
                f"the run took longer than run_timeout_seconds={job_input.run_timeout_seconds:g}",
                attempt=attempt,
            ) from exc
        finally:
            heartbeats.cancel()

    async def _attempt(self, job_input: JobInput, attempt: int, bound: Any) -> JobResult:
        # The later of the server's start of this attempt and this worker's clock: the same
        # clock as the scheduled time on a real server, and still right where the server's
        # time is skipped (tests) or the job waited here for its instant.
        started = max(datetime.now(UTC), activity.info().started_time.astimezone(UTC))
        labels = {"job_type": job_input.job.type, "trigger": job_input.trigger.value}
        # The bookkeeping of the start and the end (metric, log line, row) waits behind the
        # starts of the other runs woken for this instant.
        after_the_starts(self._announce, job_input, started, attempt, labels, bound)
        try:
            result = await self._run(job_input, attempt)
        except asyncio.CancelledError:
            # Why, before any wait: a later cancel (the worker stopping) tells another reason.
            cancel = activity.cancellation_details()
            # None: the run's own timeout cut it (run_timeout_seconds), which fails the attempt.
            outcome = "cancelled" if cancel is not None else "failed"
            after_the_starts(self._ended, datetime.now(UTC) - started, labels, outcome, bound, None)
            # The start is reported before the cancelled end, however late it goes out: else
            # the workflow takes the run for withdrawn unstarted, while the job did start and
            # its row says RUNNING. A report that does not get through within UNTAKEN_AFTER is
            # told by the end itself (a cancel carries no details).
            reported = False
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                reported = await asyncio.wait_for(
                    asyncio.shield(self._start_reported(attempt)), UNTAKEN_AFTER.total_seconds())
            if not reported and cancel is not None and cancel.cancel_requested:
                raise job_failure(JobFailure.CANCELLED_RUNNING, "cancelled while running",
                                  attempt=attempt, retryable=False) from None
            raise
        except Exception as exc:
            error = exc if isinstance(exc, ApplicationError) else None
            after_the_starts(self._ended, datetime.now(UTC) - started, labels, "failed", bound, error)
            # A cancel meanwhile ends the wait, not the failure: the failure, whose details
            # say the job started, is what the workflow records (a cancel carries no details).
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._start_reported(attempt))
            if error is not None:
                raise _with_start(error, started, attempt) from exc.__cause__
            raise
        result = result.model_copy(update={"started_at": started})
        after_the_starts(self._finished, job_input, result, datetime.now(UTC) - started, labels, bound)
        with contextlib.suppress(asyncio.CancelledError):  # the job has run: it reports its end
            await self._start_reported(attempt)
        return result

    async def _start_reported(self, attempt: int) -> bool:
        """Return once the start's queued bookkeeping has run and its start report is sent
        (False: given up on)."""
        # The attempt's end, and the SDK's report of it, never reach the workflow before its start.
        await queued_bookkeeping_done()
        return await self._starts.sent(attempt)

    async def _run(self, job_input: JobInput, attempt: int) -> JobResult:
        job = job_input.job
        if isinstance(job, HttpJob):
            return await self._run_http(job, job_input, attempt)
        if isinstance(job, HandlerJob):
            return await self._run_handler(job, job_input, attempt)
        return await self._run_workflow(job, job_input, attempt)

    def _announce(
        self, job_input: JobInput, started: datetime, attempt: int, labels: dict[str, str], bound: Any
    ) -> None:
        """The start of an attempt: its metric and log line, and its RUNNING row on the way."""
        lateness = job_input.lateness(started)
        meter = activity.metric_meter()
        if attempt == 1:
            meter.create_histogram_timedelta(
                "scheduler_fire_lateness", "actual start of a run minus its instant", "duration"
            ).record(max(lateness, timedelta(0)), labels)
        else:
            meter.create_counter("scheduler_job_retries", "job attempts after the first").add(1, labels)
        bound.info("job.start", job_type=job_input.job.type, lateness_ms=round(lateness.total_seconds() * 1000, 1))
        # The RUNNING row is written beside the job and not awaited: the job ends when it ends,
        # not when its start is committed (a final outcome is never overwritten by it).
        if self._rows is not None:
            self._rows.started(job_input, started, attempt, bound)
        self._starts.report(job_input, activity.info().workflow_id, attempt, started)

    def _finished(self, job_input: JobInput, result: JobResult, took: timedelta,
                  labels: dict[str, str], bound: Any) -> None:
        """The end of a successful attempt: its row on the way, its metric and log line."""
        if self._rows is not None:
            self._rows.completed(job_input, result, bound)
        self._ended(took, labels, "completed", bound, None)

    @staticmethod
    def _ended(took: timedelta, labels: dict[str, str], outcome: str, bound: Any,
               error: ApplicationError | None) -> None:
        """An attempt's duration metric and its last log line."""
        _record_duration(took, labels, outcome)
        if error is not None:
            bound.warning("job.failed", error=str(error), retryable=not error.non_retryable)
        elif outcome != "failed":  # a failure that is no ApplicationError is logged by the SDK
            bound.info(f"job.{outcome}")

    async def _run_http(self, job: HttpJob, job_input: JobInput, attempt: int) -> JobResult:
        with _tracer.start_as_current_span(f"HTTP {job.method}", kind=trace.SpanKind.CLIENT) as span:
            # Without a tracer the span records nothing: its attributes would only cost each
            # run of a herd its share of every later run's start.
            if span.is_recording():
                span.set_attributes({"http.request.method": job.method, "url.full": redact_url(job.url),
                                     "task_scheduler.execution_id": job_input.execution_id})
            result = await self._send_http(job, job_input, attempt)
            span.set_attribute("http.response.status_code", result.http_status or 0)
            return result

    def _sign(self, job_input: JobInput, content: bytes | None) -> Signing | None:
        """Signs the call with the tenant's secrets (the execution id as ``webhook-id``)."""
        if self._signer is None:
            return None
        signer = self._signer
        return lambda: signer.headers(job_input.tenant_id, job_input.execution_id, content or b"")

    @staticmethod
    def _delivery_headers(job_input: JobInput, attempt: int) -> dict[str, str]:
        """What every HTTP job call says of itself beside its signature: the task, the
        scheduled time, the attempt and a trace."""
        headers = {TASK_ID_HEADER: job_input.task_id,
                   SCHEDULED_AT_HEADER: job_input.scheduled_at.isoformat(),
                   ATTEMPT_HEADER: str(attempt)}
        propagate.inject(headers)  # traceparent, when tracing is on
        headers.setdefault("traceparent", traceparent(job_input.execution_id, attempt))
        return headers

    async def _send_http(self, job: HttpJob, job_input: JobInput, attempt: int) -> JobResult:
        headers = {**job.headers, "Idempotency-Key": job_input.execution_id}
        content = None
        if job.body is not None:
            content = json.dumps(job.body).encode()
            if not any(name.lower() == "content-type" for name in headers):  # names are any case
                headers["Content-Type"] = "application/json"
        headers.update(self._delivery_headers(job_input, attempt))
        try:
            answer = await self._outbound.call(
                job.method, job.url, tenant=job_input.tenant_id, headers=headers,
                content=content, timeout=job.timeout_seconds, sign=self._sign(job_input, content),
            )
        except EgressRefused as exc:
            raise job_failure(JobFailure.EGRESS_REFUSED,
                              f"{job.method} {redact_url(job.url)} refused: {exc}",
                              attempt=attempt, retryable=False) from exc
        except httpx.TimeoutException as exc:
            raise job_failure(
                JobFailure.HTTP_TIMEOUT,
                f"{job.method} {redact_url(job.url)} timed out after {job.timeout_seconds}s",
                attempt=attempt,
            ) from exc
        except httpx.HTTPError as exc:
            raise job_failure(
                JobFailure.HTTP_CONNECTION,
                f"{job.method} {redact_url(job.url)} failed: {type(exc).__name__}: {exc}",
                attempt=attempt,
            ) from exc
        status, snippet = answer.status, answer.text()
        if 200 <= status < 300:
            return JobResult(attempt=attempt, http_status=status, response_snippet=snippet)
        raise job_failure(JobFailure.HTTP_STATUS,
                          f"{job.method} {redact_url(job.url)} answered HTTP {status}",
                          attempt=attempt, retryable=retryable_http_status(status),
                          http_status=status, response_snippet=snippet)

    async def _run_handler(self, job: HandlerJob, job_input: JobInput, attempt: int) -> JobResult:
        handler = self._handlers.get(job.name)
        if handler is None:
            raise job_failure(JobFailure.UNKNOWN_HANDLER,
                              f"no handler named {job.name!r} is registered on this worker",
                              attempt=attempt, retryable=False)
        ctx = HandlerContext(
            args=job.args,
            execution_id=job_input.execution_id,
            task_id=job_input.task_id,
            scheduled_at=job_input.scheduled_at,
            # A handler's beats keep the mark that its job started (a retry after a crash reads it).
            heartbeat=lambda *details: activity.heartbeat(STARTED, *details),
        )
        try:
            output = await call_handler(handler, ctx)
        except (asyncio.CancelledError, ApplicationError):
            raise
        except Exception as exc:
            raise job_failure(JobFailure.HANDLER_ERROR,
                              f"handler {job.name!r} raised {type(exc).__name__}: {exc}",
                              attempt=attempt) from exc
        return JobResult(attempt=attempt, output=_jsonable(output))

    async def _run_workflow(self, job: WorkflowJob, job_input: JobInput, attempt: int) -> JobResult:
        if self._client is None:
            raise ApplicationError("this worker has no Temporal client for workflow jobs")
        await self._refuse_forbidden_workflow(job, job_input, attempt)
        # The run's workflow id is derived from the execution id: a retried attempt attaches to
        # the same workflow instead of starting a second one; a failed one may start again.
        workflow_id = f"{job_input.execution_id}/workflow"
        timeout = job.execution_timeout_seconds
        try:
            handle = await self._client.start_workflow(
                job.workflow_type,
                args=job.args,
                id=workflow_id,
                task_queue=job.task_queue or "",  # always named: the rule refuses a job without
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                execution_timeout=timedelta(seconds=timeout) if timeout else None,
                # The run's priority and tenant fairness key (config/temporal.py task_priority).
                priority=activity.info().priority,
                # Who started it, for an operator looking at the workflow. A memo, not the
                # TaskId / TenantId search attributes: those find the tasks' own workflows.
                memo={"tenant_id": job_input.tenant_id, "task_id": job_input.task_id,
                      "execution_id": job_input.execution_id},
            )
        except WorkflowAlreadyStartedError:
            handle = self._client.get_workflow_handle(workflow_id)
        try:
            output = await handle.result()
        except asyncio.CancelledError:
            await handle.cancel()
            raise
        except WorkflowFailureError as exc:
            raise job_failure(JobFailure.WORKFLOW_FAILED,
                              f"workflow {job.workflow_type} ({workflow_id}) failed: {exc.cause}",
                              attempt=attempt) from exc
        return JobResult(attempt=attempt, output=_jsonable(output))

    async def _refuse_forbidden_workflow(self, job: WorkflowJob, job_input: JobInput, attempt: int) -> None:
        """Refuse, for good, a workflow job that may not start its workflow now: its task was
        checked when created or updated, but the grant may have been withdrawn since, and an
        input that never passed the API must not start anything either."""
        granted = Quota()
        if self._engine is not None:  # without a database, nothing is granted
            granted = await asyncio.to_thread(quota_for, self._engine, job_input.tenant_id, Quota())
        refused = refusal(job, self._workflow_jobs, granted_types=granted.workflow_types,
                          granted_queues=granted.workflow_task_queues)
        if refused is not None:
            log.warning("job.workflow_refused", task_id=job_input.task_id, tenant=job_input.tenant_id,
                        execution_id=job_input.execution_id, workflow_type=job.workflow_type,
                        task_queue=job.task_queue, reason=str(refused))
            raise job_failure(JobFailure.WORKFLOW_REFUSED, f"workflow job refused: {refused}",
                              attempt=attempt, retryable=False)


def _with_start(exc: ApplicationError, started: datetime, attempt: int) -> ApplicationError:
    """The same failure, its details carrying when the attempt started, and which attempt it
    was where the error did not say (a handler's own error)."""
    details = dict(exc.details[0]) if exc.details and isinstance(exc.details[0], dict) else {}
    details["started_at"] = started.isoformat()
    details.setdefault("attempt", attempt)
    return ApplicationError(str(exc.message), details, type=exc.type, non_retryable=exc.non_retryable)


def _record_duration(duration: timedelta, labels: dict[str, str], outcome: str) -> None:
    activity.metric_meter().create_histogram_timedelta(
        "scheduler_job_duration", "duration of one job attempt", "duration"
    ).record(duration, {**labels, "outcome": outcome})


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:1000]
    return value
