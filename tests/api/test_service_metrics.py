"""`GET /metrics` on the API shows the whole service: every tenant's tasks and runs, read from
the database, and the task queues, read from Temporal; the Grafana dashboard reads only it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Stack
from tests.target import TargetServer


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def scrape(base_url: str) -> dict[str, list[Any]]:
    """The samples of /metrics by sample name, read without any API key (as a scraper does)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.get("/metrics")
    assert answer.status_code == 200, answer.text
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` that carry these labels (0 when none)."""
    return sum(s.value for s in samples.get(name, [])
               if all(s.labels.get(k) == v for k, v in labels.items()))


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 45) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (found := await check()):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.3)
    return found


async def wait_status(api: httpx.AsyncClient, task_id: str, wanted: set[str]) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        task: dict[str, Any] = (await api.get(f"/tasks/{task_id}")).json()
        return task if task["status"] in wanted else None
    found: dict[str, Any] = await until(reached)
    return found


async def test_metrics_show_every_tenants_runs_skips_lateness_dead_letters_and_queues(
    stack: Stack, target: TargetServer
) -> None:
    now = datetime.now(UTC)
    async with stack.client("t1") as t1, stack.client("t2") as t2:
        done = await t1.post("/task/create", json={
            "task_name": "ok", "schedule_type": "once", "run_at": iso(now),
            "job_details": {"type": "http", "url": target.url("/ok")},
        })
        failing = await t2.post("/task/create", json={
            "task_name": "always-500", "schedule_type": "once", "run_at": iso(now),
            "job_details": {"type": "http", "url": target.url("/status/500")},
            "retry_policy": {"max_attempts": 2, "initial_interval_seconds": 0.2},
        })
        ticking = await t2.post("/task/create", json={
            "task_name": "every-second", "schedule_type": "interval", "interval_seconds": 1,
            "missed_run_policy": "skip",
            "job_details": {"type": "handler", "name": "noop"},
        })
        waiting = await t1.post("/task/create", json={
            "task_name": "tomorrow", "schedule_type": "once", "run_at": iso(now + timedelta(days=1)),
            "job_details": {"type": "handler", "name": "noop"},
        })
        for created in (done, failing, ticking, waiting):
            assert created.status_code == 201, created.text
        await wait_status(t1, done.json()["task_id"], {"COMPLETED"})
        await wait_status(t2, failing.json()["task_id"], {"FAILED"})

        # Fires that fall inside a pause are recorded SKIPPED "paused" when it is resumed.
        ticking_id = ticking.json()["task_id"]
        await until(lambda: _runs(t2, ticking_id, "COMPLETED", at_least=1))
        assert (await t2.post(f"/tasks/{ticking_id}/pause")).status_code == 202
        await asyncio.sleep(3)  # the pause must span fires: this is the scenario, not a wait
        assert (await t2.post(f"/tasks/{ticking_id}/resume")).status_code == 202
        await until(lambda: _runs(t2, ticking_id, "SKIPPED", at_least=1))
        assert (await t2.post(f"/tasks/{ticking_id}/pause")).status_code == 202
        await wait_status(t2, ticking_id, {"PAUSED"})

        ids = ((t1, done.json()["task_id"]), (t2, failing.json()["task_id"]), (t2, ticking_id))

        async def api_view() -> tuple[dict[str, int], list[dict[str, Any]], int]:
            """What the API shows: every tenant's tasks by status, the runs, the dead letters."""
            async with stack.client("admin") as admin:
                listed = (await admin.get("/tasks", params={"all_tenants": "true", "limit": 100})).json()
            by_status: dict[str, int] = {}
            for task in listed["items"]:
                by_status[task["status"]] = by_status.get(task["status"], 0) + 1
            runs: list[dict[str, Any]] = []
            for api, task_id in ids:
                runs += (await api.get(f"/tasks/{task_id}/executions", params={"limit": 100})).json()["items"]
            letters = len((await t1.get("/dead-letters")).json()["items"]) + len(
                (await t2.get("/dead-letters")).json()["items"])
            return by_status, runs, letters

        async def agrees() -> tuple[dict[str, list[Any]], dict[str, int], int] | None:
            by_status, runs, letters = await api_view()
            samples = await scrape(stack.base_url)
            wanted = {
                ("scheduler_recorded_runs_total", "outcome", "completed"): _count(runs, "COMPLETED"),
                ("scheduler_recorded_runs_total", "outcome", "failed"): _count(runs, "FAILED"),
                ("scheduler_recorded_skips_total", "reason", "paused"): _count(runs, "SKIPPED", "paused"),
                ("scheduler_run_lateness_seconds_count", "", ""):
                    sum(1 for run in runs if run["lateness_ms"] is not None),
                ("scheduler_dead_letters_open", "", ""): letters,
            }
            wanted.update({("scheduler_tasks", "status", k): v for k, v in by_status.items()})
            for (name, label, label_value), expected in wanted.items():
                labels = {label: label_value} if label else {}
                if value(samples, name, **labels) != expected:
                    return None
            return samples, by_status, letters

        # Scrapes read the tables at most every few seconds: wait for one after the last change.
        samples, by_status, letters = await until(agrees)
    assert by_status.get("PENDING", 0) >= 1 and by_status.get("FAILED") == 1  # both tenants
    assert letters == 1
    # The lateness histogram: cumulative buckets ending in +Inf == count, a sum in seconds.
    buckets = [s for s in samples["scheduler_run_lateness_seconds_bucket"]
               if s.labels["trigger"] == "schedule"]
    counts = [s.value for s in sorted(buckets, key=lambda s: float(s.labels["le"]))]
    assert counts == sorted(counts) and counts[-1] == value(
        samples, "scheduler_run_lateness_seconds_count", trigger="schedule")
    assert value(samples, "scheduler_run_lateness_seconds_sum") >= 0
    # Both task queues, as Temporal describes them, and a live worker on each.
    queues = {(s.labels["task_queue"], s.labels["type"]) for s in samples["scheduler_queue_backlog"]}
    assert queues == {(stack.task_queue, "workflow"), (stack.task_queue, "activity"),
                      (f"{stack.task_queue}-jobs", "activity")}
    assert all(s.value >= 0 for s in samples["scheduler_queue_backlog_age_seconds"])
    assert value(samples, "scheduler_live_workers", task_queue=stack.task_queue) == 1
    assert value(samples, "scheduler_live_workers", task_queue=f"{stack.task_queue}-jobs") == 1
    assert value(samples, "scheduler_metrics_source_up", source="database") == 1
    assert value(samples, "scheduler_metrics_source_up", source="temporal") == 1


def _count(runs: list[dict[str, Any]], status: str, reason: str | None = None) -> int:
    return sum(1 for run in runs if run["status"] == status and reason in (None, run["reason"]))


async def _runs(api: httpx.AsyncClient, task_id: str, status: str, *, at_least: int) -> bool:
    runs = (await api.get(f"/tasks/{task_id}/executions", params={"limit": 100})).json()["items"]
    return sum(1 for run in runs if run["status"] == status) >= at_least


DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "task-scheduler.json"
# PromQL words that are not metric names: functions, aggregations, keywords.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "rate", "irate", "increase", "delta", "idelta",
    "histogram_quantile", "sum_over_time", "avg_over_time", "max_over_time", "min_over_time",
    "abs", "clamp_min", "clamp_max", "vector", "scalar", "time", "absent", "inf", "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', "", expr)  # string literals (label values)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables
    words = set(re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", expr))
    return {w for w in words if w.lower() not in PROMQL_WORDS}


def test_promql_metric_names_reads_only_metric_names() -> None:
    assert promql_metric_names(
        'histogram_quantile(0.99, max by (trigger, le) (rate(a_bucket{trigger="schedule"}[$__rate_interval])))'
    ) == {"a_bucket"}
    assert promql_metric_names("max(b) / on (x) group_left c") == {"b", "c"}


async def test_every_dashboard_query_names_a_metric_the_api_exports(stack: Stack) -> None:
    async with stack.client("t1") as api:  # a run, so that the lateness histogram has a series
        created = await api.post("/task/create", json={
            "task_name": "dashboard", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "handler", "name": "noop"},
        })
        assert created.status_code == 201, created.text
        await wait_status(api, created.json()["task_id"], {"COMPLETED"})

    async def exported() -> set[str] | None:
        names = set(await scrape(stack.base_url))
        return names if "scheduler_run_lateness_seconds_bucket" in names else None
    names: set[str] = await until(exported)

    dashboard = json.loads(DASHBOARD.read_text())
    queries = [(panel["title"], target["expr"])
               for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) >= 10
    for title, expr in queries:
        read = promql_metric_names(expr)
        assert read, f"{title}: no metric in {expr}"
        assert read <= names, f"{title}: {read - names} not on GET /metrics"
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
