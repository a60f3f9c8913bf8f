"""Process settings, read from the environment.

Every setting is ``SCHEDULER_<GROUP>_<NAME>`` (``SCHEDULER_API_PORT``, ``SCHEDULER_QUOTA_MAX_ACTIVE_TASKS``)
or, for the few outside a group, ``SCHEDULER_<NAME>``. Fields marked ``KEY`` make the README's table
(``python -m cli.settings_table`` writes it, with the processes that read each; a test checks it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

# The processes, as the README's table names those that read a setting.
API, WORKFLOWS, JOBS, DEV = "API", "workflows worker", "jobs worker", "`task-scheduler dev`"
EVERY = (API, WORKFLOWS, JOBS, DEV)


def key(*read_by: str) -> dict[str, Any]:
    """The json_schema_extra of a setting the README lists: the processes that read it."""
    return {"key": True, "read_by": list(read_by)}


class DatabaseSettings(BaseModel):
    url: str | None = Field(
        default=None, json_schema_extra=key(API, WORKFLOWS, JOBS),
        description="SQLAlchemy URL of the task database (postgresql+psycopg://...); unset: a "
        "SQLite file in the data directory",
    )
    auto_migrate: bool = Field(
        default=True, description="apply the schema migrations at start (the API and the worker)"
    )


class TemporalSettings(BaseModel):
    address: str = Field(default="127.0.0.1:7233", json_schema_extra=key(*EVERY),
                         description="Temporal frontend, host:port")
    namespace: str = Field(default="default", description="Temporal namespace")
    task_queue: str = Field(
        default="task-scheduler", json_schema_extra=key(*EVERY),
        description="task queue of the task workflows; job runs use `<task queue>-jobs`",
    )
    ui_port: int = Field(default=8233, description="`task-scheduler dev`: the Temporal web UI's port")


class ApiSettings(BaseModel):
    host: str = Field(default="127.0.0.1", description="address the API listens on")
    port: int = Field(default=8000, json_schema_extra=key(*EVERY), description="port the API listens on")
    workers: int = Field(
        default=1, ge=1, le=64,
        description="API processes sharing the port; the in-memory rate limit then counts per "
        "process (use a redis:// rate limit storage to share it)",
    )
    max_request_bytes: int = Field(default=1024 * 1024, description="largest request body accepted")
    max_creates_in_progress: int = Field(
        default=128, ge=1,
        description="creates one API process works on at once, from arrival to the row written; "
        "past it a create gets 503 at once, and a tenant past its share of it (this over 2 + "
        "the other tenants with creates in progress) 429, both with Retry-After",
    )
    max_workflow_backlog_seconds: float = Field(
        default=5.0, ge=0,
        description="creates get 503 with Retry-After while the workers take workflow tasks but "
        "the oldest has waited longer than this in the task queue: Temporal is behind, and more "
        "tasks would make every tenant's runs late. Not while nobody takes them (the workers "
        "down): those creates wait for the workers as before. 0: off",
    )
    fire_math_cpu_share: float = Field(
        default=0.1, gt=0,
        description="CPU seconds a second of one API process that a tenant's previews and "
        "backfill ranges may spend listing fires; past it they get 429 with Retry-After",
    )
    fire_math_cpu_burst: float = Field(
        default=1.0, gt=0, description="CPU seconds of listing fires a tenant may spend at once",
    )
    health_cache_seconds: float = Field(
        default=1.0, ge=0,
        description="/checkHealth and /readyz answer from one check of the database and Temporal "
        "for this long, however many ask (0: check on every request)",
    )


class RateLimitSettings(BaseModel):
    storage: str = Field(
        default="memory://", description="limits storage URI; redis://... to share across replicas"
    )
    writes: str = Field(default="50/second", description="writes per API key")
    reads: str = Field(default="200/second", description="reads per API key")
    auth_failures: str = Field(
        default="10/minute",
        description="failed sign-ins (an unknown, revoked or refused API key or metrics token) "
        "per client address; over it, that address gets 429 without its key being looked at",
    )


class MetricsSettings(BaseModel):
    token: SecretStr | None = Field(
        default=None, json_schema_extra=key(API),
        description="the API's /metrics (every tenant's counts) then needs `Authorization: Bearer "
        "<token>`; unset: open. Required in production",
    )


class WorkerSettings(BaseModel):
    role: Literal["all", "workflows", "jobs"] = Field(
        default="all", json_schema_extra=key(WORKFLOWS, JOBS),
        description="what this worker process runs: `workflows` (task workflows, bookkeeping, "
        "reconciler, backlog metrics), `jobs` (the job runs) or `all` of it",
    )
    metrics_host: str = Field(default="127.0.0.1", description="address of the worker's metrics")
    metrics_port: int | None = Field(
        default=None, description="serve the worker's Prometheus metrics on this port"
    )
    max_concurrent_activities: int = Field(
        default=20_000, ge=1,
        description="activity slots per worker; a run dispatched ahead holds one while it waits "
        "for its instant, so a herd of N needs N",
    )
    max_concurrent_workflow_tasks: int = Field(default=200, ge=1,
                                               description="workflow task slots per worker")
    max_cached_workflows: int = Field(
        default=4000, ge=0,
        description="task workflows kept in memory between their workflow tasks; a task woken "
        "outside the cache replays its history first (docs/capacity.md)",
    )
    workflow_sandbox: bool = Field(
        default=False,
        description="run task workflows in the SDK's sandbox, which re-imports the workflow "
        "module for every workflow run and costs memory and start time (docs/capacity.md); the "
        "tests run the workflows in it, so non-deterministic code fails there",
    )
    shutdown_grace_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="on SIGTERM, how long the jobs and webhooks already running may take to "
        "finish before they are cancelled and retried elsewhere; runs still waiting for their "
        "instants are handed back at once. Keep it below the orchestrator's stop grace (60 s "
        "in the manifests)",
    )
    history_limit: int = Field(
        default=10_000, gt=0,
        description="a task workflow continues as new once its history is this long; running "
        "tasks take a changed value at their next continue-as-new",
    )


class DevSettings(BaseModel):
    api_key: SecretStr | None = Field(
        default=None, json_schema_extra=key(DEV),
        description="`task-scheduler dev`: an API key accepted as is; unset: one generated once "
        "under the data directory. Refused in production: create keys with `task-scheduler keys "
        "create --tenant T`",
    )
    jobs_worker: bool = Field(
        default=True,
        description="`task-scheduler dev` runs the job runs in a worker process of their own "
        "(false: one worker process for everything)",
    )
    jobs_metrics_port: int | None = Field(
        default=None,
        description="`task-scheduler dev`: the jobs worker's metrics port (default: the worker "
        "metrics port + 1)",
    )


class LogSettings(BaseModel):
    format: Literal["console", "json"] | None = Field(
        default=None, description="console or json; default: console in dev, json elsewhere"
    )
    level: str = Field(default="INFO", description="log level")


class EgressSettings(BaseModel):
    allow: str = Field(
        default="", json_schema_extra=key(API, WORKFLOWS, JOBS),
        description="comma-separated hosts, IPs or CIDRs that HTTP jobs and webhooks may reach "
        "although they are not public (loopback, private, link-local...); empty: none, but "
        "loopback in dev",
    )
    deny_ports: str = Field(
        default="", pattern=r"^\s*(\d+\s*(,\s*\d+\s*)*)?$",
        description="comma-separated ports that jobs and webhooks may never call on an address "
        "that is not public, allowlisted or not; the scheduler's own (API, Temporal gRPC and "
        "UI, worker metrics) are always among them",
    )


class WorkflowJobSettings(BaseModel):
    types: str = Field(
        default="",
        description="comma-separated workflow types that workflow jobs may start; empty (the "
        "default): workflow jobs are off. The scheduler's own are never allowed, and a tenant "
        "starts only those it was granted (`task-scheduler quotas set --workflow-types`)",
    )
    task_queues: str = Field(
        default="",
        description="comma-separated task queues that workflow jobs may start workflows on; "
        "empty: workflow jobs are off. The scheduler's own queues are never allowed, and a "
        "tenant uses only those it was granted (`quotas set --workflow-task-queues`)",
    )


class QuotaSettings(BaseModel):
    """Every tenant's limits unless `task-scheduler quotas set` overrides them (within the same
    bounds)."""

    model_config = ConfigDict(allow_inf_nan=False)

    max_active_tasks: int = Field(default=100_000, ge=0, json_schema_extra=key(API),
                                  description="tasks a tenant may have pending, running or paused")
    min_interval_seconds: float = Field(default=1.0, ge=0, json_schema_extra=key(API),
                                        description="shortest interval (and cron spacing) a tenant may ask for")
    allow_seconds_cron: bool = Field(default=False, description="allow six-field cron with seconds")
    max_body_bytes: int = Field(default=64 * 1024, ge=0, description="largest HTTP job body")
    max_header_bytes: int = Field(default=8 * 1024, ge=0, description="largest HTTP job headers")


class DispatchSettings(BaseModel):
    lead_seconds: float = Field(
        default=10.0, ge=0, json_schema_extra=key(WORKFLOWS),
        description="dispatch each run this long ahead; the job waits for its instant on the "
        "jobs worker (0 turns it off); grows with the backlog the task sees, up to the maximum. "
        "Running tasks take a changed value at their next continue-as-new",
    )
    max_lead_seconds: float = Field(
        default=60.0, ge=0,
        description="the longest lead: a task whose timers fire late (a backlogged engine) "
        "dispatches up to this long ahead",
    )
    herd_rate: float = Field(
        default=50.0, ge=0,
        description="runs per second the cluster dispatches ahead of a herd: a task created into "
        "one dispatches its runs further ahead by the tasks due before it (policy.herd_lead; "
        "0 turns it off)",
    )


class ReconcileSettings(BaseModel):
    interval_seconds: float = Field(
        default=60.0, gt=0,
        description="how often the reconciler looks at the task workflows closed since its "
        "last pass (terminated, cancelled, failed, timed out)",
    )
    full_interval_seconds: float = Field(
        default=3600.0, gt=0,
        description="how often (and at start) it compares every row and running workflow of "
        "the window, which lists them all from Temporal's visibility",
    )
    grace_seconds: float = Field(default=30.0, ge=0,
                                 description="a row younger than this is not repaired yet")
    window_hours: float = Field(default=24.0, gt=0,
                                description="how far back the full pass looks")


# The bounds of the time a run may be late before it is overdue: a task's own
# ``overdue_after_seconds`` and the default setting both take them.
OVERDUE_AFTER_MIN_SECONDS = 1.0
OVERDUE_AFTER_MAX_SECONDS = 7 * 86400.0


class OverdueSettings(BaseModel):
    after_seconds: float = Field(
        default=300.0, ge=OVERDUE_AFTER_MIN_SECONDS, le=OVERDUE_AFTER_MAX_SECONDS,
        json_schema_extra=key(API),
        description="a run not started this long after its instant is overdue (a task's "
        "`overdue_after_seconds` overrides it): the API raises `run.overdue`",
    )
    check_seconds: float = Field(
        default=15.0, gt=0, le=3600,
        description="how often the API looks for overdue runs and for their recovery",
    )


# Encrypts the signing secrets at rest outside production only: a Fernet key anyone can read.
DEV_SIGNING_KEY = "dGFzay1zY2hlZHVsZXIgZGV2ZWxvcG1lbnQga2V5ISE="


def signing_keys(setting: str) -> list[str]:
    """The keys of ``SCHEDULER_SIGNING_KEY``: one, or several comma-separated (the first seals)."""
    return [key.strip() for key in setting.split(",") if key.strip()]


class SigningSettings(BaseModel):
    key: SecretStr = Field(
        default=SecretStr(DEV_SIGNING_KEY), json_schema_extra=key(API, WORKFLOWS, JOBS),
        description="the Fernet key (`python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`) that encrypts the tenants' signing secrets "
        "in the database; the default is a development key, refused in production. To change "
        "it, list the new key first and the old after it, comma-separated: secrets are re-sealed "
        "under the first as they are read",
    )
    rotation_hours: float = Field(
        default=24.0, ge=0.1, le=24 * 90,
        description="after a rotation, how long the replaced signing secret still signs beside "
        "the new one (at least 0.1: workers re-read the secrets every 30 s)",
    )


class Settings(BaseSettings):
    """Settings shared by the API, the worker and the dev launcher; defaults run the embedded stack."""

    model_config = SettingsConfigDict(
        env_prefix="SCHEDULER_", env_nested_delimiter="_", env_nested_max_split=1, extra="ignore"
    )

    env: Literal["dev", "test", "production"] = Field(
        default="dev", json_schema_extra=key(*EVERY),
        description="dev, test or production: production refuses dev conveniences",
    )
    data_dir: Path = Field(default=Path(".data"), json_schema_extra=key(*EVERY),
                           description="where the embedded stack keeps its files")
    otlp_endpoint: str | None = Field(
        default=None, json_schema_extra=key(API, WORKFLOWS, JOBS), description="OTLP/HTTP traces endpoint; unset: no tracing"
    )
    http_max_response_bytes: int = Field(
        default=1024, ge=0,
        description="bytes of a job's HTTP response kept in its run, and the most a worker reads "
        "of any answer or webhook reply (a redirect's body is never read)",
    )
    http_max_calls_per_tenant: int = Field(
        default=50, ge=1, json_schema_extra=key(WORKFLOWS, JOBS),
        description="HTTP calls (jobs and webhooks) one tenant may have in flight per worker "
        "process; more wait for a slot (`scheduler_http_calls_waiting`)",
    )
    http_max_calls_per_host: int = Field(
        default=20, ge=1,
        description="HTTP calls one tenant may have in flight to one host per worker process",
    )
    http_max_connections: int = Field(
        default=500, ge=1,
        description="connections of a worker process's HTTP client; must exceed what one tenant "
        "may hold (`SCHEDULER_HTTP_MAX_CALLS_PER_TENANT`)",
    )

    database: DatabaseSettings = DatabaseSettings()
    temporal: TemporalSettings = TemporalSettings()
    api: ApiSettings = ApiSettings()
    rate_limit: RateLimitSettings = RateLimitSettings()
    metrics: MetricsSettings = MetricsSettings()
    worker: WorkerSettings = WorkerSettings()
    dev: DevSettings = DevSettings()
    log: LogSettings = LogSettings()
    egress: EgressSettings = EgressSettings()
    workflow_job: WorkflowJobSettings = WorkflowJobSettings()
    quota: QuotaSettings = QuotaSettings()
    dispatch: DispatchSettings = DispatchSettings()
    reconcile: ReconcileSettings = ReconcileSettings()
    signing: SigningSettings = SigningSettings()
    overdue: OverdueSettings = OverdueSettings()

    @model_validator(mode="after")
    def _refuse_dev_secrets_outside_dev(self) -> Settings:
        if self.env == "production" and self.dev.api_key is not None:
            raise ValueError(
                "SCHEDULER_DEV_API_KEY is a development convenience and is refused when "
                "SCHEDULER_ENV=production; create keys with `task-scheduler keys create`"
            )
        return self

    @model_validator(mode="after")
    def _signing_key_set_in_production(self) -> Settings:
        keys = signing_keys(self.signing.key.get_secret_value())
        if not keys:
            raise ValueError("SCHEDULER_SIGNING_KEY names no key")
        if self.env == "production" and keys[0] == DEV_SIGNING_KEY:  # the key that seals
            raise ValueError(
                "SCHEDULER_SIGNING_KEY must be set when SCHEDULER_ENV=production: it encrypts "
                "the tenants' signing secrets at rest (a Fernet key, see the README)"
            )
        return self

    @model_validator(mode="after")
    def _metrics_closed_in_production(self) -> Settings:
        # /metrics counts every tenant's tasks and runs: open to anyone only by choice, in dev.
        token = self.metrics.token
        if self.env == "production" and (token is None or not token.get_secret_value().strip()):
            raise ValueError(
                "SCHEDULER_METRICS_TOKEN must be set when SCHEDULER_ENV=production: /metrics shows "
                "every tenant's counts (scrape it with `Authorization: Bearer <token>`)"
            )
        return self

    @model_validator(mode="after")
    def _workflow_jobs_named(self) -> Settings:
        for name in ("types", "task_queues"):
            if "*" in (entry.strip() for entry in getattr(self.workflow_job, name).split(",")):
                raise ValueError(
                    f"SCHEDULER_WORKFLOW_JOB_{name.upper()}: name what workflow jobs may start; "
                    "'*' is not a wildcard here"
                )
        return self

    @model_validator(mode="after")
    def _pool_outlasts_a_tenant(self) -> Settings:
        # A tenant holding all its slots must leave connections for the others.
        if self.http_max_connections <= self.http_max_calls_per_tenant:
            raise ValueError(
                "SCHEDULER_HTTP_MAX_CONNECTIONS must be larger than "
                "SCHEDULER_HTTP_MAX_CALLS_PER_TENANT, or one tenant can take every connection"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file under the data directory."""
        if self.database.url:
            return self.database.url
        return f"sqlite:///{(self.data_dir / 'scheduler.db').resolve()}"

    @property
    def own_ports(self) -> frozenset[int]:
        """The ports jobs and webhooks may never call off the public internet: the API's,
        Temporal's, the worker metrics' and the listed ones."""
        _, _, temporal = self.temporal.address.rpartition(":")
        listed = (entry.strip() for entry in self.egress.deny_ports.split(","))
        ports = {self.api.port, self.temporal.ui_port, self.worker.metrics_port,
                 self.dev.jobs_metrics_port, *(int(port) for port in listed if port)}
        if temporal.isdigit():
            ports.add(int(temporal))
        return frozenset(port for port in ports if port)

    @property
    def egress_allow_list(self) -> list[str]:
        """The egress allowlist; in dev, loopback is allowed unless set explicitly."""
        entries = [e.strip() for e in self.egress.allow.split(",") if e.strip()]
        if not entries and self.env == "dev":
            return ["127.0.0.0/8", "::1/128", "localhost"]
        return entries

    @property
    def resolved_log_format(self) -> str:
        """Console logs in dev, JSON elsewhere, unless set explicitly."""
        if self.log.format:
            return self.log.format
        return "console" if self.env == "dev" else "json"


def setting_fields() -> Iterator[tuple[str, str, FieldInfo]]:
    """Every setting: its dotted path (``api.port``), its variable (``SCHEDULER_API_PORT``)
    and its field."""
    for name, field in Settings.model_fields.items():
        group = field.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            for sub, info in group.model_fields.items():
                yield f"{name}.{sub}", f"SCHEDULER_{name}_{sub}".upper(), info
        else:
            yield name, f"SCHEDULER_{name}".upper(), field

