"""SelfHealing on a task's state: ending the cool-down drops a queued probe, and the reason
it writes tells its cool-down back to a restart from the row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.policy import Probe, Run
from scheduling.status import Trigger, execution_id
from tests.workflows.helpers import spec
from workflows.breaker import SelfHealing, told_cool_down
from workflows.state import TaskState, TaskWorkflowInput

NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


def _auto_paused(cool_down: float = 300) -> tuple[TaskState, SelfHealing]:
    task = spec(schedule_type="interval", interval_seconds=60, auto_resume_after_seconds=300)
    state = TaskWorkflowInput(task_id="a", tenant_id="t1", spec=task, created_at=NOW).initial_state()
    healing = SelfHealing(state, enabled=True)
    state.paused = True
    state.probe = Probe(at=NOW + timedelta(seconds=cool_down), cool_down_seconds=cool_down)
    state.status_reason = healing.reason("auto-paused")
    return state, healing


def test_ending_the_cool_down_drops_a_queued_probe_and_its_mention() -> None:
    state, healing = _auto_paused()
    manual = Run(scheduled_at=NOW, trigger=Trigger.MANUAL, execution_id="a:manual-1")
    state.queue.append(manual)
    healing.queue_due(NOW + timedelta(minutes=5))
    assert state.probing == execution_id("a", NOW + timedelta(minutes=5), Trigger.PROBE)
    assert healing.stop()
    assert state.queue == [manual] and state.probe is None and state.probing is None
    assert state.status_reason == "auto-paused"
    assert not healing.stop()  # nothing left to end


def test_a_running_probe_runs_on_but_resumes_nothing() -> None:
    state, healing = _auto_paused()
    healing.queue_due(NOW + timedelta(minutes=5))
    state.queue.clear()  # started: in flight, no longer queued
    assert healing.stop() and state.probing is not None
    assert healing.ended(None, NOW + timedelta(minutes=6)).value == "ended"


def test_a_new_cool_down_moves_the_probe_and_none_ends_it() -> None:
    state, healing = _auto_paused(cool_down=600)
    healing.replan(60)
    assert state.probe == Probe(at=NOW + timedelta(seconds=60), cool_down_seconds=60)
    assert told_cool_down(state.status_reason) == 60
    healing.replan(None)
    assert state.probe is None and state.status_reason == "auto-paused"
    assert told_cool_down(state.status_reason) is None


def test_the_reason_tells_the_cool_down_back() -> None:
    state, _ = _auto_paused(cool_down=1200)
    assert told_cool_down(state.status_reason) == 1200
    assert told_cool_down("paused") is None and told_cool_down(None) is None
