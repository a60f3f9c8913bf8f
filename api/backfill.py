"""Backfill of a task's past instants: pick them from its schedule and its execution rows,
answer what happens to each, and hand the ones to run to its workflow."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import Engine

from api.calendars import calendar_plan
from api.compute import FireMath
from api.database import in_thread
from api.errors import InvalidTask, TaskConflict
from api.schemas import BackfillIn, BackfillInstantOut, BackfillOut
from api.temporal import TemporalGateway
from scheduling.backfill import (
    UNDECIDED,
    BackfillAction,
    BackfillMode,
    BadRange,
    NoPastInstants,
    action,
    calendar_keeps,
    earlier_result,
    instants_between,
    undecided,
)
from scheduling.policy import Position
from scheduling.spec import ScheduleType, TaskSpec
from scheduling.status import FINAL_STATUSES, TaskStatus, execution_id
from store.backfill import rows_by_id
from store.models import Task
from workflows.state import BackfillItem, BackfillRequest, TaskState


async def backfill(engine: Engine, temporal: TemporalGateway, fire_math: FireMath, task: Task,
                   body: BackfillIn, request_id: str | None, actor: str | None = None, *,
                   payer: str) -> BackfillOut:
    """The instants of ``body``'s range and what happens to each; unless a dry run, the task's
    workflow runs those marked ``run`` (409 while another backfill of it runs). ``payer``: the
    caller's tenant, whose fire-math budget the range's listing spends."""
    if TaskStatus(task.status) in FINAL_STATUSES:
        raise TaskConflict(f"task {task.id} is {task.status}: an ended task cannot be backfilled")
    spec = TaskSpec.model_validate(task.spec)
    # The workflow's state before the rows: an instant it decides after this is still kept.
    state = await temporal.state(task.id)
    # The anchor of a fixed-rate interval moves when its schedule is re-timed: the workflow's.
    anchor = task.created_at if _needs_no_anchor(spec) else state.anchor
    try:
        fires = await fire_math.charged(payer, instants_between, spec, anchor, body.start,
                                        body.end, datetime.now(UTC))
    except NoPastInstants as exc:
        raise TaskConflict(str(exc)) from exc  # the range is fine; the task has none
    except BadRange as exc:
        raise InvalidTask(str(exc)) from exc
    ids = [execution_id(task.id, fire) for fire in fires]
    rows = await in_thread(rows_by_id, engine, task.id, task.tenant_id, ids)
    held: set[datetime | str] = {*state.running, *state.waiting, *(run.scheduled_at for run in state.queue)}
    position = await _with_calendars(engine, state, fires) if body.mode is BackfillMode.MISSING else None
    shown: list[BackfillInstantOut] = []
    items: list[BackfillItem] = []
    for fire, run_id in zip(fires, ids, strict=True):
        row = rows.get(run_id)
        status = row.status if row else None
        act = action(body.mode, status, row.dead_letter if row else None)
        why = None
        if act is BackfillAction.RUN and undecided(fire, run_id, state.next_fire_at, held):
            why = UNDECIDED
        elif act is BackfillAction.RUN and position is not None:
            why = calendar_keeps(position.verdict(fire), status, row.reason if row else None)
        if why is not None:
            act = BackfillAction.KEEP
        shown.append(BackfillInstantOut(scheduled_at=fire, execution_id=run_id, current=status,
                                        action=act, reason=why))
        if act is BackfillAction.RUN:
            earlier = earlier_result(status, row.reason, row.error) if row else None
            items.append(BackfillItem(scheduled_at=fire, earlier=earlier))
    if not body.dry_run:
        await temporal.backfill(task.id, BackfillRequest(mode=body.mode.value, start=body.start,
                                                         end=body.end, instants=items,
                                                         actor=actor),
                                request_id=request_id)
    return BackfillOut(task_id=task.id, mode=body.mode, start=body.start, end=body.end,
                       dry_run=body.dry_run, to_run=len(items), instants=shown)


async def _with_calendars(engine: Engine, state: TaskState, fires: list[datetime]) -> Position | None:
    """Where the schedule stands with its calendars' dates over the fires' years, read now as
    the workflow reads them; None when the task names no calendar."""
    plan = await calendar_plan(engine, state.tenant_id, state.spec, fires)
    return None if plan is None else replace(state.position(), calendar=plan)


def _needs_no_anchor(spec: TaskSpec) -> bool:
    """Only a fixed-rate interval without start_date counts its instants from the anchor."""
    return spec.schedule_type is not ScheduleType.INTERVAL or spec.start_date is not None
