"""The bounds of what a task may hold, each defined once: text every database stores, numbers and
instants whose arithmetic cannot overflow, JSON of a bounded depth, headers an HTTP client sends.

The API's request models and the task spec use these types; docs/operations.md lists them."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints

from config.settings import OVERDUE_AFTER_MAX_SECONDS, OVERDUE_AFTER_MIN_SECONDS

# PostgreSQL refuses NUL in text and JSON; a lone surrogate cannot be encoded as UTF-8 at all
# (pydantic refuses those in every str field, the pattern the NUL).
TEXT_PATTERN = r"^[^\x00]*$"
TEXT_MESSAGE = "must not contain the NUL character (\\u0000)"
Text = Annotated[str, StringConstraints(pattern=TEXT_PATTERN)]

# Instants: far enough from datetime's year 1 and 9999 that an instant plus jitter, a lead, an
# interval or a window never overflows, in any UTC offset.
EARLIEST_INSTANT = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
INSTANT_RANGE = "between 2000-01-01T00:00:00Z and 2999-12-31T23:59:59Z"

MAX_INTERVAL_SECONDS = 366 * 24 * 3600
MAX_RUN_SECONDS = 7 * 86400
# Windows and thresholds compared with a time span: a decade is longer than any schedule keeps.
MAX_WINDOW_SECONDS = 10 * 366 * 24 * 3600
MAX_RUNS = 1_000_000_000
MAX_JSON_DEPTH = 32

# A duration (a timeout, a retry interval, a cool-down). One Temporal is handed goes as whole
# microseconds: under half of one it reaches Temporal as 0, its default or none at all, so a
# new one is at least MIN_DURATION_SECONDS (``spec.check_durations``; a stored one still loads).
MIN_DURATION_SECONDS = 0.000001
def _new_duration(schema: dict[str, Any]) -> None:
    """The schema shows the bound of a new value (the model also reads a stored one above 0)."""
    schema.pop("exclusiveMinimum", None)
    schema["minimum"] = MIN_DURATION_SECONDS


Duration = Annotated[float, Field(strict=True, gt=0, json_schema_extra=_new_duration)]

CatchupWindowSeconds = Annotated[float, Field(strict=True, gt=0, le=MAX_WINDOW_SECONDS)]
DriftThresholdSeconds = Annotated[float, Field(strict=True, gt=0, le=MAX_WINDOW_SECONDS)]
JitterSeconds = Annotated[float, Field(strict=True, ge=0, le=3600)]
HeartbeatTimeoutSeconds = Annotated[float, Field(strict=True, ge=1, le=3600)]
RunTimeoutSeconds = Annotated[float, Field(strict=True, gt=0, le=MAX_RUN_SECONDS)]
OverdueAfterSeconds = Annotated[float, Field(strict=True, ge=OVERDUE_AFTER_MIN_SECONDS,
                                             le=OVERDUE_AFTER_MAX_SECONDS)]


def count_not_text(value: Any) -> Any:
    """A count comes as a JSON number (3 or 3.0), never as a string or a boolean."""
    if isinstance(value, str | bool):
        raise ValueError("must be a number")
    return value


# A count carries its own check, so every model that takes the field checks it the same way
# (after its bounds: the check then wraps the bounded integer, which the schema shows).
NOT_TEXT = BeforeValidator(count_not_text)
Count = Annotated[int, NOT_TEXT]
MaxCatchupRuns = Annotated[int, Field(ge=1, le=10_000), NOT_TEXT]
MaxConsecutiveFailures = Annotated[int, Field(ge=1, le=1000), NOT_TEXT]
MaxRuns = Annotated[int, Field(ge=1, le=MAX_RUNS, description="stop after this many runs"), NOT_TEXT]


def in_range(value: datetime) -> datetime:
    """The instant, if it lies in the range every instant of a task must (raises ValueError)."""
    # A naive instant is refused with its own message by the spec; it cannot be compared here.
    if value.tzinfo is not None and not EARLIEST_INSTANT <= value <= LATEST_INSTANT:
        raise ValueError(f"must be {INSTANT_RANGE}")
    return value


def _storable_json(value: Any) -> Any:
    # Iterative: a value nested too deep is refused without recursing into it.
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                stack += [(key, depth) for key in item]
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
        elif isinstance(item, str) and "\x00" in item:
            raise ValueError(TEXT_MESSAGE)
        elif isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                raise ValueError("must be valid Unicode text (no lone surrogate)") from None
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
    return value


JsonValue = Annotated[Any, AfterValidator(_storable_json)]
JSON_DEPTH = f"any JSON, nested at most {MAX_JSON_DEPTH} levels, without NUL characters"

# RFC 9110: a header name is a token; a value is visible ASCII, spaces and tabs (no CR, LF or
# NUL, which would end the header early, and no byte the HTTP client cannot encode), without
# the spaces and tabs around it, which are not part of it (the HTTP client refuses to send
# them): they are taken off, also from a value stored before.
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$"
HEADER_VALUE_PATTERN = r"^[\t\x20-\x7e]{0,8192}$"
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]


def _trimmed(value: str) -> str:
    return value.strip(" \t")


HeaderValue = Annotated[str, StringConstraints(pattern=HEADER_VALUE_PATTERN), AfterValidator(_trimmed)]
PATTERN_MESSAGES = {
    TEXT_PATTERN: TEXT_MESSAGE,
    HEADER_NAME_PATTERN: "a header name is 1 to 256 token characters (letters, digits, !#$%&'*+-.^_`|~)",
    HEADER_VALUE_PATTERN: "a header value is printable ASCII, spaces and tabs (no CR, LF or NUL)",
}
