"""A task's editable fields are declared once, in the spec: every body, record and answer
takes each of them, with the bounds the create bodies give it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from api.schemas import CronTask, DatesTask, IntervalTask, OnceTask, TaskOut, TaskUpdate
from scheduling.spec import TaskChanges, TaskSpec
from store.models import ALARM_COLUMNS, Task, TaskSnapshot
from workflows.state import TaskWorkflowInput

EDITABLE = set(TaskSpec.model_fields)
KINDS = (OnceTask, CronTask, IntervalTask, DatesTask)
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def one_of_each(kind: str) -> TaskSpec:
    schedules: dict[str, dict[str, Any]] = {
        "once": {"run_at": "2030-01-02T00:00:00Z"},
        "cron": {"cron": "0 10 * * *", "max_runs": 3, "timezone": "Europe/Berlin"},
        "interval": {"interval_seconds": 60, "interval_mode": "fixed_delay"},
    }
    return TaskSpec.model_validate({
        "task_name": "n", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": kind, **schedules[kind],
        "notify": {"url": "https://example.com/hook"}, "drift_threshold_seconds": 5,
    })


def test_every_editable_field_is_in_the_create_update_and_change_bodies() -> None:
    assert set().union(*(kind.model_fields for kind in KINDS)) == EDITABLE
    assert set(TaskUpdate.model_fields) == EDITABLE | {"task_id"}
    assert set(TaskChanges.model_fields) == EDITABLE


def test_the_update_body_bounds_each_field_as_the_create_bodies_do() -> None:
    update = TaskUpdate.model_json_schema()["properties"]
    for name in EDITABLE - {"schedule_type"}:  # a literal in each kind, the enum in an update
        created = [kind.model_json_schema()["properties"][name] for kind in KINDS]
        taken = [without_null(schema) for schema in created if schema.get("type") != "null"]
        assert without_null(update[name]) in taken, name


def without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of the field's values, null and the default left out."""
    schema = {k: v for k, v in schema.items() if k not in ("default", "title")}
    branches = [b for b in schema.pop("anyOf", []) if b != {"type": "null"}]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = branches
    return schema


@pytest.mark.parametrize("kind", ["once", "cron", "interval"])
def test_the_snapshot_and_the_answer_carry_every_editable_field(kind: str) -> None:
    spec = one_of_each(kind)
    state = TaskWorkflowInput(task_id="t", tenant_id="a", spec=spec, created_at=NOW).initial_state()
    snapshot = state.snapshot(state.next_run_at(NOW), updated_at=NOW)
    assert TaskSpec.model_validate(snapshot.spec) == spec
    shown = TaskOut.of(snapshot)
    assert {"task_name", "job_details", *shown.schedule} == EDITABLE
    assert TaskSpec.model_validate(
        {**shown.schedule, "task_name": shown.task_name, "job_details": shown.job_details}) == spec


def test_the_snapshot_builder_sets_every_column_but_the_version() -> None:
    state = TaskWorkflowInput(task_id="t", tenant_id="a", spec=one_of_each("cron"),
                              created_at=NOW).initial_state()
    snapshot = state.snapshot(None, updated_at=NOW)
    assert set(TaskSnapshot.model_fields) - snapshot.model_fields_set == {"state_version"}
    # The snapshot is the row: the same columns, the id under its JSON name (but the alarm
    # that the API's overdue check alone writes).
    assert set(Task.model_fields) - set(ALARM_COLUMNS) == set(TaskSnapshot.model_fields) - {"task_id"} | {"id"}
