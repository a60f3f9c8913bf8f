"""Process settings, read from the environment (prefix ``SCHEDULER_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings shared by the API, the worker and the dev launcher; defaults run the embedded stack."""

    model_config = SettingsConfigDict(env_prefix="SCHEDULER_", extra="ignore")

    env: Literal["dev", "test", "production"] = "dev"
    data_dir: Path = Path(".data")
    database_url: str | None = None

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "task-scheduler"
    temporal_ui_port: int = 8233

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_workers: int = Field(
        default=1, ge=1, le=64,
        description="API processes sharing the port; the in-memory rate limit then counts per "
        "process (use a redis:// rate limit storage to share it)",
    )
    dev_api_key: SecretStr | None = None
    auto_migrate: bool = True

    log_format: Literal["console", "json"] | None = None
    log_level: str = "INFO"

    worker_role: Literal["all", "workflows", "jobs"] = Field(
        default="all",
        description="what this worker process runs: `workflows` (task workflows, bookkeeping, "
        "reconciler, backlog metrics), `jobs` (the job runs of the <task queue>-jobs queue) or "
        "`all` of it in one process",
    )
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int | None = Field(
        default=None, description="serve the worker's Prometheus metrics on this port"
    )
    dev_jobs_worker: bool = Field(
        default=True,
        description="`task-scheduler dev` runs the job runs in a worker process of their own "
        "(false: one worker process for everything)",
    )
    dev_jobs_metrics_port: int | None = Field(
        default=None,
        description="`task-scheduler dev`: the jobs worker's metrics port (default: the worker "
        "metrics port + 1)",
    )
    worker_max_concurrent_activities: int = Field(
        default=20_000, ge=1,
        description="activity slots per worker; a run dispatched ahead holds one while it waits "
        "for its instant (a few KiB each), so a herd of N needs N",
    )
    worker_max_concurrent_workflow_tasks: int = 200
    worker_max_cached_workflows: int = Field(
        default=4000, ge=0,
        description="task workflows kept in memory between their workflow tasks (measured: "
        "85 to 100 KiB each); a task woken outside the cache replays its history first",
    )
    worker_workflow_sandbox: bool = Field(
        default=False,
        description="run task workflows in the SDK's sandbox, which re-imports the workflow "
        "module for every workflow run: about 26 KiB more per task held and 0.6 ms more per "
        "start (the tests run the workflows in it, so non-deterministic code fails there)",
    )
    http_max_response_bytes: int = 1024
    egress_allow: str = Field(
        default="",
        description="comma-separated hosts, IPs or CIDRs that HTTP jobs may reach although "
        "they are not public (loopback, private, link-local...)",
    )
    egress_deny_ports: str = Field(
        default="", pattern=r"^\s*(\d+\s*(,\s*\d+\s*)*)?$",
        description="comma-separated ports that jobs and webhooks may never call on an address "
        "that is not public, allowlisted or not; the scheduler's own (API, Temporal gRPC and "
        "UI, worker metrics) are always among them",
    )
    workflow_job_types: str = Field(
        default="",
        description="comma-separated workflow types that workflow jobs may start; empty (the "
        "default): workflow jobs are off. The scheduler's own are never allowed, and a tenant "
        "starts only those it was granted (`task-scheduler quotas set --workflow-types`)",
    )
    workflow_job_task_queues: str = Field(
        default="",
        description="comma-separated task queues that workflow jobs may start workflows on; "
        "empty: workflow jobs are off. The scheduler's own queues are never allowed, and a "
        "tenant uses only those it was granted (`quotas set --workflow-task-queues`)",
    )

    rate_limit_storage: str = Field(
        default="memory://", description="limits storage URI; redis://... to share across replicas"
    )
    rate_limit_writes: str = "50/second"
    rate_limit_reads: str = "200/second"
    max_request_bytes: int = 1024 * 1024
    quota_max_active_tasks: int = 100_000
    quota_min_interval_seconds: float = 1.0
    quota_allow_seconds_cron: bool = False
    quota_max_body_bytes: int = 64 * 1024
    quota_max_header_bytes: int = 8 * 1024

    dispatch_lead_seconds: float = Field(
        default=10.0, ge=0,
        description="dispatch each run this long ahead; the job waits for its instant on the "
        "worker (0 turns it off); grows with the backlog the task sees, up to the maximum",
    )
    dispatch_max_lead_seconds: float = Field(
        default=60.0, ge=0,
        description="the longest lead: a task whose timers fire late (a backlogged engine) "
        "dispatches up to this long ahead",
    )
    otlp_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP traces endpoint; unset: no tracing"
    )
    reconcile_interval_seconds: float = Field(
        default=60.0, gt=0,
        description="how often the reconciler looks at the task workflows closed since its "
        "last pass (terminated, cancelled, failed, timed out)",
    )
    reconcile_full_interval_seconds: float = Field(
        default=3600.0, gt=0,
        description="how often (and at start) it compares every row and running workflow of "
        "the window, which lists them all from Temporal's visibility",
    )
    reconcile_grace_seconds: float = 30.0
    reconcile_window_hours: float = 24.0
    @model_validator(mode="after")
    def _refuse_dev_secrets_outside_dev(self) -> Settings:
        if self.env == "production" and self.dev_api_key is not None:
            raise ValueError(
                "SCHEDULER_DEV_API_KEY is a development convenience and is refused when "
                "SCHEDULER_ENV=production; create keys with `task-scheduler keys create`"
            )
        return self

    @model_validator(mode="after")
    def _workflow_jobs_named(self) -> Settings:
        for name in ("workflow_job_types", "workflow_job_task_queues"):
            if "*" in (entry.strip() for entry in getattr(self, name).split(",")):
                raise ValueError(
                    f"SCHEDULER_{name.upper()}: name what workflow jobs may start; '*' is "
                    "not a wildcard here"
                )
        return self

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file under the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'scheduler.db').resolve()}"

    @property
    def own_ports(self) -> frozenset[int]:
        """The ports jobs and webhooks may never call off the public internet: the API's,
        Temporal's, the worker metrics' and the listed ones."""
        _, _, temporal = self.temporal_address.rpartition(":")
        listed = (entry.strip() for entry in self.egress_deny_ports.split(","))
        ports = {self.api_port, self.temporal_ui_port, self.worker_metrics_port,
                 self.dev_jobs_metrics_port, *(int(port) for port in listed if port)}
        if temporal.isdigit():
            ports.add(int(temporal))
        return frozenset(port for port in ports if port)

    @property
    def egress_allow_list(self) -> list[str]:
        """The egress allowlist; in dev, loopback is allowed unless set explicitly."""
        entries = [e.strip() for e in self.egress_allow.split(",") if e.strip()]
        if not entries and self.env == "dev":
            return ["127.0.0.0/8", "::1/128", "localhost"]
        return entries

    @property
    def resolved_log_format(self) -> str:
        """Console logs in dev, JSON elsewhere, unless set explicitly."""
        if self.log_format:
            return self.log_format
        return "console" if self.env == "dev" else "json"
