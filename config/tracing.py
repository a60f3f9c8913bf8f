"""OpenTelemetry traces: API request -> workflow -> activity -> outgoing HTTP call.

Off by default; SCHEDULER_OTLP_ENDPOINT (e.g. http://otel-collector:4318/v1/traces) turns on
the OTLP/HTTP exporter. Temporal's OpenTelemetry interceptor carries the trace from the API's
client into the workflow and its activities; HTTP jobs pass it on in `traceparent`.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.client import Interceptor
from temporalio.contrib.opentelemetry import TracingInterceptor

_configured = False


def setup_tracing(
    service_name: str, endpoint: str | None, *, processors: Sequence[SpanProcessor] = ()
) -> bool:
    """Install a tracer provider once per process when an endpoint (or processors) are given."""
    global _configured
    if _configured:
        return True
    if not endpoint and not processors:
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def temporal_interceptors(enabled: bool) -> list[Interceptor]:
    """Client interceptors: tracing when it is on."""
    return [TracingInterceptor()] if enabled else []
