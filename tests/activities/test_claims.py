"""A late attempt's claim: how long it waits for its workflow's answer, and which answers let
it start (activities/starts.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities.payloads import JobInput
from activities.starts import CLAIM_MARGIN, CLAIM_TIMEOUT, claim_patience, granted
from scheduling.policy import CLAIM_AFTER
from scheduling.spec import HandlerJob

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _run(**fields: object) -> JobInput:
    return JobInput.model_validate({
        "execution_id": "t:1", "task_id": "t", "tenant_id": "x", "scheduled_at": NOW,
        "job": HandlerJob(type="handler", name="noop"), "run_timeout_seconds": 30,
        "late_after_seconds": 60, **fields,
    })


def _attempt(started: datetime, start_to_close: timedelta | None) -> activity.Info:
    return dataclasses.replace(ActivityEnvironment.default_info(), started_time=started,
                               start_to_close_timeout=start_to_close)


def test_a_claim_waits_while_a_grant_leaves_the_job_its_run_timeout() -> None:
    # Taken 5 s late; the attempt has 30 s of run timeout + 10 s of lead + 15 s of slack.
    info = _attempt(NOW + timedelta(seconds=5), timedelta(seconds=55))
    patience = claim_patience(_run(not_before=NOW), info, NOW + timedelta(seconds=6))
    assert patience == timedelta(seconds=55 - 30 - 1) - CLAIM_MARGIN


def test_a_claim_waits_no_longer_than_the_runs_grace() -> None:
    info = _attempt(NOW + timedelta(seconds=50), timedelta(hours=1))
    patience = claim_patience(_run(not_before=NOW), info, NOW + timedelta(seconds=50))
    assert patience == timedelta(seconds=10)


def test_a_claim_waits_at_least_as_long_as_it_always_did() -> None:
    info = _attempt(NOW, timedelta(seconds=31))
    patience = claim_patience(_run(not_before=NOW), info, NOW + timedelta(seconds=5))
    assert patience == CLAIM_TIMEOUT


def test_a_grant_starts_the_run_while_it_is_fresh() -> None:
    asked = NOW
    granted_at = NOW + timedelta(seconds=20)  # the workflow took 20 s to answer
    assert granted(granted_at, asked, granted_at + timedelta(seconds=1))
    assert granted(granted_at.isoformat(), asked, granted_at + CLAIM_AFTER)
    # Acted on later than an unasked start may be: the run may be found untaken first.
    assert not granted(granted_at, asked, granted_at + CLAIM_AFTER + timedelta(seconds=1))


def test_a_refusal_no_answer_or_a_garbled_one_starts_nothing() -> None:
    assert not granted(False, NOW, NOW)
    assert not granted(None, NOW, NOW)
    assert not granted("soon", NOW, NOW)
    assert not granted(NOW.replace(tzinfo=None).isoformat(), NOW, NOW)


def test_a_bare_yes_of_older_workflow_code_counts_only_soon_after_the_ask() -> None:
    assert granted(True, NOW, NOW + CLAIM_TIMEOUT)
    assert not granted(True, NOW, NOW + CLAIM_TIMEOUT + timedelta(milliseconds=1))
