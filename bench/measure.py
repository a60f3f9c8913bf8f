"""Statistics, tables, target verdicts, the JSON results and the lateness plot."""

from __future__ import annotations

import json
import math
import platform
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of a sample (same unit as the sample)."""
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
    }


def fmt(value: Any, unit: str = "") -> str:
    """A number for a table: NaN shows as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        return text + unit
    return f"{value}{unit}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (it also reads well in a terminal)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


@dataclass
class Target:
    """One performance target: measured value, its bound, and PASS/FAIL."""

    name: str
    measured: float
    bound: float
    unit: str = ""
    ratio: float | None = None
    basis: str = ""
    higher_is_better: bool = False

    @property
    def passed(self) -> bool:
        """PASS when the measured value is within the bound; a missing value fails."""
        if math.isnan(self.measured) or math.isnan(self.bound):
            return False
        return self.measured >= self.bound if self.higher_is_better else self.measured <= self.bound

    def row(self) -> list[str]:
        """The table row."""
        op = "≥" if self.higher_is_better else "≤"
        ratio = f"{self.ratio:.3g}× {self.basis}" if self.ratio is not None and not math.isnan(self.ratio) else "-"
        return [self.name, fmt(self.measured, self.unit), f"{op} {fmt(self.bound, self.unit)}", ratio,
                "PASS" if self.passed else "FAIL"]


def targets_table(targets: Sequence[Target]) -> str:
    """The verdict table."""
    return table(["target", "measured", "bound", "ratio to baseline", "verdict"], [t.row() for t in targets])


def ratio(a: float, b: float) -> float:
    """a / b, NaN when undefined."""
    if b == 0 or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


@dataclass
class Report:
    """What one workload hands back: printed text, JSON data, and lateness samples to plot."""

    workload: str
    text: str
    data: dict[str, Any]
    samples: dict[str, list[float]] = field(default_factory=dict)


def machine() -> dict[str, Any]:
    """Machine, date and commit for the record."""
    import os

    import psutil  # type: ignore[import-untyped, unused-ignore]

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
            cwd=Path(__file__).parent.parent,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": commit,
        "nproc": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_results(reports: Sequence[Report], args: dict[str, Any], stamp: str, started: dict[str, Any]) -> Path:
    """JSON of every figure, under bench/results/; `started` is the machine record taken at the start
    (the commit can move while a long run goes on: both ends are kept)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-{stamp}.json"
    body = {
        "machine": started | {"commit_at_end": machine()["commit"]},
        "args": args,
        "workloads": {r.workload: r.data for r in reports},
    }
    path.write_text(json.dumps(body, indent=2, default=str))
    (RESULTS / "latest.json").write_text(path.read_text())
    return path


def plot(reports: Sequence[Report], stamp: str) -> Path | None:
    """Lateness distributions (ECDF, log x) for every workload that has samples."""
    with_samples = [r for r in reports if r.samples]
    if not with_samples:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(with_samples), figsize=(6.5 * len(with_samples), 4.5), squeeze=False)
    for ax, report in zip(axes[0], with_samples, strict=True):
        for label, values in report.samples.items():
            if not values:
                continue
            ordered = sorted(max(v, 1e-4) for v in values)
            ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
            ax.step(ordered, ys, where="post", label=f"{label} (n={len(ordered)})")
        ax.set_xscale("log")
        ax.set_xlabel("lateness, seconds (log; values ≤ 0.1 ms drawn at 0.1 ms)")
        ax.set_ylabel("fraction of runs started")
        ax.set_title(f"{report.workload}: lateness (start − scheduled)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"lateness-{stamp}.png"
    fig.savefig(path, dpi=110)
    fig.savefig(RESULTS / "lateness-latest.png", dpi=110)
    plt.close(fig)
    return path
