"""The task history in the store, on SQLite and PostgreSQL: appended once, read newest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from store.events import append_events, list_events, read_version
from store.models import TaskEventRecord

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def event(n: int, *, task: str = "a", tenant: str = "t1", spec: bool = False) -> TaskEventRecord:
    return TaskEventRecord(
        id=f"{task}:run:{n:05d}", task_id=task, tenant_id=tenant, at=T0 + timedelta(seconds=n),
        actor="k1", action="update" if spec else "pause", spec_version=n,
        spec={"cron": f"{n} 6 * * *"} if spec else None, detail=None if spec else {"reason": "x"})


def test_events_are_appended_once_and_read_newest_first(any_engine: Engine) -> None:
    batch = [event(1, spec=True), event(2), event(3, spec=True), event(4)]
    with any_engine.begin() as connection:
        append_events(connection, batch)
    with any_engine.begin() as connection:
        # a retried write, its first event changed in between: the first write stays
        append_events(connection, [batch[0].model_copy(update={"actor": "other"}), event(5)])
    with any_engine.begin() as connection:
        append_events(connection, [event(9, task="a", tenant="t2", spec=True)])

    rows, cursor = list_events(any_engine, task_id="a", tenant_id="t1", limit=3)
    assert [r.spec_version for r in rows] == [5, 4, 3] and cursor is not None
    rest, end = list_events(any_engine, task_id="a", tenant_id="t1", limit=3, cursor=cursor)
    assert [(r.spec_version, r.actor) for r in rest] == [(2, "k1"), (1, "k1")] and end is None
    assert rest[1].spec == {"cron": "1 6 * * *"} and rest[0].detail == {"reason": "x"}

    versions, _ = list_events(any_engine, task_id="a", tenant_id="t1", limit=10, versions_only=True)
    assert [v.spec_version for v in versions] == [3, 1]
    found = read_version(any_engine, task_id="a", tenant_id="t1", version=3)
    assert found is not None and found.spec == {"cron": "3 6 * * *"}
    # an event without a spec makes no version; another tenant's history is not this one's
    assert read_version(any_engine, task_id="a", tenant_id="t1", version=2) is None
    assert read_version(any_engine, task_id="a", tenant_id="t1", version=9) is None
    assert read_version(any_engine, task_id="a", tenant_id="t2", version=9) is not None
