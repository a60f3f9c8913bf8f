"""Worker metrics: the Temporal SDK's Prometheus endpoint, carrying the SDK's own worker
metrics and the scheduler's (runs, lateness, durations, retries, backlog), and worker
heartbeats."""

from __future__ import annotations

from datetime import timedelta

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]


# How often each worker tells Temporal it is alive (the SDK's default is a minute). The API's
# /checkHealth calls a worker down once its heartbeats stop (api/temporal.py).
WORKER_HEARTBEAT_INTERVAL = timedelta(seconds=2)


def make_runtime(bind_address: str | None,
                 heartbeat_every: timedelta = WORKER_HEARTBEAT_INTERVAL) -> Runtime:
    """The worker's runtime: heartbeats every ``WORKER_HEARTBEAT_INTERVAL`` (or as told), and
    Prometheus metrics on ``bind_address`` when one is given."""
    metrics = None if not bind_address else PrometheusConfig(
        bind_address=bind_address,
        counters_total_suffix=True,
        durations_as_seconds=True,
        histogram_bucket_overrides={
            "scheduler_fire_lateness": SECONDS_BUCKETS,
            "scheduler_job_duration": SECONDS_BUCKETS,
        },
    )
    return Runtime(
        telemetry=TelemetryConfig(metrics=metrics),
        worker_heartbeat_interval=heartbeat_every,
    )
