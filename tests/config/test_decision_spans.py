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


def probe(dev_env: WorkflowEnvironment) -> dict[str, Any]:
    address = dev_env.client.service_client.config.target_host
    result = subprocess.run(
        [sys.executable, "-m", "tests.config.decision_probe", address],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_every_decision_is_a_span_and_a_run_decision_parents_its_job(dev_env: WorkflowEnvironment) -> None:
    report = probe(dev_env)
    spans, rows = report["spans"], report["executions"]
    request = next(s for s in spans if s["name"].startswith("POST /task/create") and s["parent"] is None)
    in_trace = [s for s in spans if s["trace_id"] == request["trace_id"]]
    decisions = [s for s in in_trace if s["name"].startswith("FireDecision:")]

    # Every recorded run and skip has its decision, once (the worker replayed the history at
    # every workflow task: a replay records none again).
    def decision_of(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for s in decisions if s["attributes"].get("scheduler.execution_id") == row["id"]]

    ran = [r for r in rows if r["status"] == "COMPLETED"]
    skipped = [r for r in rows if r["status"] == "SKIPPED" and r["reason"] == "overlap"]
    assert ran and skipped, rows
    for row in ran:
        [decision] = [s for s in decision_of(row) if s["name"] == "FireDecision:run"]
        assert decision["attributes"]["scheduler.rule"] == "the schedule"
        # The job's spans hang under the decision: StartActivity, then RunActivity, then HTTP.
        starts = [s for s in in_trace if s["parent"] == decision["span_id"]]
        assert [s["name"] for s in starts] == ["StartActivity:run_job"], starts
        assert any(s["name"] == "RunActivity:run_job" and s["parent"] == starts[0]["span_id"]
                   for s in in_trace)
    for row in skipped:
        [decision] = decision_of(row)
        assert decision["name"] == "FireDecision:skip"
        assert decision["attributes"]["scheduler.reason"] == "overlap"
        assert decision["attributes"]["scheduler.rule"] == "overlap_policy=skip"
    counted = Counter((s["name"], s["attributes"]["scheduler.scheduled_at"],
                       s["attributes"].get("scheduler.execution_id")) for s in decisions)
    assert all(n == 1 for n in counted.values()), counted
