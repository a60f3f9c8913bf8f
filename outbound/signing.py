"""Signed deliveries (the Standard Webhooks spec): every HTTP job call and notification carries
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` -- ``v1,`` and the base64
HMAC-SHA256 of ``id.timestamp.body`` under the tenant's secret -- so a receiver can check that
the scheduler sent it, unchanged and recently. During a rotation every live secret signs (one
signature each, space-separated, as the spec allows)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from scheduling.spec import SIGNATURE_HEADERS
from store.signing import SECRET_PREFIX


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,`` signature of a delivery."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secrets: Sequence[str], message_id: str, timestamp: int,
                   body: bytes) -> dict[str, str]:
    """The spec's three headers, signed by every live secret of the tenant."""
    if not secrets:
        raise ValueError("no live signing secret")
    signatures = " ".join(signature(s, message_id, timestamp, body) for s in secrets)
    return dict(zip(SIGNATURE_HEADERS, (message_id, str(timestamp), signatures), strict=True))


def traceparent(execution_id: str, attempt: int) -> str:
    """A W3C ``traceparent`` when no tracer is on: the trace named after the run (every
    attempt in one trace), the span after the attempt."""
    trace_id = hashlib.sha256(execution_id.encode()).hexdigest()[:32]
    span_id = hashlib.sha256(f"{execution_id}#{attempt}".encode()).hexdigest()[:16]
    return f"00-{trace_id}-{span_id}-01"
