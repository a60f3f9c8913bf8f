"""Starting a task's workflow: the one client-side call shared by the API and the reconciler.

A start carries the task and, for a task that existed, its state: nothing of the starting
process. The lead and the history limit are the workflow worker's (activities/options.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.options import RELEASE
from config.temporal import task_priority
from scheduling.policy import Probe, Run
from scheduling.spec import TaskSpec
from scheduling.status import TaskStatus, workflow_id
from store.models import Task
from workflows import attributes
from workflows.breaker import PROBE_TOLD, told_cool_down
from workflows.describe import summary
from workflows.state import RESTARTED, Backfill, TaskState, TaskWorkflowInput
from workflows.task import TaskWorkflow


async def start_task_workflow(
    client: Client,
    *,
    task_queue: str,
    task_id: str,
    tenant_id: str,
    spec: TaskSpec,
    created_at: datetime,
    state: TaskState | None = None,
    reuse_closed_id: bool = False,
    actor: str | None = None,
    crowd: int = 0,
) -> bool:
    """Start the task's workflow at once; False when a workflow with that id exists or existed."""
    try:
        await client.start_workflow(
            "TaskWorkflow",
            TaskWorkflowInput(task_id=task_id, tenant_id=tenant_id, spec=spec, created_at=created_at,
                              state=state, actor=actor, crowd=crowd, release=RELEASE),
            id_reuse_policy=(
                WorkflowIDReusePolicy.ALLOW_DUPLICATE
                if reuse_closed_id
                else WorkflowIDReusePolicy.REJECT_DUPLICATE
            ),
            **_start_options(task_queue=task_queue, task_id=task_id, tenant_id=tenant_id,
                             spec=spec, created_at=created_at, state=state),
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


def start_with_update(
    *, task_queue: str, task_id: str, tenant_id: str, spec: TaskSpec, created_at: datetime,
    state: TaskState,
) -> WithStartWorkflowOperation[TaskWorkflow, TaskState]:
    """A new run of an ended task's workflow, to send with an update (update-with-start): the
    update reaches this run, or the run of the task that is going already."""
    return WithStartWorkflowOperation(
        TaskWorkflow.run,
        TaskWorkflowInput(task_id=task_id, tenant_id=tenant_id, spec=spec, created_at=created_at,
                          state=state, release=RELEASE),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        **_start_options(task_queue=task_queue, task_id=task_id, tenant_id=tenant_id,
                         spec=spec, created_at=created_at, state=state),
    )


def _start_options(*, task_queue: str, task_id: str, tenant_id: str, spec: TaskSpec,
                   created_at: datetime, state: TaskState | None) -> dict[str, Any]:
    """What every start of a task's workflow carries: its id, queue, attributes and priority."""
    shown = (state.next_run_at(created_at) if state is not None
             else first_run_at(task_id, tenant_id, spec, created_at))
    return {
        "id": workflow_id(task_id),
        "task_queue": task_queue,
        "search_attributes": attributes.initial(
            task_id=task_id,
            tenant_id=tenant_id,
            name=spec.task_name,
            schedule_type=spec.schedule_type.value,
            next_run_at=shown,
        ),
        "priority": task_priority(spec.priority, tenant_id),
        "static_summary": summary(spec.task_name, f" ({spec.schedule_type.value})"),
    }


def first_run_at(task_id: str, tenant_id: str, spec: TaskSpec, created_at: datetime) -> datetime | None:
    """A new task's next_run_at, as its workflow will show it (TaskState.next_run_at)."""
    start = TaskWorkflowInput(task_id=task_id, tenant_id=tenant_id, spec=spec, created_at=created_at)
    return start.initial_state().next_run_at(created_at)


def state_from_row(
    row: Task, *, next_fire_at: datetime | None, queue: list[Run] | None = None,
    executed: int = 0, reason: str,
) -> TaskState:
    """A workflow state rebuilt from a task row (its workflow is gone or has ended): a paused
    task stays paused; ``executed`` is the scheduled runs that ran (max_runs counts them)."""
    spec = TaskSpec.model_validate(row.spec)
    paused = row.status == TaskStatus.PAUSED
    probe = _probe_from_row(row, spec) if paused else None
    status_reason = row.status_reason if paused else reason
    if paused and probe is None and status_reason is not None:
        status_reason = status_reason.split(PROBE_TOLD)[0]  # it tells of no probe any more
    return TaskState(
        task_id=row.id, tenant_id=row.tenant_id, spec=spec, created_at=row.created_at,
        anchor=row.created_at, next_fire_at=next_fire_at, executed=executed, paused=paused,
        status=TaskStatus.PAUSED if paused else TaskStatus.PENDING,
        status_reason=status_reason,
        success_count=row.success_count, failure_count=row.failure_count,
        cancelled_count=max(0, row.run_count - row.success_count - row.failure_count),
        skipped_count=row.skipped_count, queue=queue or [], spec_version=row.spec_version,
        probe=probe, backfill=_backfill_from_row(row),
    )


def _probe_from_row(row: Task, spec: TaskSpec) -> Probe | None:
    """The auto-paused task's planned probe: at ``next_probe_at``, after the cool-down its
    reason tells of (a failed probe's doubled one), or else the task's own."""
    cool_down = told_cool_down(row.status_reason) or spec.auto_resume_after_seconds
    if row.next_probe_at is None or cool_down is None:
        return None
    return Probe(at=row.next_probe_at, cool_down_seconds=cool_down)


def _backfill_from_row(row: Task) -> Backfill | None:
    """The task's latest backfill as its row shows it. The instants it had left are not in the
    row, so one that was running is stopped: the workflow that restarts records it."""
    if row.backfill is None:
        return None
    backfill = Backfill.model_validate({k: v for k, v in row.backfill.items() if k != "left"})
    if backfill.running:
        backfill.stop(RESTARTED)
        backfill.unrecorded_stop = True
    return backfill
