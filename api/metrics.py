"""Prometheus metrics of the API: its own requests, and the whole service read at scrape time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.database import in_thread
from api.temporal import TemporalGateway
from config.temporal import QueueReading
from scheduling.status import TaskStatus
from store.stats import LATENESS_BOUNDS_SECONDS, ServiceCounts, read_service_counts
from store.tasks import RUN_OUTCOMES

# Scrapes closer together than this share one reading of the database and of Temporal, so
# that several Prometheus replicas (or a refreshing dashboard) add no load.
READ_AT_MOST_EVERY = 5.0
# And a reading waits this many times as long as the last one took: however large the tables
# grow, reading them costs the database and this process at most 1/20 of their time.
READ_COST_SHARE = 20


@dataclass
class ServiceReading:
    """The last reading of the database and Temporal; None where that source did not answer."""

    counts: ServiceCounts | None = None
    queues: list[QueueReading] | None = None
    workers: dict[str, int] | None = None
    read_at: float = field(default=float("-inf"))
    took: float = 0.0  # seconds the reading took


class ServiceCollector(Collector):
    """The whole service, all tenants, from the last ``ServiceReading``: tasks by status, runs
    by outcome, skips by reason, run lateness, open dead letters, and the task queues' backlog,
    pollers and live workers."""

    def __init__(self) -> None:
        self.reading = ServiceReading()
        self._lock = asyncio.Lock()

    async def refresh(self, engine: Engine, temporal: TemporalGateway) -> None:
        """Read the database and Temporal again, unless another scrape just did."""
        async with self._lock:
            wait = max(READ_AT_MOST_EVERY, READ_COST_SHARE * self.reading.took)
            if time.monotonic() - self.reading.read_at < wait:
                return
            reading = ServiceReading(read_at=time.monotonic())
            try:
                reading.counts = await in_thread(read_service_counts, engine)
            except Exception:  # the metrics stay up when the database is not; *_up says so
                pass
            try:
                reading.queues = await temporal.describe_queues()
                reading.workers = await temporal.live_workers()
            except Exception:  # likewise for Temporal
                pass
            reading.took = time.monotonic() - reading.read_at
            self.reading = reading

    def collect(self) -> Iterator[Metric]:
        """The families of the last reading (a source that did not answer yields none)."""
        reading = self.reading
        up = GaugeMetricFamily(
            "scheduler_metrics_source_up",
            "Whether the last scrape could read the source (database, temporal)",
            labels=["source"],
        )
        up.add_metric(["database"], int(reading.counts is not None))
        up.add_metric(["temporal"], int(reading.queues is not None))
        yield up
        if reading.counts is not None:
            yield from _count_families(reading.counts)
        if reading.queues is not None:
            yield from _queue_families(reading.queues)
        if reading.workers is not None:
            live = GaugeMetricFamily(
                "scheduler_live_workers",
                "Worker processes on the task queue whose Temporal heartbeat is recent",
                labels=["task_queue"],
            )
            for queue, count in reading.workers.items():
                live.add_metric([queue], count)
            yield live


def _count_families(counts: ServiceCounts) -> Iterator[Metric]:
    tasks = GaugeMetricFamily("scheduler_tasks", "Tasks by status", labels=["status"])
    for task_status in TaskStatus:
        tasks.add_metric([task_status], counts.tasks.get(task_status, 0))
    yield tasks
    executions = GaugeMetricFamily(
        "scheduler_executions",
        "Recorded executions by status and, for skipped ones, reason",
        labels=["status", "reason"],
    )
    for (status, reason), count in sorted(counts.executions.items()):
        executions.add_metric([status, reason], count)
    yield executions
    runs = CounterMetricFamily(
        "scheduler_recorded_runs", "Finished runs recorded in the database, by outcome",
        labels=["outcome"],
    )
    for status in RUN_OUTCOMES:
        runs.add_metric([status.lower()], counts.executions.get((status, ""), 0))
    yield runs
    skips = CounterMetricFamily(
        "scheduler_recorded_skips", "Fires recorded SKIPPED in the database, by reason",
        labels=["reason"],
    )
    for (status, reason), count in sorted(counts.executions.items()):
        if status == "SKIPPED":
            skips.add_metric([reason or "skipped"], count)
    yield skips
    lateness = HistogramMetricFamily(
        "scheduler_run_lateness_seconds",
        "How late each run's first attempt started after its scheduled time, by trigger",
        labels=["trigger"],
    )
    for trigger, histogram in sorted(counts.lateness.items()):
        buckets = [(_le(bound), float(n)) for bound, n in zip(LATENESS_BOUNDS_SECONDS, histogram.buckets, strict=True)]
        buckets.append(("+Inf", float(histogram.count)))
        lateness.add_metric([trigger], buckets, histogram.sum_seconds)
    yield lateness
    yield GaugeMetricFamily(
        "scheduler_dead_letters_open",
        "Runs that exhausted their retries, neither replayed nor dismissed",
        value=counts.dead_letters_open,
    )
    yield GaugeMetricFamily(
        "scheduler_overdue_runs",
        "Tasks whose run has neither started nor been decided within its overdue bound",
        value=counts.overdue_runs,
    )


def _queue_families(queues: list[QueueReading]) -> Iterator[Metric]:
    labels = ["task_queue", "type"]
    backlog = GaugeMetricFamily(
        "scheduler_queue_backlog", "Approximate tasks waiting in the task queue (Temporal)",
        labels=labels,
    )
    age = GaugeMetricFamily(
        "scheduler_queue_backlog_age_seconds",
        "Age of the oldest task waiting in the task queue (Temporal)", labels=labels,
    )
    pollers = GaugeMetricFamily(
        "scheduler_queue_pollers",
        "Pollers Temporal saw on the task queue within about the last minute", labels=labels,
    )
    for queue in queues:
        key = [queue.task_queue, queue.type]
        backlog.add_metric(key, queue.backlog)
        age.add_metric(key, queue.backlog_age_seconds)
        pollers.add_metric(key, queue.pollers)
    yield from (backlog, age, pollers)


def _le(bound: float) -> str:
    return str(float(bound))


class ApiMetrics:
    """HTTP request counts and latencies by route, the creates in progress, and the service
    collector."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.creates_in_progress = Gauge(
            "scheduler_api_creates_in_progress",
            "creates this API process is working on (bounded by SCHEDULER_API_MAX_CREATES_IN_PROGRESS)",
            registry=self.registry,
        )
        self.requests = Counter(
            "scheduler_http_requests_total", "HTTP requests by route, method and status",
            ["route", "method", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "scheduler_http_request_duration_seconds", "HTTP request latency by route",
            ["route", "method"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.service = ServiceCollector()
        self.registry.register(self.service)


class MetricsMiddleware:
    """Times every request and counts it by its route template (not its raw path).

    A plain ASGI middleware: it only looks at the response's start message, so the body
    streams through untouched and no task is spawned per request."""

    def __init__(self, app: ASGIApp, *, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router puts the matched route into the scope it shares with us.
            template = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()
            self.metrics.latency.labels(template, scope["method"]).observe(
                time.perf_counter() - started
            )
