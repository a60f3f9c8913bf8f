"""The lateness chart's geometry: one bar per started run, oldest left, zero on the axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.routes.ui import lateness_chart
from api.schemas import ExecutionOut

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(second: int, late_ms: float | None, status: str = "COMPLETED") -> ExecutionOut:
    scheduled = T0 + timedelta(seconds=second)
    started = None if late_ms is None else scheduled + timedelta(milliseconds=late_ms)
    return ExecutionOut(
        id=f"t:{second}", task_id="t", scheduled_at=scheduled, trigger="schedule", status=status,
        reason=None, attempts=1, started_at=started, finished_at=started, http_status=None,
        response_snippet=None, error=None,
    )


def test_no_started_run_means_no_chart() -> None:
    assert lateness_chart([]) is None
    assert lateness_chart([run(0, None, "SKIPPED")]) is None


def test_bars_are_oldest_first_and_as_tall_as_the_lateness() -> None:
    chart = lateness_chart([run(3, 150), run(1, 40, "FAILED"), run(2, None, "SKIPPED"), run(0, 80)])
    assert chart is not None
    assert [b.status for b in chart.bars] == ["COMPLETED", "FAILED", "COMPLETED"]
    assert [b.x for b in chart.bars] == sorted(b.x for b in chart.bars)
    assert [label for _, label in chart.ticks] == ["200 ms", "100 ms", "0 ms"]
    zero = chart.ticks[-1][0]
    heights = [b.height for b in chart.bars]
    assert heights[0] / heights[2] == 80 / 150
    assert all(abs(b.y + b.height - zero) < 1e-9 for b in chart.bars)  # all stand on zero
    assert chart.summary == "3 runs · median 80 ms · p95 143 ms · max 150 ms"


def test_early_starts_hang_below_zero_and_long_delays_read_in_seconds() -> None:
    chart = lateness_chart([run(0, -30), run(1, 12_500)])
    assert chart is not None
    labels = [label for _, label in chart.ticks]
    assert labels[0] == "20 s" and labels[-1] == "-50 ms" and "0 ms" in labels
    early, late = chart.bars
    zero = {label: y for y, label in chart.ticks}["0 ms"]
    assert abs(early.y - zero) < 1e-9 and late.y + late.height == zero
