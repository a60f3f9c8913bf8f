"""Which workflows a workflow job may start: one rule, for the API and for the job activity.

A workflow job starts a Temporal workflow in the scheduler's namespace. Left open, a tenant
could start the scheduler's own workflows (a task of another tenant, outside every check of
the API), so a job may start only what the deployment allows and the tenant was granted, and
never a workflow type or task queue of the scheduler itself.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from scheduling.spec import WorkflowJob

# In a tenant's grant: every workflow type (or task queue) that the deployment allows.
ANY = "*"


@dataclass(frozen=True)
class WorkflowJobRules:
    """What the deployment lets workflow jobs start, and its own types and queues (never)."""

    allowed_types: frozenset[str] = frozenset()
    allowed_queues: frozenset[str] = frozenset()
    own_types: frozenset[str] = frozenset()
    own_queues: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Refusal:
    """Why a workflow job may not start its workflow, and the field at fault."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def refusal(
    job: WorkflowJob,
    rules: WorkflowJobRules,
    *,
    granted_types: Collection[str],
    granted_queues: Collection[str],
) -> Refusal | None:
    """None when the job may start its workflow: it names a task queue, neither is the
    scheduler's own, both are allowed by the deployment and granted to the tenant."""
    kind, queue = job.workflow_type, job.task_queue
    if not queue:
        return Refusal("job_details.task_queue", "a workflow job must name its task queue")
    if kind in rules.own_types:
        return Refusal("job_details.workflow_type",
                       f"{kind!r} is a workflow of the scheduler itself; no job may start it")
    if queue in rules.own_queues:
        return Refusal("job_details.task_queue",
                       f"{queue!r} is a task queue of the scheduler itself; no job may use it")
    if not rules.allowed_types or not rules.allowed_queues:
        return Refusal("job_details.type",
                       "workflow jobs are off in this deployment (it allows no workflow type "
                       "or task queue)")
    if kind not in rules.allowed_types:
        return Refusal("job_details.workflow_type",
                       f"{kind!r} is not a workflow type this deployment lets jobs start")
    if queue not in rules.allowed_queues:
        return Refusal("job_details.task_queue",
                       f"{queue!r} is not a task queue this deployment lets jobs use")
    if kind not in granted_types and ANY not in granted_types:
        return Refusal("job_details.workflow_type",
                       f"{kind!r} is not a workflow type this tenant may start")
    if queue not in granted_queues and ANY not in granted_queues:
        return Refusal("job_details.task_queue",
                       f"{queue!r} is not a task queue this tenant may use")
    return None


def names(value: str) -> frozenset[str]:
    """The names of a comma-separated list, without blanks."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())
