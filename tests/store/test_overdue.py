"""Overdue alarms in the database, on SQLite and PostgreSQL: which runs are overdue, one raise
and one clearing per alarm however many API replicas try, and what cleared it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from store.models import ExecutionRecord, TaskSnapshot
from store.overdue import BATCH, clear_alarm, overdue_runs, raise_alarm, recovered_runs
from store.tasks import list_tasks, read_task, save_snapshot
from tests.store.writes import jobs_worker_started, workflow_rows

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DEFAULT = 60.0


def task(task_id: str, *, due: datetime | None, status: str = "PENDING", tenant: str = "t1",
         **spec: Any) -> TaskSnapshot:
    return TaskSnapshot(
        task_id=task_id, tenant_id=tenant, name=task_id, schedule_type="interval",
        spec={"interval_seconds": 600, **spec}, status=status, next_run_at=due,
        created_at=NOW - timedelta(days=1), updated_at=NOW, state_version=1,
    )


def overdue_ids(engine: Engine, now: datetime = NOW) -> list[str]:
    return sorted(a.task_id for a in overdue_runs(engine, now, DEFAULT, 1.0))


def test_a_run_neither_started_nor_decided_past_its_bound_is_overdue(any_engine: Engine) -> None:
    late = NOW - timedelta(seconds=90)
    save_snapshot(any_engine, task("late", due=late))
    save_snapshot(any_engine, task("recent", due=NOW - timedelta(seconds=30)))  # within 60 s
    save_snapshot(any_engine, task("own-bound", due=NOW - timedelta(seconds=30), overdue_after_seconds=10))
    save_snapshot(any_engine, task("paused", due=late, status="PAUSED"))
    save_snapshot(any_engine, task("cancelled", due=late, status="CANCELLED"))
    save_snapshot(any_engine, task("future", due=NOW + timedelta(seconds=5)))
    save_snapshot(any_engine, task("started", due=late, status="RUNNING"))
    jobs_worker_started(any_engine, ExecutionRecord(
        id="started:1", task_id="started", tenant_id="t1", scheduled_at=late, instant=late,
        status="RUNNING", started_at=late + timedelta(seconds=1)))
    save_snapshot(any_engine, task("skipped", due=late))
    workflow_rows(any_engine, ExecutionRecord(
        id="skipped:1", task_id="skipped", tenant_id="t1", scheduled_at=late, status="SKIPPED",
        reason="overlap"))
    assert overdue_ids(any_engine) == ["late", "own-bound"]


def test_one_replica_raises_and_one_clears_each_alarm(any_engine: Engine) -> None:
    due = NOW - timedelta(seconds=120)
    save_snapshot(any_engine, task("a", due=due))
    save_snapshot(any_engine, task("b", due=due, tenant="t2"))
    seen_by_two = [overdue_runs(any_engine, NOW, DEFAULT, 1.0) for _ in range(2)]
    raised = [raise_alarm(any_engine, alarm, NOW) for alarms in seen_by_two for alarm in alarms
              if alarm.task_id == "a"]
    assert raised == [True, False]
    assert overdue_ids(any_engine) == ["b"]  # a's alarm is up: not raised again
    rows, _ = list_tasks(any_engine, tenant_id="t1", limit=10, overdue=True)
    assert [r.id for r in rows] == ["a"] and rows[0].overdue_run_at == due
    assert list_tasks(any_engine, tenant_id="t2", limit=10, overdue=True)[0] == []
    assert recovered_runs(any_engine) == []  # nothing came yet

    # A workflow snapshot leaves the alarm alone: only the check writes it.
    save_snapshot(any_engine, task("a", due=due).model_copy(update={"state_version": 2}))
    row = read_task(any_engine, "a", "t1")
    assert row is not None and row.overdue_since == NOW

    workflow_rows(any_engine, ExecutionRecord(
        id="a:1", task_id="a", tenant_id="t1", scheduled_at=due, status="SKIPPED", reason="missed"))
    seen_by_two = [recovered_runs(any_engine) for _ in range(2)]
    assert [(a.task_id, a.outcome) for a in seen_by_two[0]] == [("a", "skipped: missed")]
    assert [clear_alarm(any_engine, alarms[0]) for alarms in seen_by_two] == [True, False]
    assert list_tasks(any_engine, tenant_id="t1", limit=10, overdue=True)[0] == []


def test_an_alarm_clears_when_its_task_is_paused_or_moves_on(any_engine: Engine) -> None:
    due = NOW - timedelta(seconds=120)
    for name in ("paused", "moved"):
        save_snapshot(any_engine, task(name, due=due))
        [alarm] = [a for a in overdue_runs(any_engine, NOW, DEFAULT, 1.0) if a.task_id == name]
        assert raise_alarm(any_engine, alarm, NOW)
    save_snapshot(any_engine, task("paused", due=None, status="PAUSED").model_copy(update={"state_version": 2}))
    save_snapshot(any_engine, task("moved", due=NOW + timedelta(minutes=10)).model_copy(update={"state_version": 2}))
    outcomes = {a.task_id: a.outcome for a in recovered_runs(any_engine)}
    assert outcomes == {"paused": "paused", "moved": "rescheduled"}


def test_a_backlog_within_the_default_bound_hides_no_task_with_a_shorter_own_bound(
    any_engine: Engine,
) -> None:
    for n in range(BATCH + 5):  # late, but by less than the default bound: not overdue
        save_snapshot(any_engine, task(f"backlog-{n:04d}", due=NOW - timedelta(seconds=50)))
    save_snapshot(any_engine, task("short", due=NOW - timedelta(seconds=20), overdue_after_seconds=5))
    assert overdue_ids(any_engine) == ["short"]


def test_a_run_sent_or_queued_and_not_started_is_overdue_though_the_row_moved_on(
    any_engine: Engine,
) -> None:
    """The workflow sent the run (or queued it) and moved next_run_at to the next fire; its
    unstarted_at keeps the run watched until a start is reported or its fire is decided."""
    late, ahead = NOW - timedelta(seconds=90), NOW + timedelta(minutes=10)
    save_snapshot(any_engine, task("sent", due=ahead).model_copy(update={"unstarted_at": late}))
    save_snapshot(any_engine, task("coming", due=ahead).model_copy(
        update={"unstarted_at": NOW - timedelta(seconds=30)}))  # within its bound
    save_snapshot(any_engine, task("none", due=ahead))  # every run sent has started
    [alarm] = overdue_runs(any_engine, NOW, DEFAULT, 1.0)
    assert (alarm.task_id, alarm.run_at) == ("sent", late)
    assert raise_alarm(any_engine, alarm, NOW)
    row = read_task(any_engine, "sent", "t1")
    assert row is not None and row.overdue_run_at == late and row.overdue_since == NOW
    assert recovered_runs(any_engine) == []

    # A start reported: the workflow writes the row without it, and the alarm clears.
    save_snapshot(any_engine, task("sent", due=ahead).model_copy(
        update={"unstarted_at": None, "state_version": 2}))
    jobs_worker_started(any_engine, ExecutionRecord(
        id="sent:1", task_id="sent", tenant_id="t1", scheduled_at=late, instant=late,
        status="RUNNING", started_at=NOW))
    [back] = recovered_runs(any_engine)
    assert (back.task_id, back.run_at, back.outcome) == ("sent", late, "started")
    assert clear_alarm(any_engine, back)
    assert overdue_ids(any_engine) == []


def test_a_raise_loses_to_a_start_reported_meanwhile(any_engine: Engine) -> None:
    late, ahead = NOW - timedelta(seconds=90), NOW + timedelta(minutes=10)
    save_snapshot(any_engine, task("q", due=ahead).model_copy(update={"unstarted_at": late}))
    [alarm] = overdue_runs(any_engine, NOW, DEFAULT, 1.0)
    save_snapshot(any_engine, task("q", due=ahead).model_copy(
        update={"unstarted_at": None, "state_version": 2}))
    assert not raise_alarm(any_engine, alarm, NOW)
    row = read_task(any_engine, "q", "t1")
    assert row is not None and row.overdue_since is None


def test_runs_within_long_bounds_of_their_own_never_fill_the_batch_ahead_of_an_overdue_run(
    any_engine: Engine,
) -> None:
    # One tenant's BATCH runs 10 min late with a bound of 7 days (not overdue), sooner than
    # another tenant's run 5 min late with the default bound: that one is still found, raised.
    for n in range(BATCH):
        save_snapshot(any_engine, task(f"patient-{n:04d}", due=NOW - timedelta(minutes=10),
                                       tenant="t1", overdue_after_seconds=7 * 86400))
    save_snapshot(any_engine, task("late", due=NOW - timedelta(minutes=5), tenant="t2"))
    save_snapshot(any_engine, task("own-late", due=NOW - timedelta(seconds=30), tenant="t2",
                                   overdue_after_seconds=20.5))
    save_snapshot(any_engine, task("own-in-time", due=NOW - timedelta(seconds=30), tenant="t2",
                                   overdue_after_seconds=30.5))
    assert overdue_ids(any_engine) == ["late", "own-late"]
    for alarm in overdue_runs(any_engine, NOW, DEFAULT, 1.0):
        raise_alarm(any_engine, alarm, NOW)
    rows, _ = list_tasks(any_engine, tenant_id="t2", limit=10, overdue=True)
    assert sorted(row.id for row in rows) == ["late", "own-late"]
