"""Each fire's decision is a span of the task's trace, with its reason and the rule that made it;
a run's decision is the parent of its job's spans; a replayed history adds no span twice."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]


def probe(dev_env: WorkflowEnvironment, scenario: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The spans of the task's trace (its decisions first) and its runs."""
    address = dev_env.client.service_client.config.target_host
    result = subprocess.run(
        [sys.executable, "-m", "tests.config.decision_probe", address, scenario],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    spans = report["spans"]
    request = next(s for s in spans if s["name"].startswith("POST /task/create") and s["parent"] is None)
    in_trace = [s for s in spans if s["trace_id"] == request["trace_id"]]
    counted = Counter((s["name"], s["attributes"].get("scheduler.execution_id")) for s in in_trace
                      if s["name"].startswith("FireDecision:"))
    # Each decision once: the worker replayed the history at every workflow task, and a replay
    # records none again.
    assert counted and all(n == 1 for n in counted.values()), counted
    return in_trace, report["executions"]


def decisions_of(spans: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    """The decision spans of one run, in the order they were made."""
    return [s for s in spans if s["name"].startswith("FireDecision:")
            and s["attributes"].get("scheduler.execution_id") == row["id"]]


def assert_parent_of_job(spans: list[dict[str, Any]], decision: dict[str, Any]) -> None:
    """The job's spans hang under the decision: StartActivity, then RunActivity."""
    starts = [s for s in spans if s["parent"] == decision["span_id"]]
    assert [s["name"] for s in starts] == ["StartActivity:run_job"], starts
    assert any(s["name"] == "RunActivity:run_job" and s["parent"] == starts[0]["span_id"] for s in spans)


def test_runs_and_overlap_skips_are_spans_and_a_run_decision_parents_its_job(
    dev_env: WorkflowEnvironment,
) -> None:
    spans, rows = probe(dev_env, "overlapping")
    ran = [r for r in rows if r["status"] == "COMPLETED"]
    skipped = [r for r in rows if r["status"] == "SKIPPED" and r["reason"] == "overlap"]
    assert ran and skipped, rows
    for row in ran:
        [decision] = decisions_of(spans, row)
        assert decision["name"] == "FireDecision:run"
        assert decision["attributes"]["scheduler.rule"] == "the schedule"
        assert_parent_of_job(spans, decision)
    for row in skipped:
        [decision] = decisions_of(spans, row)
        assert decision["name"] == "FireDecision:skip"
        assert decision["attributes"]["scheduler.reason"] == "overlap"
        assert decision["attributes"]["scheduler.rule"] == "overlap_policy=skip"


def test_a_run_withdrawn_by_a_pause_shows_the_withdrawal_then_the_skip(
    dev_env: WorkflowEnvironment,
) -> None:
    spans, rows = probe(dev_env, "paused")
    [row] = rows
    assert (row["status"], row["reason"]) == ("SKIPPED", "paused"), rows
    sent, withdrawn, skipped = decisions_of(spans, row)
    assert sent["name"] == "FireDecision:run"  # sent ahead of its instant
    assert_parent_of_job(spans, sent)
    assert withdrawn["name"] == "FireDecision:withdraw"
    assert withdrawn["attributes"]["scheduler.reason"] == "paused"
    assert skipped["name"] == "FireDecision:skip"
    assert skipped["attributes"]["scheduler.rule"] == "the task was paused"


def test_fires_missed_while_no_worker_ran_are_caught_up_by_the_missed_run_policy(
    dev_env: WorkflowEnvironment,
) -> None:
    spans, rows = probe(dev_env, "caught_up")
    caught_up = [r for r in rows if r["trigger"] == "catchup" and r["status"] == "COMPLETED"]
    assert len(caught_up) >= 2, rows
    for row in caught_up:
        [decision] = decisions_of(spans, row)
        assert decision["name"] == "FireDecision:catchup"
        assert decision["attributes"]["scheduler.rule"] == "missed_run_policy=catchup"
        assert_parent_of_job(spans, decision)
