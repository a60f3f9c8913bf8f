"""Prometheus metrics of the API process."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import Engine, func
from sqlalchemy.orm import Session
from sqlmodel import col, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduling.status import TaskStatus
from store.models import Task, TaskExecution


class ApiMetrics:
    """HTTP request counts and latencies by route, and tasks by status (read on scrape)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "scheduler_http_requests_total", "HTTP requests by route, method and status",
            ["route", "method", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "scheduler_http_request_duration_seconds", "HTTP request latency by route",
            ["route", "method"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.tasks = Gauge(
            "scheduler_tasks", "Tasks by status", ["status"], registry=self.registry
        )
        self.executions = Gauge(
            "scheduler_executions",
            "Recorded executions by status and, for skipped ones, reason",
            ["status", "reason"],
            registry=self.registry,
        )

    def refresh_task_counts(self, engine: Engine) -> None:
        """Count tasks by status (called when /metrics is scraped)."""
        with Session(engine) as session:
            counts = dict(session.execute(select(Task.status, func.count()).group_by(Task.status)).all())
        for task_status in TaskStatus:
            self.tasks.labels(status=task_status).set(counts.get(task_status, 0))
        with Session(engine) as session:
            rows = session.execute(
                select(TaskExecution.status, TaskExecution.reason, func.count()).group_by(
                    col(TaskExecution.status), col(TaskExecution.reason)
                )
            ).all()
        totals: dict[tuple[str, str], int] = {}
        for status, reason, count in rows:
            key = (status, reason if status == "SKIPPED" and reason else "")
            totals[key] = totals.get(key, 0) + count
        for (status, reason), count in totals.items():
            self.executions.labels(status=status, reason=reason).set(count)


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
