"""The lateness chart's geometry: one bar per started run, oldest left, zero on the axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.routes.ui import lateness_chart
from api.schemas import ExecutionOut

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(second: int, late_ms: float | None, status: str = "COMPLETED", *,
        jitter_ms: float | None = None) -> ExecutionOut:
    scheduled = T0 + timedelta(seconds=second)
    instant = None if jitter_ms is None else scheduled + timedelta(milliseconds=jitter_ms)
    started = None if late_ms is None else (instant or scheduled) + timedelta(milliseconds=late_ms)
    return ExecutionOut(
        id=f"t:{second}", task_id="t", scheduled_at=scheduled, instant=instant, trigger="schedule",
        status=status, reason=None, attempts=1, started_at=started, finished_at=started,
        http_status=None, response_snippet=None, error=None,
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


def test_chart_axis_labels_at_sub_millisecond_scale() -> None:
    chart = lateness_chart([run(0, 0.1), run(1, 0.2), run(2, 0.35)])
    assert chart is not None
    assert [label for _, label in chart.ticks] == ["500 µs", "250 µs", "0 ms"]
    assert chart.summary == "3 runs · median 200 µs · p95 335 µs · max 350 µs"
    assert [b.label.split(": ")[1] for b in chart.bars] == [
        f"started {n} µs late (COMPLETED, schedule)" for n in (100, 200, 350)]
    few = lateness_chart([run(0, 1.5), run(1, 4.2)])
    assert few is not None
    assert [label for _, label in few.ticks] == ["5 ms", "2.5 ms", "0 ms"]


def test_chart_measures_lateness_from_the_jittered_instant() -> None:
    # Started 0.3 ms after instants 776 ms and 412 ms past the scheduled times: not late.
    chart = lateness_chart([run(0, 0.3, jitter_ms=776), run(1, 0.3, jitter_ms=412)])
    assert chart is not None
    assert chart.summary == "2 runs · median 300 µs · p95 300 µs · max 300 µs"
    assert [label for _, label in chart.ticks] == ["500 µs", "250 µs", "0 ms"]
    jittered = run(0, 0.3, jitter_ms=776)
    assert jittered.jitter_ms == 776 and jittered.model_dump(mode="json")["jitter_ms"] == 776
