"""The spans of a task's decisions about its fires: a trace answers "why did it (not) run" with
the decision (run, catchup, skip, withdraw), its reason and the rule that made it.

They are the tracing interceptor's workflow spans (``temporalio.contrib.opentelemetry``, as its
``workflow.completed_span`` makes them): recorded when the decision is made, never again when a
worker replays the history, and only where the workflow runs in a trace. The decision to run is
the current span while its job is started, so the job's spans are its children.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload

with workflow.unsafe.imports_passed_through():
    import opentelemetry.context
    from temporalio.contrib.opentelemetry import TracingWorkflowInboundInterceptor

    from scheduling.spec import TaskSpec
    from scheduling.status import SkipReason, Trigger

SPAN_PREFIX = "FireDecision:"


class _Outbound:
    """Where the interceptor writes a new span's context, as it does on an outgoing call."""

    def __init__(self) -> None:
        self.headers: Mapping[str, Payload] = {}


def rule_of(spec: TaskSpec, decision: str, reason: str | None, trigger: Trigger) -> str:
    """The rule of the task that made the decision, in the words of its fields."""
    missed = f"missed_run_policy={spec.effective_missed_run_policy().value}"
    if decision == "withdraw":
        return f"withdrawn before it ran: {reason or 'late'}"
    if decision == "skip":
        skips: dict[str, str] = {
            SkipReason.MISSED: missed,
            SkipReason.OUTSIDE_WINDOW: f"catchup_window_seconds={spec.catchup_window_seconds}",
            SkipReason.CATCHUP_CAP: f"max_catchup_runs={spec.max_catchup_runs}",
            SkipReason.OVERLAP: f"overlap_policy={spec.overlap_policy.value}",
            SkipReason.PAUSED: "the task was paused",
            SkipReason.RESCHEDULED: "the schedule changed",
            SkipReason.CANCELLED: "the task was cancelled",
        }
        return skips.get(reason or "", reason or "skipped")
    runs: dict[str, str] = {
        Trigger.CATCHUP: missed,
        Trigger.MANUAL: "triggered",
        Trigger.REPLAY: "replay of a dead letter",
    }
    return runs.get(trigger, "the schedule")


def decided(spec: TaskSpec, decision: str, *, task_id: str, fire: datetime, run_id: str | None,
            reason: str | None = None, trigger: Trigger = Trigger.SCHEDULE) -> Any:
    """Record a decision's span; its context (None when no span was made: not traced, or
    replaying) for ``current``."""
    interceptor = TracingWorkflowInboundInterceptor._from_context()
    if interceptor is None:
        return None
    attributes = {
        "scheduler.task_id": task_id, "scheduler.decision": decision,
        "scheduler.scheduled_at": fire.isoformat(), "scheduler.trigger": trigger.value,
        "scheduler.rule": rule_of(spec, decision, reason, trigger),
    }
    if run_id:
        attributes["scheduler.execution_id"] = run_id
    if reason:
        attributes["scheduler.reason"] = reason
    outbound = _Outbound()
    # The SDK's completed_span, but keeping the new span's context (it returns none): the same
    # call its outbound interceptor makes for an activity's start.
    interceptor._completed_span(f"{SPAN_PREFIX}{decision}", additional_attributes=attributes,
                                add_to_outbound=outbound)
    header = outbound.headers.get(interceptor.header_key)
    if header is None:
        return None
    carrier = interceptor.payload_converter.from_payloads([header])[0]
    return interceptor.text_map_propagator.extract(carrier, context=opentelemetry.context.get_current())


@contextmanager
def current(context: Any) -> Iterator[None]:
    """Make a decision's span the current one (nothing when there is none)."""
    if context is None:
        yield
        return
    token = opentelemetry.context.attach(context)
    try:
        yield
    finally:
        opentelemetry.context.detach(token)
