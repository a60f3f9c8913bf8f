"""The same store behaviour on SQLite and on a real PostgreSQL cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from store.keys import create_key, find_active_key, list_keys, revoke_key
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import (
    list_executions,
    list_tasks,
    mark_task,
    read_task,
    save_snapshot,
)
from tests.store.writes import workflow_rows

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def snapshot(task_id: str, *, version: int, status: str = "PENDING", tenant: str = "t1",
             created: datetime = T0, name: str = "n") -> TaskSnapshot:
    return TaskSnapshot(
        task_id=task_id, tenant_id=tenant, name=name, schedule_type="cron",
        spec={"cron": "0 10 * * *"}, status=status, next_run_at=created + timedelta(hours=1),
        created_at=created, updated_at=created, state_version=version,
    )


def test_newer_snapshot_wins_older_never_overwrites(any_engine: Engine) -> None:
    save_snapshot(any_engine, snapshot("a", version=0))
    save_snapshot(any_engine, snapshot("a", version=3, status="RUNNING"))
    save_snapshot(any_engine, snapshot("a", version=2, status="PENDING"))  # late, older writer
    row = read_task(any_engine, "a", "t1")
    assert row is not None and row.status == "RUNNING" and row.state_version == 3
    assert row.next_run_at == T0 + timedelta(hours=1) and row.next_run_at.tzinfo is not None
    assert read_task(any_engine, "a", "t2") is None
    assert read_task(any_engine, "a", None) is not None


def test_execution_recorded_once_and_final_stays_final(any_engine: Engine) -> None:
    running = ExecutionRecord(id="a:1", task_id="a", tenant_id="t1", scheduled_at=T0,
                              status="RUNNING", started_at=T0)
    workflow_rows(any_engine, running)
    workflow_rows(any_engine, running)  # a retried bookkeeping call
    done = running.model_copy(update={"status": "COMPLETED", "attempts": 2, "finished_at": T0})
    workflow_rows(any_engine, done)
    workflow_rows(any_engine, running)  # a late RUNNING write must not resurrect it
    rows, cursor = list_executions(any_engine, task_id="a", limit=10)
    assert [(r.id, r.status, r.attempts) for r in rows] == [("a:1", "COMPLETED", 2)]
    assert cursor is None


def test_task_pages_newest_first_with_filters(any_engine: Engine) -> None:
    for n in range(7):
        save_snapshot(any_engine, snapshot(f"t{n}", version=1, created=T0 + timedelta(minutes=n),
                                           status="PAUSED" if n % 3 == 0 else "PENDING", name=f"name-{n % 2}"))
    save_snapshot(any_engine, snapshot("other", version=1, tenant="t2"))
    seen, cursor = [], None
    while True:
        page, cursor = list_tasks(any_engine, tenant_id="t1", limit=3, cursor=cursor)
        seen += [r.id for r in page]
        if cursor is None:
            break
    assert seen == [f"t{n}" for n in range(6, -1, -1)]
    paused, _ = list_tasks(any_engine, tenant_id="t1", limit=10, status="PAUSED")
    assert sorted(r.id for r in paused) == ["t0", "t3", "t6"]
    named, _ = list_tasks(any_engine, tenant_id="t1", limit=10, name="name-1")
    assert sorted(r.id for r in named) == ["t1", "t3", "t5"]
    everyone, _ = list_tasks(any_engine, tenant_id=None, limit=100)
    assert "other" in {r.id for r in everyone}
    with pytest.raises(ValueError):
        list_tasks(any_engine, tenant_id="t1", limit=3, cursor="not-a-cursor")


def _all_pages(engine: Engine, limit: int, **filters: str | None) -> list[str]:
    seen, cursor = [], None
    while True:
        page, cursor = list_tasks(engine, limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        seen += [r.id for r in page]
        if cursor is None:
            return seen


def test_pages_split_rows_created_at_the_same_instant(any_engine: Engine) -> None:
    # Rows of one instant are ordered by id; a page boundary inside them loses and repeats none.
    for n in range(9):
        save_snapshot(any_engine, snapshot(f"s{n}", version=1, created=T0 + timedelta(minutes=n // 4),
                                           status="PAUSED" if n % 2 else "PENDING"))
    save_snapshot(any_engine, snapshot("other", version=1, tenant="t2", created=T0))
    newest_first = ["s8", "s7", "s6", "s5", "s4", "s3", "s2", "s1", "s0"]
    for limit in (1, 2, 3, 4, 100):
        assert _all_pages(any_engine, limit, tenant_id="t1") == newest_first
        assert _all_pages(any_engine, limit, tenant_id="t1", status="PAUSED") == ["s7", "s5", "s3", "s1"]
        assert _all_pages(any_engine, limit, tenant_id="t1", name="n") == newest_first
        assert _all_pages(any_engine, limit, tenant_id=None) == ["s8", "s7", "s6", "s5", "s4", "s3", "s2",
                                                                   "s1", "s0", "other"]


def test_read_task_is_the_tenants_own(any_engine: Engine) -> None:
    save_snapshot(any_engine, snapshot("r", version=1, status="PAUSED"))
    row = read_task(any_engine, "r", "t1")
    assert row is not None and row.status == "PAUSED" and row.spec == {"cron": "0 10 * * *"}
    assert row.created_at == T0 and row.created_at.tzinfo is not None
    assert read_task(any_engine, "r", "t2") is None
    assert read_task(any_engine, "r", None) is not None
    assert read_task(any_engine, "missing", None) is None


def test_keys_hashed_and_revocable(any_engine: Engine) -> None:
    row, plain = create_key(any_engine, "t1")
    assert plain not in row.key_hash and row.key_hash != plain
    found = find_active_key(any_engine, plain)
    assert found is not None and found.tenant_id == "t1" and not found.is_admin
    assert find_active_key(any_engine, plain + "x") is None
    assert revoke_key(any_engine, row.id)
    assert find_active_key(any_engine, plain) is None
    assert not revoke_key(any_engine, row.id)
    assert [k.id for k in list_keys(any_engine, "t1")] == [row.id]


def test_migrations_match_the_models(any_engine: Engine) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlmodel import SQLModel

    with any_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, SQLModel.metadata)
    assert differences == []


def test_rows_versioned_before_0006_lose_to_the_next_write_of_their_run(any_engine: Engine) -> None:
    from alembic import command
    from sqlalchemy import text

    from store.engine import alembic_config, migrate
    from workflows.record import state_version

    run = T0 - timedelta(days=3)
    ms = int(run.timestamp() * 1000)
    with any_engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0005")
    # the old encoding: ms times 10**6 plus the run's own count
    insert_as_at_0005(any_engine, snapshot("m", version=ms * 1_000_000 + 40, status="RUNNING"))
    insert_as_at_0005(any_engine, snapshot("n", version=(ms + 5) * 1_000_000 + 2))
    migrate(any_engine)
    with any_engine.connect() as connection:
        rows = connection.execute(text("SELECT id, state_version FROM task")).tuples()
        versions = {task_id: version for task_id, version in rows}
    assert versions == {"m": state_version(run, 0), "n": state_version(run + timedelta(milliseconds=5), 0)}
    # the same run's next write wins, as does a later run's; an earlier run's never does
    save_snapshot(any_engine, snapshot("m", version=state_version(run, 41), status="PENDING"))
    save_snapshot(any_engine, snapshot("m", version=state_version(run - timedelta(seconds=1), 99),
                                       status="FAILED"))
    row = read_task(any_engine, "m", "t1")
    assert row is not None and row.status == "PENDING"
    # a worker of the release before, still running after the migration, writes the old way;
    # the next write of the new release still lands
    save_snapshot(any_engine, snapshot("m", version=ms * 1_000_000 + 50, status="RUNNING"))
    save_snapshot(any_engine, snapshot("m", version=state_version(run, 42), status="PAUSED"))
    row = read_task(any_engine, "m", "t1")
    assert row is not None and row.status == "PAUSED"


def insert_as_at_0005(engine: Engine, row: TaskSnapshot) -> None:
    """A new task row as the schema of revision 0005 holds it (no column added since)."""
    from sqlalchemy import column, inspect, table

    from store.models import TASK_TABLE

    values = row.model_dump()
    values["id"] = values.pop("task_id")
    there = {c["name"] for c in inspect(engine).get_columns("task")}
    values = {name: value for name, value in values.items() if name in there}
    then = table("task", *(column(name, TASK_TABLE.c[name].type) for name in values))
    with engine.begin() as connection:
        connection.execute(then.insert().values(**values))


def test_dead_letters_listed_and_moved(any_engine: Engine) -> None:
    from store.tasks import list_dead_letters, set_dead_letter

    save_snapshot(any_engine, snapshot("d", version=1, name="dl-task"))
    for n, letter in enumerate(["open", "open", None]):
        workflow_rows(any_engine, ExecutionRecord(
            id=f"d:{n}", task_id="d", tenant_id="t1", scheduled_at=T0 + timedelta(minutes=n),
            status="FAILED" if letter else "COMPLETED", dead_letter=letter,
        ))
    rows, _ = list_dead_letters(any_engine, tenant_id="t1", limit=10)
    assert [(r.id, name) for r, name in rows] == [("d:1", "dl-task"), ("d:0", "dl-task")]
    assert list_dead_letters(any_engine, tenant_id="t2", limit=10)[0] == []
    assert set_dead_letter(any_engine, "d:1", state="replayed")
    assert not set_dead_letter(any_engine, "d:1", state="dismissed")
    assert [r.id for r, _ in list_dead_letters(any_engine, tenant_id=None, limit=10)[0]] == ["d:0"]


def test_a_task_is_marked_ended_only_if_no_workflow_wrote_it_since_it_was_read(any_engine: Engine) -> None:
    save_snapshot(any_engine, snapshot("a", version=3))
    save_snapshot(any_engine, snapshot("a", version=5))  # a new run of the task wrote it
    assert not mark_task(any_engine, "a", status="CANCELLED", reason="terminated", seen_version=3)
    row = read_task(any_engine, "a", "t1")
    assert row is not None and (row.status, row.next_run_at) == ("PENDING", T0 + timedelta(hours=1))
    assert mark_task(any_engine, "a", status="CANCELLED", reason="terminated", seen_version=5)
    row = read_task(any_engine, "a", "t1")
    assert row is not None and (row.status, row.status_reason, row.next_run_at) == (
        "CANCELLED", "terminated", None)
