"""Every Temporal call the API makes, with Temporal's errors mapped to the API's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from google.protobuf.field_mask_pb2 import FieldMask
from temporalio.api.common.v1 import Priority as PriorityProto
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import WorkerStatus
from temporalio.api.workflow.v1 import WorkflowExecutionOptions
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    ListWorkersRequest,
    UpdateWorkflowExecutionOptionsRequest,
)
from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import InvalidTask, OutcomeUnknown, ServiceUnavailable, TaskConflict
from config.telemetry import WORKER_HEARTBEAT_INTERVAL
from config.temporal import QueueReading, describe_queue, describe_queues, jobs_queue, task_priority
from scheduling.policy import Run
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import ResumeMissed, Trigger, workflow_id
from store.models import Task
from workflows.events import Origin, SpecChange
from workflows.starter import start_task_workflow, start_with_update, state_from_row
from workflows.state import BackfillRequest, ReplayRequest, TaskState, update_id
from workflows.task import LONGEST_CANCEL_SETTLE, NEVER_RUNS, TaskWorkflow

log = structlog.get_logger("task_scheduler.api")

UPDATE_TIMEOUT = timedelta(seconds=20)
# A cancel near the instant of a run of a herd waits up to LONGEST_CANCEL_SETTLE to answer.
CANCEL_TIMEOUT = LONGEST_CANCEL_SETTLE + timedelta(seconds=5)
# A worker is alive while its last heartbeat is younger than this: a few of its heartbeat
# intervals, so that one late heartbeat does not call it dead.
HEARTBEAT_STALE_AFTER = 4 * WORKER_HEARTBEAT_INTERVAL
MAX_WORKER_PAGES = 10


@asynccontextmanager
async def _temporal_errors(task_id: str | None = None) -> AsyncIterator[None]:
    try:
        yield
    except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
        raise OutcomeUnknown(
            "the change was sent to the task but no answer came in time; it may still be "
            "applied: read the task to see its state"
        ) from exc
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = str(cause) if cause else str(exc)
        if isinstance(cause, ApplicationError) and cause.type in ("TaskFinished", "BackfillRefused"):
            raise TaskConflict(message) from exc
        if isinstance(cause, ApplicationError) and cause.type == NEVER_RUNS:
            named = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
            raise InvalidTask(message, field=named.get("field")) from exc
        raise InvalidTask(message) from exc
    except WorkflowQueryFailedError as exc:
        # The worker could not answer the state query (its workflow task is failing).
        raise ServiceUnavailable(f"the task's workflow cannot answer now: {exc}") from exc
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise TaskConflict(f"task {task_id} has ended and can no longer change") from exc
        if exc.status is RPCStatusCode.FAILED_PRECONDITION and "completed" in exc.message.lower():
            raise TaskConflict(f"task {task_id} has ended and can no longer change") from exc
        raise ServiceUnavailable(f"Temporal is unavailable: {exc.status.name}") from exc
    except (ConnectionError, OSError, RuntimeError) as exc:
        # The SDK raises RuntimeError when it cannot connect at all.
        raise ServiceUnavailable("Temporal is unavailable") from exc


def _update_id(update: Any, request_id: str | None) -> str:
    """An update's id: the request's (the same on every retry under its Idempotency-Key), or a
    fresh one."""
    return update_id(update.__name__, request_id)


class TemporalGateway:
    """Starts task workflows and sends them updates, signals and queries."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self._heartbeats: bool | None = None

    async def start_task(
        self, *, task_id: str, tenant_id: str, spec: TaskSpec, created_at: datetime,
        actor: str | None = None, crowd: int = 0,
    ) -> bool:
        """Start the task's workflow (id derived from the task id); False if it exists.
        ``crowd``: the tasks due in its first run's second already (TaskWorkflowInput)."""
        async with _temporal_errors(task_id):
            return await start_task_workflow(
                self.client, task_queue=self.task_queue, task_id=task_id, tenant_id=tenant_id,
                spec=spec, created_at=created_at, actor=actor, crowd=crowd,
            )

    # Every change names its actor (the caller's API key id): the task's history records it.
    async def update(self, task_id: str, changes: TaskChanges, origin: Origin, *,
                     request_id: str | None = None, crowd: int = 0,
                     crowd_at: datetime | None = None) -> TaskState:
        """Apply changes through the workflow's validated update (``crowd``, ``crowd_at``: the
        herd a retimed task's next run joins, SpecChange)."""
        change = SpecChange(changes=changes, origin=origin, crowd=crowd, crowd_at=crowd_at)
        state = await self._update(task_id, TaskWorkflow.change_task, change, request_id=request_id)
        if "priority" in changes.model_fields_set:
            await self._reprioritize(task_id, state)
        return state

    async def _reprioritize(self, task_id: str, state: TaskState) -> None:
        """Give the task's workflow its changed priority: its own workflow tasks keep the one it
        started with otherwise (its runs take the spec's). The change stands if this fails."""
        priority = task_priority(state.spec.priority, state.tenant_id)
        request = UpdateWorkflowExecutionOptionsRequest(
            namespace=self.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id(task_id)),
            workflow_execution_options=WorkflowExecutionOptions(priority=PriorityProto(
                priority_key=priority.priority_key or 0, fairness_key=priority.fairness_key or "")),
            update_mask=FieldMask(paths=["priority"]),
        )
        try:
            await self.client.workflow_service.update_workflow_execution_options(
                request, timeout=UPDATE_TIMEOUT)
        except RPCError as err:
            log.warning("task.priority_not_set", task_id=task_id, error=str(err))

    async def cancel(self, task_id: str, reason: str | None, actor: str | None = None, *,
                     request_id: str | None = None) -> TaskState:
        """Cancel the task (a running job is cancelled through its heartbeats)."""
        return await self._update(task_id, TaskWorkflow.cancel_update, reason, actor,
                                  request_id=request_id, timeout=CANCEL_TIMEOUT)

    async def pause(self, task_id: str, reason: str | None, actor: str | None = None, *,
                    request_id: str | None = None) -> TaskState:
        """Pause the task."""
        return await self._update(task_id, TaskWorkflow.pause_update, reason, actor, request_id=request_id)

    async def resume(self, task_id: str, missed: ResumeMissed = ResumeMissed.SKIP,
                     actor: str | None = None, *, request_id: str | None = None) -> TaskState:
        """Resume the task; ``missed`` decides the fires that came during the pause."""
        return await self._update(task_id, TaskWorkflow.resume_update, missed, actor,
                                  request_id=request_id)

    async def trigger(self, task_id: str, actor: str | None = None, *,
                      request_id: str | None = None) -> TaskState:
        """Run the task's job now."""
        return await self._update(task_id, TaskWorkflow.trigger_update, actor, request_id=request_id)

    async def backfill(self, task_id: str, request: BackfillRequest, *,
                       request_id: str | None = None) -> TaskState:
        """Start a backfill of past instants in the task's workflow (409 while one runs)."""
        return await self._update(task_id, TaskWorkflow.backfill_update, request, request_id=request_id)

    async def replay(
        self, task_id: str, execution_id: str, scheduled_at: datetime, actor: str | None = None, *,
        request_id: str | None = None,
    ) -> TaskState:
        """Run a dead-lettered execution again."""
        request = ReplayRequest(execution_id=execution_id, scheduled_at=scheduled_at, actor=actor)
        return await self._update(task_id, TaskWorkflow.replay_update, request, request_id=request_id)

    async def replay_ended(
        self, row: Task, execution_id: str, scheduled_at: datetime, actor: str | None = None, *,
        executed: int, request_id: str | None = None,
    ) -> None:
        """Replay a dead letter of a task whose workflow has ended: a new run of the task's
        workflow does just that run, then ends by the same rules. The run is started with the
        ``replay_run`` update under the request's id (update-with-start), as a replay of a
        running task is sent: a retry reaches the same update and replays once, and a workflow
        of the task that runs already (another replay) gets the update instead."""
        replay = Run(scheduled_at=scheduled_at, trigger=Trigger.REPLAY, execution_id=execution_id)
        # The new run starts with the replay queued: whatever order its first task takes the
        # start and the update in, it runs it, and the update finds it there (state.add_replay).
        # ``executed``: the scheduled runs that ran (store.tasks.scheduled_runs_executed), so
        # that max_runs still counts them.
        state = state_from_row(row, next_fire_at=None, queue=[replay], executed=executed,
                               reason="replaying a dead letter")
        start = start_with_update(task_queue=self.task_queue, task_id=row.id, tenant_id=row.tenant_id,
                                  spec=state.spec, created_at=row.created_at, state=state)
        request = ReplayRequest(execution_id=execution_id, scheduled_at=scheduled_at, actor=actor)
        async with _temporal_errors(row.id):
            _ = await self.client.execute_update_with_start_workflow(
                TaskWorkflow.replay_update, request, start_workflow_operation=start,
                id=_update_id(TaskWorkflow.replay_update, request_id), rpc_timeout=UPDATE_TIMEOUT,
            )

    async def state(self, task_id: str) -> TaskState:
        """The task's state as its workflow holds it (the ``state`` query)."""
        handle = self.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        async with _temporal_errors(task_id):
            result: TaskState = await handle.query(TaskWorkflow.query_state)
            return result

    async def _update(
        self, task_id: str, update: Any, *args: Any, request_id: str | None = None,
        timeout: timedelta | None = None,
    ) -> TaskState:
        handle = self.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        # An explicit update id: Temporal applies an id once per workflow run and answers a
        # repeat with the first outcome, and the workflow keeps the last keyed ids across
        # continue-as-new (TaskState.applied_updates). A request sent again under its
        # Idempotency-Key has the same ``request_id``, so a retry cannot apply it twice.
        async with _temporal_errors(task_id):
            result: TaskState = await handle.execute_update(
                update, args=list(args), id=_update_id(update, request_id),
                rpc_timeout=timeout or UPDATE_TIMEOUT,
            )
            return result

    async def health(self) -> dict[str, Any]:
        """Whether the server answers, which workers are alive, and the queues' pollers and
        backlog."""
        ok = await self.client.service_client.check_health(timeout=timedelta(seconds=3))
        queues = await self.describe_queues()
        return {
            "server": bool(ok),
            "workers": await self.live_workers(),
            "pollers": {q.name: q.pollers for q in queues},
            "backlog": {q.name: {"count": q.backlog, "age_seconds": round(q.backlog_age_seconds, 3)}
                        for q in queues},
        }

    async def describe_queues(self) -> list[QueueReading]:
        """The scheduler's task queues as Temporal describes them."""
        return await describe_queues(self.client, self.task_queue)

    async def workflow_queue(self) -> QueueReading:
        """The task workflows' queue (workflow tasks) as Temporal describes it."""
        return await describe_queue(self.client, "workflow", self.task_queue, "workflow")

    async def live_workers(self) -> dict[str, int] | None:
        """Workers of the task queue and of the jobs queue whose last heartbeat is younger than
        ``HEARTBEAT_STALE_AFTER``, by task queue; None when the server keeps no heartbeats.

        Not the pollers of DescribeTaskQueue: its ``last_access_time`` is when a poll began,
        and an idle poll waits up to a minute, so a poller of a live worker looks a minute old
        and one of a killed worker is still listed a minute later. Every worker process sends
        Temporal a heartbeat every ``WORKER_HEARTBEAT_INTERVAL`` (config/telemetry.py)."""
        if not await self._keeps_heartbeats():
            return None
        queues = (self.task_queue, jobs_queue(self.task_queue))
        live = dict.fromkeys(queues, 0)
        now = datetime.now(UTC)
        token = b""
        for _ in range(MAX_WORKER_PAGES):  # bounded: the namespace may hold other workers
            page = await self.client.workflow_service.list_workers(
                ListWorkersRequest(namespace=self.client.namespace, page_size=1000,
                                   next_page_token=token),
                timeout=timedelta(seconds=3),
            )
            # ``workers_info`` is the field that carries each heartbeat's time (Server 1.32).
            for info in page.workers_info:
                beat = info.worker_heartbeat
                fresh = now - beat.heartbeat_time.ToDatetime(UTC) < HEARTBEAT_STALE_AFTER
                if beat.task_queue in live and fresh and beat.status == WorkerStatus.WORKER_STATUS_RUNNING:
                    live[beat.task_queue] += 1
            token = page.next_page_token
            if not token:
                break
        return live

    async def _keeps_heartbeats(self) -> bool:
        """Whether the namespace records worker heartbeats (asked once, then remembered)."""
        if self._heartbeats is None:
            described = await self.client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=self.client.namespace),
                timeout=timedelta(seconds=3),
            )
            self._heartbeats = described.namespace_info.capabilities.worker_heartbeats
        return self._heartbeats
