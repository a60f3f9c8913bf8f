"""Which withdrawal a run too near its instant to withdraw belongs to, when several come: the
bookkeeping of RunsInFlight, outside a workflow (its clock is the one workflow call it makes
here). The seams are the dev-server tests of tests/workflows/test_reported_starts.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from scheduling.policy import Run
from scheduling.status import Trigger
from workflows import inflight
from workflows.inflight import PAUSED, RESCHEDULED, RunsInFlight, _Flying

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)


class _Waiting:
    """The handle of a run waiting in its jobs worker: not done, and a cancel is noted."""

    def done(self) -> bool:
        return False

    def cancel(self) -> None:
        raise AssertionError("a spared run is not cancelled")


def _spared_by_a_pause(monkeypatch: pytest.MonkeyPatch, *, keeps: bool) -> tuple[RunsInFlight, _Flying]:
    monkeypatch.setattr(inflight, "workflow", SimpleNamespace(now=lambda: NOW))
    runs = RunsInFlight()
    runs.reported = runs.withdraws_refused = runs.untaken_spared = True
    runs.pause_keeps_spare = keeps
    flying = _Flying(run=Run(scheduled_at=NOW, trigger=Trigger.SCHEDULE, execution_id="e"),
                     run_id="e", instant=NOW + timedelta(seconds=1), beat=timedelta(seconds=2),
                     handle=_Waiting(), send=lambda *args, **kwargs: None)  # type: ignore[arg-type]
    runs._flying["e"] = flying
    runs.withdraw(PAUSED)  # a second from its instant: spared
    return runs, flying


@pytest.mark.parametrize("later", ["asked", RESCHEDULED])
def test_a_pause_keeps_its_spared_run_and_a_later_withdrawal_takes_it_at_the_resume(
    monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    runs, flying = _spared_by_a_pause(monkeypatch, keeps=True)
    runs.withdraw(later)
    assert flying.spared_for == PAUSED  # found untaken now, its fire is the pause's
    runs.unspare(PAUSED)
    # Given back after the resume, the later withdrawal still takes it: a run of the old
    # schedule is not sent again once the schedule changed.
    assert flying.spared_for == later and flying.withdrawn is None


@pytest.mark.parametrize("later", ["asked", RESCHEDULED])
def test_a_withdrawal_before_the_pause_takes_its_spared_run_back_at_the_resume(
    monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    runs, flying = _spared_by_a_pause(monkeypatch, keeps=True)
    runs.unspare(PAUSED)
    runs.withdraw(later)  # spared first by this one, then by a pause
    runs.withdraw(PAUSED)
    assert flying.spared_for == PAUSED
    runs.unspare(PAUSED)
    assert flying.spared_for == later
    runs.withdraw(PAUSED)  # and again, by a second pause
    runs.unspare(PAUSED)
    assert flying.spared_for == later


def test_before_the_release_a_later_withdrawal_took_the_spare_over(monkeypatch: pytest.MonkeyPatch) -> None:
    runs, flying = _spared_by_a_pause(monkeypatch, keeps=False)
    runs.withdraw("asked")
    assert flying.spared_for == "asked"
    runs.unspare(PAUSED)
    assert flying.spared_for == "asked"
