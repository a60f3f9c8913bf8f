"""The missed-run rules a series applies to fires it reaches long after their instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from activities.contracts import SeriesFire, SeriesInput
from activities.series import sort_overdue

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _fires(*ages: float) -> list[SeriesFire]:
    return [
        SeriesFire(execution_id=f"t:{age}", scheduled_at=NOW - timedelta(seconds=age),
                   not_before=NOW - timedelta(seconds=age))
        for age in ages
    ]


def _series(policy: str, **extra: object) -> SeriesInput:
    return SeriesInput.model_validate({
        "task_id": "t", "tenant_id": "x", "job": {"type": "handler", "name": "noop"},
        "fires": [], "missed_run_policy": policy, **extra,
    })


def _ids(fires: list[SeriesFire]) -> list[str]:
    return [f.execution_id for f in fires]


def test_nothing_overdue_runs_as_planned() -> None:
    fires = _fires(30, 0, -5)
    assert sort_overdue(fires, NOW, _series("skip")) == (fires, [])


def test_skip_records_every_overdue_fire_missed() -> None:
    run, skipped = sort_overdue(_fires(120, 90, 10, -5), NOW, _series("skip"))
    assert _ids(run) == ["t:10", "t:-5"]
    assert [(f.execution_id, r) for f, r in skipped] == [("t:120", "missed"), ("t:90", "missed")]


def test_single_catchup_runs_the_newest_overdue_only_when_none_is_on_time() -> None:
    run, skipped = sort_overdue(_fires(120, 90), NOW, _series("single_catchup"))
    assert _ids(run) == ["t:90"] and [f.execution_id for f, _ in skipped] == ["t:120"]
    run, skipped = sort_overdue(_fires(120, 90, 5), NOW, _series("single_catchup"))
    assert _ids(run) == ["t:5"] and len(skipped) == 2


def test_catchup_runs_them_all_within_its_cap_and_window() -> None:
    run, skipped = sort_overdue(_fires(300, 120, 90, 5), NOW, _series("catchup", max_catchup_runs=2))
    assert _ids(run) == ["t:120", "t:90", "t:5"] and [r for _, r in skipped] == ["missed"]
    run, skipped = sort_overdue(
        _fires(300, 120, 90), NOW, _series("catchup", catchup_window_seconds=100)
    )
    assert _ids(run) == ["t:90"]
    assert sorted(r for _, r in skipped) == ["outside_window", "outside_window"]
