"""Execution rows end with their final content whoever writes last, and a replay is no new
run (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from scheduling.status import DeadLetter
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import get_execution, scheduled_runs_executed, set_dead_letter
from tests.store.writes import jobs_worker_completed, jobs_worker_started, workflow_rows

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def run(status: str, **fields: object) -> ExecutionRecord:
    return ExecutionRecord.model_validate({
        "id": "a:1", "task_id": "a", "tenant_id": "t1", "scheduled_at": T0, "instant": T0,
        "status": status, **fields})


def test_the_jobs_workers_completed_row_landing_after_the_final_row_keeps_finish_and_drift(
    any_engine: Engine,
) -> None:
    started = T0 + timedelta(seconds=90)
    workflow_rows(any_engine, run("RUNNING", attempts=1, started_at=started, lateness_ms=90_000.0))
    final = run("COMPLETED", attempts=1, started_at=started, finished_at=started + timedelta(seconds=2),
                lateness_ms=90_000.0, drifted=True, http_status=200)
    early = run("COMPLETED", attempts=1, started_at=started, finished_at=started + timedelta(seconds=5),
                lateness_ms=90_000.0, http_status=200)  # drifted unknown to the worker: False
    workflow_rows(any_engine, final)  # the workflow's final row
    jobs_worker_completed(any_engine, early)  # the worker's write, late in its batch
    row = get_execution(any_engine, "a:1")
    assert row is not None and row.status == "COMPLETED"
    assert (row.drifted, row.finished_at) == (True, final.finished_at)


def test_the_final_row_lands_over_the_jobs_workers_completed_row(any_engine: Engine) -> None:
    started = T0 + timedelta(seconds=90)
    workflow_rows(any_engine, run("RUNNING", attempts=1, started_at=started))
    jobs_worker_completed(any_engine, run("COMPLETED", attempts=1, started_at=started,
                                          finished_at=started + timedelta(seconds=5)))
    workflow_rows(any_engine, run("COMPLETED", attempts=1, started_at=started, drifted=True,
                                   finished_at=started + timedelta(seconds=2)))
    row = get_execution(any_engine, "a:1")
    assert row is not None and (row.drifted, row.finished_at) == (True, started + timedelta(seconds=2))


def test_a_replayed_dead_letter_keeps_its_trigger_and_counts_once_for_max_runs(
    any_engine: Engine,
) -> None:
    workflow_rows(any_engine, run("FAILED", trigger="schedule", attempts=3, dead_letter="open",
                                   finished_at=T0 + timedelta(seconds=3), error="boom"))
    assert scheduled_runs_executed(any_engine, "a") == 1
    assert set_dead_letter(any_engine, "a:1", state=DeadLetter.REPLAYED)  # the API, on replay
    started = T0 + timedelta(hours=1)
    jobs_worker_started(any_engine, run("RUNNING", trigger="replay", attempts=1, started_at=started))
    row = get_execution(any_engine, "a:1")
    assert row is not None and (row.status, row.trigger) == ("RUNNING", "schedule")  # reopened
    done = run("COMPLETED", trigger="replay", attempts=1, started_at=started,
               finished_at=started + timedelta(seconds=1))
    jobs_worker_completed(any_engine, done)
    workflow_rows(any_engine, done)  # the workflow's final row
    jobs_worker_started(any_engine, run("RUNNING", trigger="replay", attempts=1, started_at=started))  # late
    row = get_execution(any_engine, "a:1")
    assert row is not None
    assert (row.status, row.trigger, row.dead_letter) == ("COMPLETED", "schedule", "replayed")
    assert scheduled_runs_executed(any_engine, "a") == 1  # the reconciler's max_runs count


def test_a_run_over_a_skipped_row_keeps_nothing_of_the_skip(any_engine: Engine) -> None:
    # Given back and recorded SKIPPED, then sent again and run: the row is the run's alone.
    workflow_rows(any_engine, run("SKIPPED", reason="rescheduled", finished_at=T0))
    started = T0 + timedelta(seconds=1)
    jobs_worker_started(any_engine, run("RUNNING", attempts=1, started_at=started))
    row = get_execution(any_engine, "a:1")
    assert row is not None
    assert (row.status, row.reason, row.finished_at) == ("RUNNING", None, None)
    done = run("COMPLETED", attempts=1, started_at=started, finished_at=started + timedelta(seconds=1),
               http_status=200)
    jobs_worker_completed(any_engine, done)
    workflow_rows(any_engine, done)
    row = get_execution(any_engine, "a:1")
    assert row is not None and (row.status, row.reason, row.http_status) == ("COMPLETED", None, 200)


def test_a_replay_that_completes_keeps_nothing_of_the_failure(any_engine: Engine) -> None:
    workflow_rows(any_engine, run("FAILED", attempts=3, dead_letter="open", http_status=500,
                                   response_snippet="down", finished_at=T0 + timedelta(seconds=3),
                                   error="HTTP 500"))
    assert set_dead_letter(any_engine, "a:1", state=DeadLetter.REPLAYED)
    started = T0 + timedelta(hours=1)
    jobs_worker_started(any_engine, run("RUNNING", trigger="replay", attempts=1, started_at=started))
    row = get_execution(any_engine, "a:1")
    assert row is not None and row.status == "RUNNING"
    assert (row.error, row.http_status, row.response_snippet, row.finished_at) == (None, None, None, None)
    # A handler's run has no HTTP answer: the row shows none, not the failed attempt's.
    done = run("COMPLETED", trigger="replay", attempts=1, started_at=started,
               finished_at=started + timedelta(seconds=1))
    workflow_rows(any_engine, done)
    row = get_execution(any_engine, "a:1")
    assert row is not None
    assert (row.status, row.error, row.http_status, row.response_snippet) == ("COMPLETED", None, None, None)
    assert row.dead_letter == "replayed"


def test_a_final_row_without_the_attempts_answer_keeps_the_one_the_jobs_worker_wrote(
    any_engine: Engine,
) -> None:
    # The last attempt's job got its answer, but its completion never reached the server: the
    # workflow's row (timed out, no attempt details) must not erase what the target said.
    started = T0 + timedelta(seconds=1)
    jobs_worker_started(any_engine, run("RUNNING", attempts=3))
    jobs_worker_completed(any_engine, run("COMPLETED", attempts=3, started_at=started,
                                          finished_at=started + timedelta(seconds=1),
                                          http_status=200, response_snippet="booked"))
    workflow_rows(any_engine, run("FAILED", attempts=3, finished_at=started + timedelta(seconds=40),
                                   error="activity Heartbeat timeout", dead_letter="open"))
    row = get_execution(any_engine, "a:1")
    assert row is not None
    assert (row.status, row.http_status, row.response_snippet) == ("FAILED", 200, "booked")


def test_an_instant_a_backfill_ran_again_still_counts_for_max_runs(any_engine: Engine) -> None:
    def done(instant: datetime, trigger: str) -> ExecutionRecord:
        return run("COMPLETED", id=f"a:{instant:%H}", scheduled_at=instant, instant=instant,
                   trigger=trigger, attempts=1, started_at=instant,
                   finished_at=instant + timedelta(seconds=1))

    later = T0 + timedelta(hours=1)
    # Two scheduled runs, counted on the task row by the workflow that ran them.
    counted = TaskSnapshot(task_id="a", tenant_id="t1", name="n", schedule_type="cron",
                           spec={"cron": "0 * * * *"}, status="PENDING", executed=2,
                           created_at=T0, updated_at=later, state_version=2)
    workflow_rows(any_engine, done(T0, "schedule"), done(later, "schedule"), snapshot=counted)
    # A backfill over both hours runs the first again: its row now says backfill.
    rerun = done(T0, "backfill").model_copy(update={"started_at": later + timedelta(minutes=5)})
    jobs_worker_started(any_engine, rerun.model_copy(update={"status": "RUNNING"}))
    workflow_rows(any_engine, rerun)
    row = get_execution(any_engine, f"a:{T0:%H}")
    assert row is not None and row.trigger == "backfill"
    assert scheduled_runs_executed(any_engine, "a") == 2  # the reconciler's max_runs count
