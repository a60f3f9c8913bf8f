"""The FastAPI application: built by ``create_app``, dependencies made in its lifespan."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from fastapi import Depends, FastAPI
from sqlalchemy import Engine
from temporalio.client import Client

from activities.handlers import load_handlers
from activities.signing import Signer
from api.admission import CreateAdmission, following_backlog
from api.compute import FireMath
from api.deps import storable_params
from api.errors import install_error_handlers
from api.guards import BodyGuard
from api.metrics import ApiMetrics, MetricsMiddleware
from api.overdue import overdue_check
from api.ratelimit import AuthFailureLimiter, TenantRateLimiter
from api.routes import calendars, dead_letters, health, history, preview, signing, tasks, ui
from api.routes.docs import install_docs
from api.service import TaskService
from api.signing import SigningService
from api.temporal import TemporalGateway
from config.settings import Settings
from config.temporal import connect
from config.tracing import setup_tracing
from outbound.egress import EgressPolicy, guarded_client
from store.engine import make_engine, migrate
from store.quotas import Quota
from store.signing import SecretBox
from workflows.registry import workflow_job_rules

DESCRIPTION = """
Durable task scheduling. Every task is a Temporal workflow that sleeps until its next run,
runs the job (an HTTP call, a registered handler or another workflow) with retries, and
obeys cancel, update, pause, resume and trigger.

Authenticate with `Authorization: Bearer <api key>`. Errors are `application/problem+json`.
"""


def create_app(
    settings: Settings | None = None, *, engine: Engine | None = None, client: Client | None = None
) -> FastAPI:
    """The API; ``engine`` and ``client`` may be given (tests), else they are made at startup."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_engine = engine is None
        db = engine or make_engine(settings.resolved_database_url)
        if own_engine and settings.database.auto_migrate:
            migrate(db)
        # lazy: start even while Temporal is down; requests then answer 503
        temporal = client or await connect(settings.temporal.address, settings.temporal.namespace,
                                           tracing=tracing, lazy=True)
        egress = EgressPolicy.from_list(settings.egress_allow_list, own_ports=settings.own_ports)
        app.state.service = TaskService(
            db,
            TemporalGateway(temporal, settings.temporal.task_queue),
            load_handlers(),
            egress,
            Quota.from_settings(settings.quota),
            workflow_jobs=workflow_job_rules(settings),
            fire_math=FireMath(settings.api.fire_math_cpu_share, settings.api.fire_math_cpu_burst),
        )
        app.state.calendars = app.state.service.calendars
        app.state.signing = SigningService(
            db, SecretBox(settings.signing.key.get_secret_value()),
            timedelta(hours=settings.signing.rotation_hours))
        app.state.rate_limiter = TenantRateLimiter(
            settings.rate_limit.storage, settings.rate_limit.writes, settings.rate_limit.reads
        )
        app.state.auth_failures = AuthFailureLimiter(settings.rate_limit.storage,
                                                     settings.rate_limit.auth_failures)
        # The overdue check tells webhooks itself: when it matters, the workers may be down.
        http = guarded_client(egress, max_connections=settings.http_max_connections)
        box = SecretBox(settings.signing.key.get_secret_value())
        # What startup made (modules, the app, its clients) lives as long as the process: keep
        # it out of the collector's full passes, which otherwise walk all of it and stall a
        # request now and then.
        gc.collect()
        gc.freeze()
        try:
            async with (http, overdue_check(db, settings.overdue, http, Signer(db, box)),
                        following_backlog(app.state.admission, app.state.service.temporal)):
                yield
        finally:
            gc.unfreeze()
            await app.state.service.aclose()
            if own_engine:
                db.dispose()

    app = FastAPI(
        title="task-scheduler",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by install_docs, from local assets
        redoc_url=None,
        dependencies=[Depends(storable_params)],
    )
    tracing = setup_tracing("task-scheduler-api", settings.otlp_endpoint)
    if tracing:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="metrics,livez,readyz")
    app.state.production = settings.env == "production"
    metrics = ApiMetrics()
    app.state.metrics = metrics
    admission = CreateAdmission(settings.api.max_creates_in_progress,
                                 settings.api.max_workflow_backlog_seconds)
    metrics.creates_in_progress.set_function(lambda: admission.in_progress)
    app.state.admission = admission
    token = settings.metrics.token
    app.state.metrics_token = token.get_secret_value().encode() if token else None
    app.state.health = health.HealthCache(settings.api.health_cache_seconds)
    app.state.dev_keys = settings.env == "dev"  # keys `task-scheduler dev` stored pass only there
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(BodyGuard, max_bytes=settings.api.max_request_bytes)
    install_error_handlers(app)
    app.include_router(tasks.router)
    app.include_router(preview.router)
    app.include_router(history.router)
    app.include_router(dead_letters.router)
    app.include_router(signing.router)
    app.include_router(calendars.router)
    app.include_router(health.router)
    app.include_router(ui.router)
    install_docs(app, sorted(load_handlers()))

    return app
