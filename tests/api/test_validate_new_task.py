"""validate_new_task on its own: the rules a create, an update and a dry run share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.handlers import args_check, load_handlers
from api.errors import ApiError, InvalidTask, PayloadTooLarge, QuotaExceeded
from api.validation import TaskRules, TenantUsage, validate_new_task
from outbound.egress import EgressPolicy, static_resolver
from scheduling.spec import TaskSpec
from store.quotas import Quota

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
RULES = TaskRules(frozenset({"noop"}), EgressPolicy(resolver=static_resolver({})))
EVERY_MINUTE: dict[str, Any] = {
    "task_name": "t", "job_details": {"type": "handler", "name": "noop"},
    "schedule_type": "interval", "interval_seconds": 60,
}


def spec(**changes: Any) -> TaskSpec:
    return TaskSpec.model_validate({**EVERY_MINUTE, **changes})


async def refusal(candidate: TaskSpec, usage: TenantUsage, **options: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await validate_new_task(candidate, usage, RULES, now=NOW, **options)
    return caught.value


async def test_a_new_task_counts_against_the_active_tasks_and_a_change_does_not() -> None:
    full = Quota(max_active_tasks=3)
    await validate_new_task(spec(), TenantUsage(full, active=2), RULES, now=NOW)
    refused = await refusal(spec(), TenantUsage(full, active=3))
    assert isinstance(refused, QuotaExceeded) and "max_active_tasks=3" in refused.detail
    await validate_new_task(spec(task_name="renamed"), TenantUsage(full), RULES, now=NOW, before=spec())


async def test_a_change_is_held_to_the_limits_of_what_it_changes() -> None:
    tightened = TenantUsage(Quota(min_interval_seconds=300))
    old = spec()
    await validate_new_task(spec(task_name="renamed"), tightened, RULES, now=NOW, before=old)
    refused = await refusal(spec(interval_seconds=120), tightened, before=old)
    assert isinstance(refused, InvalidTask) and refused.field == "interval_seconds"
    assert "min_interval_seconds=300" in refused.detail


async def test_the_first_rule_broken_answers_whatever_the_path() -> None:
    past = spec(end_date=(NOW - timedelta(days=1)).isoformat())
    small = TenantUsage(Quota(max_body_bytes=10), active=0)
    for before in (None, spec()):
        refused = await refusal(past, small, body_size=11, before=before)
        assert isinstance(refused, InvalidTask) and refused.field == "end_date"
    assert isinstance(await refusal(spec(), small, body_size=11), PayloadTooLarge)


async def test_the_recurring_endpoint_refuses_a_one_time_task() -> None:
    once = spec(schedule_type="once", interval_seconds=None, run_at=(NOW + timedelta(hours=1)).isoformat())
    await validate_new_task(once, TenantUsage(Quota(), active=0), RULES, now=NOW)
    refused = await refusal(once, TenantUsage(Quota(), active=0), recurring_only=True)
    assert refused.field == "schedule_type"


async def test_jobs_may_reach_only_what_the_deployment_has() -> None:
    usage = TenantUsage(Quota(), active=0)
    unknown = await refusal(spec(job_details={"type": "handler", "name": "rm"}), usage)
    assert unknown.field == "job_details.name" and "known: noop" in unknown.detail
    private = await refusal(spec(job_details={"type": "http", "url": "http://10.0.0.1/"}), usage)
    assert private.field == "job_details.url"
    workflow = {"type": "workflow", "workflow_type": "Echo", "task_queue": "q"}
    assert (await refusal(spec(job_details=workflow), usage)).field == "job_details.type"


async def test_a_change_judges_the_timing_only_when_it_changes_it() -> None:
    # A once task whose run is going five minutes past its run_at can still be renamed; a change
    # that moves run_at into the past, or before start_date, is refused.
    once = spec(schedule_type="once", interval_seconds=None, run_at=NOW - timedelta(minutes=5))
    usage = TenantUsage(Quota())
    await validate_new_task(spec(schedule_type="once", interval_seconds=None, task_name="renamed",
                                 run_at=NOW - timedelta(minutes=5)), usage, RULES, now=NOW, before=once)
    moved = spec(schedule_type="once", interval_seconds=None, run_at=NOW - timedelta(minutes=4))
    refused = await refusal(moved, usage, before=once)
    assert isinstance(refused, InvalidTask) and refused.field == "run_at"
    # A retime starts the schedule over from now: its past run_at would run again.
    rezoned = spec(schedule_type="once", interval_seconds=None, run_at=NOW - timedelta(minutes=5),
                   timezone="Europe/Paris")
    refused = await refusal(rezoned, usage, before=once)
    assert isinstance(refused, InvalidTask) and refused.field == "run_at"
    early = spec(schedule_type="once", interval_seconds=None, run_at=NOW + timedelta(hours=1),
                 start_date=NOW + timedelta(hours=2))
    refused = await refusal(early, usage, before=once)
    assert isinstance(refused, InvalidTask) and refused.field == "run_at"
    assert "before start_date" in refused.detail


async def test_a_change_of_what_sets_the_runs_gaps_is_held_to_the_minimum_interval() -> None:
    # Either change slipped past the limit: only the schedule type, cron, zone and interval
    # were compared.
    limited = TenantUsage(Quota(min_interval_seconds=7200))
    days = [NOW + timedelta(days=n) for n in (1, 2, 3)]
    old = spec(schedule_type="dates", interval_seconds=None, dates=days)
    closer = spec(schedule_type="dates", interval_seconds=None,
                  dates=[days[0], days[0] + timedelta(seconds=60), days[2]])
    refused = await refusal(closer, limited, before=old)
    assert refused.field == "dates" and "60s apart" in refused.detail
    # 01:30 on the first Sunday of November happens twice in New York: "both" runs an hour apart.
    daily = spec(schedule_type="cron", interval_seconds=None, cron="30 1 1-7 11 *",
                 timezone="America/New_York")
    await validate_new_task(daily, limited, RULES, now=NOW)
    both = spec(schedule_type="cron", interval_seconds=None, cron="30 1 1-7 11 *",
                timezone="America/New_York", dst_policy={"repeated": "both"})
    refused = await refusal(both, limited, before=daily)
    assert refused.field == "cron" and "3600s apart" in refused.detail


async def test_a_window_widened_past_its_runs_is_held_to_the_minimum_interval() -> None:
    # A window that held one run of a 5-minute cron had no gap to judge; opening it up kept
    # the pace, so it was not checked again and the task ran every 5 minutes.
    limited = TenantUsage(Quota(min_interval_seconds=600))
    cron: dict[str, Any] = {"schedule_type": "cron", "interval_seconds": None, "cron": "*/5 * * * *"}
    one_run = spec(**cron, end_date=NOW + timedelta(minutes=7))
    await validate_new_task(one_run, limited, RULES, now=NOW)
    for wider in (spec(**cron), spec(**cron, end_date=NOW + timedelta(days=1))):
        refused = await refusal(wider, limited, before=one_run)
        assert refused.field == "cron" and "300s apart" in refused.detail
    later = spec(**cron, start_date=NOW + timedelta(days=1, minutes=1),
                 end_date=NOW + timedelta(days=1, minutes=7))
    await validate_new_task(later, limited, RULES, now=NOW)
    refused = await refusal(spec(**cron, end_date=NOW + timedelta(days=1, minutes=7)), limited,
                            before=later)
    assert refused.field == "cron"
    # Narrowing the window, or keeping it, is not judged again (a quota lowered since stays out).
    hourly = spec(**{**cron, "cron": "0 * * * *"}, end_date=NOW + timedelta(days=2))
    await validate_new_task(spec(**{**cron, "cron": "0 * * * *"}, end_date=NOW + timedelta(days=1)),
                            TenantUsage(Quota(min_interval_seconds=7200)), RULES, now=NOW,
                            before=hourly)


async def test_a_handlers_arguments_are_judged_when_they_are_given_not_at_every_change() -> None:
    rules = TaskRules(frozenset({"sleep"}), EgressPolicy(resolver=static_resolver({})),
                      handler_args={"sleep": args_check(load_handlers()["sleep"])})  # type: ignore[dict-item]
    odd = spec(job_details={"type": "handler", "name": "sleep", "args": {"seconds": "soon"}})
    with pytest.raises(InvalidTask) as refused:
        await validate_new_task(odd, TenantUsage(Quota()), rules, now=NOW)
    assert refused.value.field == "job_details.args"
    # A task accepted before the check came: a rename keeps its arguments as they were.
    await validate_new_task(odd.model_copy(update={"task_name": "renamed"}), TenantUsage(Quota()),
                            rules, now=NOW, before=odd)
    with pytest.raises(InvalidTask):  # but arguments given again are judged
        await validate_new_task(odd, TenantUsage(Quota()), rules, now=NOW,
                                before=spec(job_details={"type": "handler", "name": "sleep"}))
