"""The workflow job rule: own types and queues never, otherwise deployment and grant both."""

from __future__ import annotations

import pytest

from activities.workflow_jobs import ANY, WorkflowJobRules, names, refusal
from scheduling.spec import WorkflowJob

RULES = WorkflowJobRules(
    # An operator who listed the scheduler's own type and queue: they stay refused.
    allowed_types=frozenset({"Report", "TaskWorkflow"}),
    allowed_queues=frozenset({"partner", "task-scheduler"}),
    own_types=frozenset({"TaskWorkflow"}),
    own_queues=frozenset({"task-scheduler", "task-scheduler-jobs"}),
)


def job(workflow_type: str = "Report", task_queue: str | None = "partner") -> WorkflowJob:
    return WorkflowJob(type="workflow", workflow_type=workflow_type, task_queue=task_queue)


@pytest.mark.parametrize(("candidate", "rules", "types", "queues", "field", "words"), [
    (job(task_queue=None), RULES, {ANY}, {ANY}, "task_queue", "must name"),
    (job(task_queue=""), RULES, {ANY}, {ANY}, "task_queue", "must name"),
    (job("TaskWorkflow"), RULES, {ANY, "TaskWorkflow"}, {ANY}, "workflow_type", "scheduler itself"),
    (job(task_queue="task-scheduler"), RULES, {ANY}, {ANY, "task-scheduler"}, "task_queue", "scheduler itself"),
    (job(task_queue="task-scheduler-jobs"), RULES, {ANY}, {ANY}, "task_queue", "scheduler itself"),
    (job(), WorkflowJobRules(), {ANY}, {ANY}, "type", "off"),
    (job("Payroll"), RULES, {ANY}, {ANY}, "workflow_type", "deployment"),
    (job(task_queue="payroll"), RULES, {ANY}, {ANY}, "task_queue", "deployment"),
    (job(), RULES, set(), {ANY}, "workflow_type", "this tenant"),
    (job(), RULES, {"Report"}, {"other"}, "task_queue", "this tenant"),
])
def test_refused(candidate: WorkflowJob, rules: WorkflowJobRules, types: set[str], queues: set[str],
                 field: str, words: str) -> None:
    found = refusal(candidate, rules, granted_types=types, granted_queues=queues)
    assert found is not None and found.field == f"job_details.{field}" and words in found.reason
    assert str(found).startswith(f"job_details.{field}: ")


@pytest.mark.parametrize(("types", "queues"), [({"Report"}, {"partner"}), ({ANY}, {ANY})])
def test_allowed_and_granted(types: set[str], queues: set[str]) -> None:
    assert refusal(job(), RULES, granted_types=types, granted_queues=queues) is None


def test_names_are_a_comma_separated_list() -> None:
    assert names(" Report, ,partner ,") == {"Report", "partner"}
    assert names("") == frozenset()
