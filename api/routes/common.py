"""What the routers share: the error responses they document and the Idempotency-Key headers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header

from api.schemas import problem_responses

ERRORS = problem_responses({
    401: "missing or invalid API key",
    404: "no such task for this tenant",
    409: "the task has ended and can no longer change, or the change does not fit the task "
         "(e.g. cron on an interval task)",
    413: "the body is too large",
    415: "the body is not JSON",
    422: "invalid input; the message names the field",
    429: "over the tenant's rate limit, or its share of this API process's CPU for listing "
         "fires (previews, backfill ranges, calendar checks), or a rotation of its secret got no turn; see "
         "Retry-After",
    503: "Temporal or the database is unavailable",
    504: "a change was sent but its outcome is unknown; read the task",
})


IdempotencyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="retries with the same key and body return the same task (200)",
    ),
]
OperationKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="a retry with the same key and body acts once and gets the first answer; "
        "the key is the tenant's own",
    ),
]
KEY_REUSED = "invalid input, or the Idempotency-Key was used with another request; the message names the field"
OPERATION_RESPONSES = {**ERRORS, **problem_responses({422: KEY_REUSED})}
