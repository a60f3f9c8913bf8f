"""SelfHealing: the probes of a task the circuit breaker auto-paused. The rules are the policy
engine's (``policy.first_probe``, ``after_probe``, ``probe_due``); this carries them out on
the task's state, which holds the probe across continue-as-new."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from scheduling import policy
    from scheduling.policy import Probe, Run
    from scheduling.status import ExecutionStatus, Trigger, execution_id
    from workflows.state import TaskState


# How a pause's reason tells of the planned probe (``SelfHealing.reason``).
PROBE_TOLD = "; probe run at "


def told_cool_down(reason: str | None) -> float | None:
    """The cool-down a pause's reason tells of (``SelfHealing.reason``); None if none."""
    if reason is None or PROBE_TOLD not in reason:
        return None
    told = reason.rsplit("(cool-down ", 1)[-1].removesuffix(" s)")
    try:
        return float(told)
    except ValueError:
        return None


class Healed(Enum):
    """What a probe's end did to the task."""

    RESUMED = "resumed"  # it succeeded: resume the task
    FAILED = "failed"  # paused again, the cool-down doubled
    RETRY = "retry"  # it proved nothing (not run, cancelled): the same cool-down again
    ENDED = "ended"  # no cool-down any more (the task was resumed or is being cancelled)


class SelfHealing:
    """Plans, queues and judges the probe runs of an auto-paused task (``enabled`` False: a
    workflow from before the rule, whose task stays paused until a user resumes it)."""

    def __init__(self, state: TaskState, *, enabled: bool) -> None:
        self._state = state
        self._enabled = enabled

    def tripped(self, reason: str, now: datetime) -> str:
        """The breaker has just paused the task: plan its first probe; the pause's reason."""
        if self._enabled:
            self._state.probe = policy.first_probe(self._state.spec, now)
        return self.reason(reason)

    def queue_due(self, now: datetime) -> None:
        """Queue the probe once the cool-down is over (it starts although the task is paused,
        like a run someone asked for)."""
        state = self._state
        if not (self._enabled and state.paused and state.probe is not None
                and policy.probe_due(state.probe, probing=state.probing is not None, now=now)):
            return
        run_id = execution_id(state.task_id, state.probe.at, Trigger.PROBE)
        state.queue.append(Run(scheduled_at=state.probe.at, trigger=Trigger.PROBE, execution_id=run_id))
        state.probing = run_id

    def owns(self, run_id: str) -> bool:
        """The run is the probe queued or in flight."""
        return self._enabled and run_id == self._state.probing

    def ended(self, outcome: ExecutionStatus | None, now: datetime) -> Healed:
        """The probe ended (``outcome`` None: it did not run); plan the next one if any."""
        state = self._state
        state.probing = None
        if state.probe is None:
            return Healed.ENDED
        state.probe = policy.after_probe(state.probe, outcome, now)
        if state.probe is None:
            return Healed.RESUMED
        if outcome is ExecutionStatus.FAILED:
            state.status_reason = self.reason("the probe run failed; paused again")
            return Healed.FAILED
        return Healed.RETRY

    def stop(self) -> bool:
        """End the cool-down (a user's pause, self-healing turned off): no probe is planned,
        one queued is dropped, and the reason no longer tells of it; False if none was. A probe
        already running runs to its end, which then resumes nothing."""
        state = self._state
        queued = [run for run in state.queue if run.execution_id == state.probing]
        if state.probe is None and not queued:
            return False
        for run in queued:
            state.queue.remove(run)
            state.probing = None
        state.probe = None
        if state.status_reason is not None:
            state.status_reason = state.status_reason.split(PROBE_TOLD)[0]
        return True

    def replan(self, cool_down: float | None) -> None:
        """The task's ``auto_resume_after_seconds`` changed: without it, end the cool-down;
        with it, move the planned probe as if it had been planned with the new cool-down."""
        state = self._state
        if cool_down is None:
            self.stop()
            return
        probe = state.probe
        if probe is None or state.probing is not None or probe.cool_down_seconds == cool_down:
            return
        planned_from = probe.at - timedelta(seconds=probe.cool_down_seconds)
        state.probe = Probe(at=planned_from + timedelta(seconds=cool_down), cool_down_seconds=cool_down)
        if state.status_reason is not None:
            state.status_reason = self.reason(state.status_reason.split(PROBE_TOLD)[0])

    def wake(self) -> datetime | None:
        """When the sleeping workflow must wake to queue the probe."""
        state = self._state
        if not self._enabled or not state.paused or state.probe is None or state.probing:
            return None
        return state.probe.at

    def reason(self, reason: str) -> str:
        """A pause's reason, with when the next probe runs."""
        probe = self._state.probe
        if probe is None:
            return reason
        at = probe.at.isoformat().replace("+00:00", "Z")
        return f"{reason}{PROBE_TOLD}{at} (cool-down {probe.cool_down_seconds:g} s)"
