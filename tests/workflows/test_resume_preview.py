"""A resume decides the fires of a long pause (many passes) as ``decide_resume`` previewed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.policy import Flight
from scheduling.resume import decide_resume
from scheduling.status import ResumeMissed
from tests.conftest import new_worker
from tests.workflows.helpers import executions, running_task, spec, task_state, until
from workflows.task import TaskWorkflow

MINUTES = 60


@pytest.mark.parametrize("missed", list(ResumeMissed))
async def test_a_resume_records_what_the_preview_decided(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, missed: ResumeMissed,
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup",
                max_catchup_runs=3)
    async with new_worker(time_env.client, sqlite_engine) as worker, \
            running_task(time_env, worker.task_queue, task) as handle:
        await time_env.sleep(10)
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        await time_env.sleep(300 * MINUTES)  # 300 fires: more than one pass of the policy
        state = await task_state(handle)
        choice = decide_resume(state.position(), Flight(), missed, await time_env.get_current_time())
        await handle.execute_update(TaskWorkflow.resume_update, missed)
        fires = {f.scheduled_at: f for f in choice.fires}
        assert len(fires) == 300 and choice.more == 0

        async def decided() -> bool:
            rows = {r.scheduled_at: r for r in executions(sqlite_engine, state.task_id)}
            return all(at in rows and rows[at].status not in ("RUNNING", "PENDING") for at in fires)
        await until(decided, timeout=60)

    rows = {r.scheduled_at: r for r in executions(sqlite_engine, state.task_id)}
    for at, fire in fires.items():
        got = (rows[at].status, rows[at].trigger if fire.runs else rows[at].reason)
        assert got == (("COMPLETED", fire.trigger) if fire.runs else ("SKIPPED", fire.skipped)), at
    assert {at for at in rows if at <= max(fires)} == set(fires)
    expected_runs = {ResumeMissed.SKIP: 0, ResumeMissed.POLICY: 4}[missed]
    assert choice.runs == expected_runs and state.created_at + timedelta(minutes=300) in fires
