"""Custom search attributes, so operators find tasks in the Temporal UI and CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from scheduling.status import TaskStatus
from workflows.describe import fitted

TASK_ID = SearchAttributeKey.for_keyword("TaskId")
TENANT_ID = SearchAttributeKey.for_keyword("TenantId")
TASK_NAME = SearchAttributeKey.for_keyword("TaskName")
TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
SCHEDULE_TYPE = SearchAttributeKey.for_keyword("ScheduleType")
NEXT_RUN_AT = SearchAttributeKey.for_datetime("NextRunAt")

# name -> type, as the dev server's --search-attribute flag and the operator service take them
DEFINITIONS = {
    "TaskId": "Keyword",
    "TenantId": "Keyword",
    "TaskName": "Keyword",
    "TaskStatus": "Keyword",
    "ScheduleType": "Keyword",
    "NextRunAt": "Datetime",
}


# How much of a task's name ``TaskName`` holds: the server fails a workflow whose search attribute
# value is over 2 KiB as the SDK sends it (JSON, so a character outside ASCII can take 12 bytes).
NAME_BYTES = 1024


def shown_name(name: str) -> str:
    """What ``TaskName`` shows of ``name``: all of it, or its longest start that fits NAME_BYTES
    (a name of 200 characters may not)."""
    return fitted(name, NAME_BYTES)


def shown_status(status: str, *, with_runs: bool) -> str:
    """What ``TaskStatus`` shows for a task of ``status``: PENDING while a run is in progress
    (its RUNNING is on the task row), which spares two visibility writes a fire; ``with_runs``
    for workflow runs recorded before, which showed RUNNING."""
    return TaskStatus.PENDING.value if status == TaskStatus.RUNNING and not with_runs else status


def initial(
    *, task_id: str, tenant_id: str, name: str, schedule_type: str, next_run_at: datetime | None
) -> TypedSearchAttributes:
    """The search attributes a task workflow starts with."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(TASK_ID, task_id),
        SearchAttributePair(TENANT_ID, tenant_id),
        SearchAttributePair(TASK_NAME, shown_name(name)),
        SearchAttributePair(TASK_STATUS, TaskStatus.PENDING.value),
        SearchAttributePair(SCHEDULE_TYPE, schedule_type),
    ]
    if next_run_at is not None:
        pairs.append(SearchAttributePair(NEXT_RUN_AT, next_run_at))
    return TypedSearchAttributes(pairs)
