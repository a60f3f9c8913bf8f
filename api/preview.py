"""Previews: the fires of a task that is not saved, of a change before it is made, and of a saved
task, each validated exactly as create or update would validate it and saving nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from pydantic import BaseModel, Field, ValidationError

from api.calendars import by_calendar, calendar_plan, judged_again
from api.database import in_thread
from api.errors import InvalidTask, TaskConflict
from api.service import Principal, TaskService, _first_error
from api.validation import TenantUsage, validate_new_task
from scheduling import policy
from scheduling.calendars import CalendarPlan
from scheduling.preview import (
    PreviewFire,
    SkipRule,
    describe,
    herd_warning,
    schedule_warnings,
    upcoming,
    upcoming_of_new,
)
from scheduling.resume import ResumeChoice, decide_resume
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import FINAL_STATUSES, ResumeMissed, TaskStatus
from store.models import Task
from store.quotas import quota_for
from store.upcoming import tasks_running_next_at
from workflows.state import TaskState


class ResumePreview(BaseModel):
    """What resuming a paused task at ``as_of`` would do with the fires due in its pause, for
    each choice of ``missed`` of ``POST /tasks/{task_id}/resume``."""

    as_of: datetime = Field(description="the time of the resume previewed: a fire coming due "
                            "after it changes the answer")
    skip: ResumeChoice
    policy: ResumeChoice


class PreviewOut(BaseModel):
    """A schedule in words, its upcoming fires and what to know before saving it."""

    description: str = Field(examples=["At 10:00, every day, in Europe/Berlin"])
    fires: list[PreviewFire]
    warnings: list[str]
    before: PreviewOut | None = Field(
        default=None, description="for a change of a saved task: its fires as it is now")
    on_resume: ResumePreview | None = Field(
        default=None, description="for a paused task: what resuming it now would do with the "
        "fires due in its pause, under each choice of missed")


class Previews:
    """Previews through the task service's own validation, quota and store."""

    def __init__(self, service: TaskService) -> None:
        self.service = service
        # Listing fires runs on a thread and the tenant's CPU budget pays for it (api/compute.py).
        self._charged = service.fire_math.charged

    async def of_new(
        self, who: Principal, spec: TaskSpec, usage: TenantUsage, *, limit: int, body_size: int,
    ) -> PreviewOut:
        """The fires ``spec`` would have if it were created now (4xx as create would answer)."""
        now = datetime.now(UTC)
        await validate_new_task(spec, usage, self.service.rules, now=now, body_size=body_size,
                                caller=who.tenant_id)
        await self.service.calendars.check_refs(who.tenant_id, spec)
        await self.service.calendars.check_runs(who.tenant_id, spec, now)
        fires = await self._charged(who.tenant_id, upcoming_of_new, spec, now, limit)
        calendars = await self._calendars(who.tenant_id, spec, fires)
        if calendars is not None:
            position = policy.Position(spec=spec, task_id="", anchor=now, next_fire_at=None,
                                       calendar=calendars)
            fires = await self._charged(who.tenant_id, lambda: _shown_shifted(
                upcoming_of_new(spec, now, limit, skip=by_calendar(position)), position))
        return await self._out(who.tenant_id, spec, fires, besides=None)

    async def of_change(
        self, who: Principal, task_id: str, changes: TaskChanges, *, limit: int, body_size: int,
    ) -> PreviewOut:
        """The upcoming fires of a saved task before and after ``changes`` (4xx as update)."""
        # The service's own reads and refusals: a change is previewed on update's terms.
        row = await self.service._row(who, task_id)
        self.service._refuse_final(row)
        spec = _stored_spec(row)
        try:
            new_spec = changes.apply_to(spec)
        except ValidationError as exc:  # as update answers it
            if any(error["loc"] for error in exc.errors()):
                raise InvalidTask(_first_error(exc)) from exc
            raise TaskConflict(f"the change does not fit task {task_id}: {_first_error(exc)}") from exc
        quota = await in_thread(quota_for, self.service.engine, row.tenant_id,
                                self.service.quota_defaults)
        now = datetime.now(UTC)
        await validate_new_task(new_spec, TenantUsage(quota), self.service.rules, now=now,
                                body_size=body_size, before=spec, caller=who.tenant_id)
        await self.service.calendars.check_refs(row.tenant_id, new_spec, before=spec)
        # The caller's budget pays (an admin key's look at another tenant's task is its own).
        tenant = who.tenant_id
        self.service.fire_math.refuse_if_spent(tenant)  # before asking the workflow
        state = await self.service.temporal.state(task_id)
        before = await self._charged(tenant, self._fires, state, limit)
        # The change as the workflow makes it: the policy engine's re-plan of the schedule.
        change = await self._charged(tenant, policy.change_schedule, state.position(),
                                     policy.Flight(), new_spec, now)
        if policy.leaves_nothing(change, policy.Flight(total=len(state.running))):
            name, message = policy.why_no_run(new_spec, state.executed)  # as the update answers
            raise InvalidTask(message, field=name)
        if judged_again(spec, new_spec):
            await self.service.calendars.check_change(row.tenant_id, changes, state, now,
                                                      payer=tenant)
        def after_change(skip: SkipRule | None = None) -> list[PreviewFire]:
            return self._after_change(state, new_spec, change, limit, skip)

        after = await self._charged(tenant, after_change)
        calendars = await self._calendars(row.tenant_id, new_spec, after)
        if calendars is not None:
            position = policy.Position(spec=new_spec, task_id=task_id, anchor=change.anchor,
                                       next_fire_at=None, calendar=calendars)
            after = await self._charged(tenant, lambda: _shown_shifted(
                after_change(by_calendar(position)), position))
        before = await self._with_calendars(tenant, state, before, limit)
        out = await self._out(row.tenant_id, new_spec, after, besides=task_id)
        out.before = await self._out(row.tenant_id, spec, before, besides=task_id)
        return out

    async def of_task(self, who: Principal, task_id: str, *, limit: int) -> PreviewOut:
        """A saved task's upcoming fires, from where its workflow stands."""
        row = await self.service._row(who, task_id)
        spec = _stored_spec(row)
        if TaskStatus(row.status) in FINAL_STATUSES:
            return PreviewOut(description=describe(spec), fires=[],
                              warnings=[f"the task has ended ({row.status}): it fires no more"])
        state = await self.service.temporal.state(task_id)
        # The caller's budget pays (an admin key's look at another tenant's task is its own).
        payer = who.tenant_id
        fires = await self._with_calendars(
            payer, state, await self._charged(payer, self._fires, state, limit), limit)
        out = await self._out(row.tenant_id, state.spec, fires, besides=task_id)
        if state.paused:
            out.warnings.append("the task is paused: fires that fall before it is resumed do not run")
            out.on_resume = await self._charged(payer, on_resume_now, state)
        return out

    async def _calendars(self, tenant_id: str, spec: TaskSpec,
                         fires: list[PreviewFire]) -> CalendarPlan | None:
        return await calendar_plan(self.service.engine, tenant_id, spec,
                                   [fire.scheduled_at for fire in fires])

    async def _with_calendars(self, payer: str, state: TaskState, fires: list[PreviewFire],
                              limit: int) -> list[PreviewFire]:
        """A saved task's fires with what its calendars make of them (``payer``'s budget)."""
        calendars = await self._calendars(state.tenant_id, state.spec, fires)
        if calendars is None:
            return fires
        position = replace(state.position(), calendar=calendars)
        return await self._charged(payer, lambda: _shown_shifted(
            self._fires(state, limit, skip=by_calendar(position)), position))

    @staticmethod
    def _fires(state: TaskState, limit: int, skip: SkipRule | None = None) -> list[PreviewFire]:
        first = _sent_ahead(state) or state.next_fire_at
        return upcoming(state.spec, task_id=state.task_id, first=first, anchor=state.anchor,
                        limit=limit, runs_left=_left(state, state.spec, first), skip=skip)

    @staticmethod
    def _after_change(state: TaskState, new_spec: TaskSpec, change: policy.Change, limit: int,
                      skip: SkipRule | None = None) -> list[PreviewFire]:
        """The fires after a change, as the workflow makes it: a run sent ahead that a change
        of bounds only withdraws gives its fire back, and it runs if the new bounds hold it."""
        first = change.next_fire_at
        ahead = None if change.retimed else _sent_ahead(state)
        if ahead is not None and (new_spec.end_date is None or ahead <= new_spec.end_date):
            first = ahead
        return upcoming(new_spec, task_id=state.task_id, first=first, anchor=change.anchor,
                        limit=limit, runs_left=_left(state, new_spec, first), skip=skip)

    async def _out(self, tenant_id: str, spec: TaskSpec, fires: list[PreviewFire], *,
                   besides: str | None) -> PreviewOut:
        warnings = schedule_warnings(spec, fires)
        instants = [fire.instant or fire.scheduled_at for fire in fires if fire.skipped is None]
        others = await in_thread(tasks_running_next_at, self.service.engine, tenant_id, instants,
                                 besides=besides)
        herd = herd_warning(others, spec)
        if herd is not None:
            warnings.append(herd)
        return PreviewOut(description=describe(spec), fires=fires, warnings=warnings)


