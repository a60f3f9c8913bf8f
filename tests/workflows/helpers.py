"""Starting task workflows directly (no API) for workflow-semantics tests."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from scheduling.fire import first_fire
from scheduling.spec import TaskSpec
from workflows import attributes
from workflows.state import TaskState, TaskWorkflowInput, workflow_id
from workflows.task import TaskWorkflow


def spec(**fields: Any) -> TaskSpec:
    """A task spec with a noop handler job unless told otherwise."""
    fields.setdefault("task_name", "test-task")
    fields.setdefault("job_details", {"type": "handler", "name": "noop"})
    return TaskSpec.model_validate(fields)


async def start_task(
    env: WorkflowEnvironment,
    task_queue: str,
    task_spec: TaskSpec,
    *,
    history_limit: int = 10_000,
    task_id: str | None = None,
) -> WorkflowHandle[TaskWorkflow, TaskState]:
    """Start a task workflow the way the API does."""
    task_id = task_id or uuid.uuid4().hex
    now = await env.get_current_time()
    return await env.client.start_workflow(
        TaskWorkflow.run,
        TaskWorkflowInput(
            task_id=task_id,
            tenant_id="t1",
            spec=task_spec,
            created_at=now,
            history_limit=history_limit,
        ),
        id=workflow_id(task_id),
        task_queue=task_queue,
        search_attributes=attributes.initial(
            task_id=task_id,
            tenant_id="t1",
            name=task_spec.task_name,
            schedule_type=task_spec.schedule_type.value,
            next_run_at=first_fire(task_spec, now),
        ),
    )
