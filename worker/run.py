"""Runs a Temporal worker process (workflows, jobs, or both: its role) until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from datetime import timedelta

import structlog
from temporalio.client import Client
from temporalio.runtime import Runtime

from activities.options import RunOptions
from config.settings import Settings
from config.telemetry import make_runtime
from config.temporal import connect
from config.tracing import setup_tracing
from outbound.calls import OutboundLimits
from outbound.egress import EgressPolicy, guarded_client
from store.engine import make_engine, migrate
from worker.backlog import watch_backlog
from worker.build import build_activities, build_jobs_worker, build_workflow_worker
from worker.reconcile import Reconciler
from workflows.registry import workflow_job_rules

log = structlog.get_logger("task_scheduler.worker")


async def connect_with_retry(
    settings: Settings, stop: asyncio.Event, runtime: Runtime | None = None
) -> Client | None:
    """Connect to Temporal, retrying while it starts; None if asked to stop first."""
    delay = 0.5
    while not stop.is_set():
        try:
            return await connect(
                settings.temporal.address, settings.temporal.namespace, runtime,
                tracing=setup_tracing("task-scheduler-worker", settings.otlp_endpoint),
            )
        except Exception as exc:  # the server may still be starting
            log.warning("temporal.unavailable", address=settings.temporal.address, error=str(exc))
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 10)
    return None


async def run_worker(settings: Settings) -> None:
    """Poll the task queues of this process's role until a stop signal arrives, then finish
    in-flight work."""
    role = settings.worker.role
    runs_workflows, runs_jobs = role in ("all", "workflows"), role in ("all", "jobs")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    engine = make_engine(settings.resolved_database_url)
    # A jobs-only process writes into tables the workflows side (or `migrate`) creates: two
    # processes migrating one database at once could both try to create them.
    if settings.database.auto_migrate and runs_workflows:
        migrate(engine)
    bind = (
        f"{settings.worker.metrics_host}:{settings.worker.metrics_port}"
        if settings.worker.metrics_port
        else None
    )
    runtime = make_runtime(bind)
    client = await connect_with_retry(settings, stop, runtime)
    if client is None:
        return
    egress = EgressPolicy.from_list(settings.egress_allow_list, own_ports=settings.own_ports)
    async with guarded_client(egress, max_connections=settings.http_max_connections) as http:
        activities = build_activities(
            engine=engine,
            http=http,
            client=client,
            limits=OutboundLimits.of(settings),
            workflow_jobs=workflow_job_rules(settings),
            meter=runtime.metric_meter,
            run_options=RunOptions.of(settings),
            signing=settings.signing,
            job_slots=settings.worker.max_concurrent_activities,
        )
        workers = []
        grace = timedelta(seconds=settings.worker.shutdown_grace_seconds)
        if runs_workflows:
            workers.append(build_workflow_worker(
                client, task_queue=settings.temporal.task_queue, activities=activities,
                max_concurrent_workflow_tasks=settings.worker.max_concurrent_workflow_tasks,
                max_cached_workflows=settings.worker.max_cached_workflows,
                sandboxed=settings.worker.workflow_sandbox, shutdown_grace=grace,
            ))
        if runs_jobs:
            workers.append(build_jobs_worker(
                client, task_queue=settings.temporal.task_queue, activities=activities,
                shutdown_grace=grace))
        log.info("worker.started", role=role, task_queue=settings.temporal.task_queue,
                 address=settings.temporal.address)
        async with contextlib.AsyncExitStack() as running:
            for worker in workers:
                await running.enter_async_context(worker)
            background = []
            if runs_workflows:
                reconciler = Reconciler(
                    engine, client, settings.temporal.task_queue,
                    grace=timedelta(seconds=settings.reconcile.grace_seconds),
                    window=timedelta(hours=settings.reconcile.window_hours),
                    full_every=timedelta(seconds=settings.reconcile.full_interval_seconds),
                )
                background.append(asyncio.create_task(reconciler.run_forever(
                    timedelta(seconds=settings.reconcile.interval_seconds), stop
                )))
                if bind is not None:
                    background.append(asyncio.create_task(
                        watch_backlog(client, runtime, settings.temporal.task_queue, stop)
                    ))
            if bind is not None:
                log.info("worker.metrics", address=f"http://{bind}/metrics")
            # What is loaded by now lives as long as the process: out of the collector's
            # full passes, which otherwise stall the event loop (and every run due then
            # starts that late).
            gc.collect()
            gc.freeze()
            await stop.wait()
            log.info("worker.stopping", role=role)
            # Together: with both roles, their jobs and webhooks share one shutdown grace.
            await asyncio.gather(*(worker.shutdown() for worker in workers))
            await asyncio.gather(*background)
    engine.dispose()
    log.info("worker.stopped", role=role)