def _stored_spec(row: Task) -> TaskSpec:
    """The task's spec as its row holds it (409 if this release refuses what an older one
    stored: a preview of it is no answer, not a server error)."""
    try:
        return TaskSpec.model_validate(row.spec)
    except ValidationError as exc:
        raise TaskConflict(f"task {row.id}'s stored spec is not valid in this release: "
                           f"{_first_error(exc)}") from exc


def _sent_ahead(state: TaskState) -> datetime | None:
    """The fire of a run sent ahead that waits on its worker for its instant: it has left
    next_fire_at but is still to come (only the newest fire taken is ever sent ahead)."""
    taken = state.latest_taken
    return taken if taken is not None and state.position().instant(taken) in state.waiting else None


def _left(state: TaskState, spec: TaskSpec, first: datetime | None) -> int | None:
    """The scheduled runs max_runs leaves to list from ``first``: a run sent ahead is in flight
    and listed too."""
    left = state.runs_left(spec)
    return left + 1 if left is not None and first is not None and first == _sent_ahead(state) else left


def on_resume_now(state: TaskState, now: datetime | None = None) -> ResumePreview:
    """What a resume at ``now`` (default: now) would decide for each choice, as the workflow
    decides it."""
    now = now or datetime.now(UTC)
    flight = state.in_flight  # as the workflow last counted its runs in flight
    position = state.position()
    return ResumePreview(as_of=now, skip=decide_resume(position, flight, ResumeMissed.SKIP, now),
                         policy=decide_resume(position, flight, ResumeMissed.POLICY, now))


def _shown_shifted(fires: list[PreviewFire], position: policy.Position) -> list[PreviewFire]:
    """A fire a calendar moves runs on its new day: its instant and a note say so."""
    for fire in fires:
        verdict = position.verdict(fire.scheduled_at)
        if verdict.shifted_to is None:
            continue
        if fire.instant is not None:
            fire.instant = position.instant(fire.scheduled_at)
        moved = (f"on an excluded date of calendar {verdict.calendar_id}: runs at "
                 f"{verdict.shifted_to.astimezone(position.spec.zone()).isoformat()}")
        fire.note = f"{fire.note}; {moved}" if fire.note else moved
    return fires
