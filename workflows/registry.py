"""The workflow types this deployment runs, and what workflow jobs may start beside them."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow

from activities.workflow_jobs import WorkflowJobRules, names
from config.settings import Settings
from config.temporal import jobs_queue
from workflows.task import TaskWorkflow

WORKFLOWS: Sequence[type] = (TaskWorkflow,)


def workflow_job_rules(settings: Settings) -> WorkflowJobRules:
    """What workflow jobs may start in this deployment, and what never: the workflow types
    these workers run and their task queues."""
    own = frozenset(workflow._Definition.must_from_class(cls).name or "" for cls in WORKFLOWS)
    queue = settings.temporal.task_queue
    return WorkflowJobRules(
        allowed_types=names(settings.workflow_job.types),
        allowed_queues=names(settings.workflow_job.task_queues),
        own_types=own - {""}, own_queues=frozenset({queue, jobs_queue(queue)}),
    )
