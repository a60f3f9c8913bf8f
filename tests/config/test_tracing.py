"""One trace from the API request through the workflow and the activity to the HTTP call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]


def test_one_trace_spans_api_workflow_activity_and_http_call(dev_env: WorkflowEnvironment) -> None:
    address = dev_env.client.service_client.config.target_host
    result = subprocess.run(
        [sys.executable, "-m", "tests.config.trace_probe", address],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    spans = report["spans"]
    names = {s["name"] for s in spans}
    request = next(s for s in spans if s["name"].startswith("POST /task/create") and s["parent"] is None)
    trace_id = request["trace_id"]
    in_trace = {s["name"] for s in spans if s["trace_id"] == trace_id}
    for expected in ("StartWorkflow:TaskWorkflow", "RunWorkflow:TaskWorkflow",
                     "StartActivity:run_job", "RunActivity:run_job", "HTTP POST"):
        assert expected in in_trace, (expected, sorted(names))
    # the job's HTTP span says what it called (the URL without its path) and for which run
    call = next(s for s in spans if s["name"] == "HTTP POST" and s["trace_id"] == trace_id)
    assert call["attributes"]["url.full"].endswith("/…"), call
    assert call["attributes"]["http.request.method"] == "POST"
    assert call["attributes"]["http.response.status_code"] == 200
    assert call["attributes"]["task_scheduler.execution_id"].startswith(f"{report['task_id']}:"), call
    # the target saw the same trace in its traceparent header
    assert report["traceparent"] and report["traceparent"].split("-")[1] == trace_id
