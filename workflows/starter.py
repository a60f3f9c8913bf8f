"""Starting a task's workflow: the one client-side call shared by the API and the reconciler."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import Priority, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from scheduling.spec import TaskSpec
from scheduling.wake import WakePacer, first_wake_delay
from store.models import Task
from workflows import attributes
from workflows.state import PRIORITY_KEYS, QueuedRun, TaskState, TaskWorkflowInput, workflow_id


async def start_task_workflow(
    client: Client,
    *,
    task_queue: str,
    task_id: str,
    tenant_id: str,
    spec: TaskSpec,
    created_at: datetime,
    state: TaskState | None = None,
    lead_seconds: float = 0.0,
    max_lead_seconds: float = 60.0,
    reuse_closed_id: bool = False,
    hold_after_seconds: float = 0.0,
    hold_at_most_seconds: float = 0.0,
    wakes: WakePacer | None = None,
) -> bool:
    """Start ``task-<task_id>``; False when a workflow with that id exists or existed.

    A new task (no ``state``) whose first dispatch is at least ``hold_after_seconds`` away is
    held by the server for ``hold_at_most_seconds``, or until that dispatch when 0
    (`scheduling.wake`), its wake paced by ``wakes``; ``hold_after_seconds`` 0 starts every
    workflow at once."""
    first = state.next_fire_at if state is not None else None
    delay = None
    if state is None:
        from scheduling.fire import first_fire

        first = first_fire(spec, created_at)
        delay = first_wake_delay(
            task_id=task_id, first_fire=first, jitter_seconds=spec.jitter_seconds,
            lead_seconds=lead_seconds, now=datetime.now(UTC), minimum_seconds=hold_after_seconds,
            maximum_seconds=hold_at_most_seconds, pacer=wakes,
        )
    try:
        await client.start_workflow(
            "TaskWorkflow",
            TaskWorkflowInput(
                task_id=task_id, tenant_id=tenant_id, spec=spec, created_at=created_at,
                state=state, lead_seconds=lead_seconds, max_lead_seconds=max_lead_seconds,
            ),
            id=workflow_id(task_id),
            task_queue=task_queue,
            id_reuse_policy=(
                WorkflowIDReusePolicy.ALLOW_DUPLICATE
                if reuse_closed_id
                else WorkflowIDReusePolicy.REJECT_DUPLICATE
            ),
            search_attributes=attributes.initial(
                task_id=task_id,
                tenant_id=tenant_id,
                name=spec.task_name,
                schedule_type=spec.schedule_type.value,
                next_run_at=first,
            ),
            priority=Priority(priority_key=PRIORITY_KEYS[spec.priority]),
            static_summary=f"{spec.task_name} ({spec.schedule_type.value})",
            start_delay=delay,
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


def state_from_row(
    row: Task, *, next_fire_at: datetime | None, queue: list[QueuedRun] | None = None,
    reason: str,
) -> TaskState:
    """A workflow state rebuilt from a task row (its workflow is gone or has ended)."""
    spec = TaskSpec.model_validate(row.spec)
    return TaskState(
        task_id=row.id, tenant_id=row.tenant_id, spec=spec, created_at=row.created_at,
        anchor=row.created_at, next_fire_at=next_fire_at, run_count=row.run_count,
        success_count=row.success_count, failure_count=row.failure_count,
        skipped_count=row.skipped_count, status_reason=reason, queue=queue or [],
    )
