"""Page cursors as clients see them: ``<microseconds since the epoch>.<row id>``, pointing after
the last row of a page. Any string of that shape is a valid cursor, so the pattern in the
OpenAPI document is the whole rule; the store keeps its own encoding behind it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Query
from pydantic import Field

from store.tasks import decode_cursor, encode_cursor

# 16 digits reach the year 2286; row ids are task ids and execution ids.
PATTERN = r"^[0-9]{1,16}\.[0-9A-Za-z:._-]{1,200}$"
DESCRIPTION = "the next_cursor of the previous page"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(PATTERN)

CursorQuery = Annotated[str | None, Query(pattern=PATTERN, description=DESCRIPTION,
                                          examples=["1763453560123456.5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4"])]
NextCursor = Annotated[str | None, Field(
    pattern=PATTERN, description="pass as ?cursor= for the next page; null on the last page"
)]


def stored_cursor(cursor: str | None) -> str | None:
    """The store's cursor for a client's cursor (raises ValueError when it is malformed)."""
    if cursor is None:
        return None
    if not _CURSOR.fullmatch(cursor):
        raise ValueError("cursor is not one this API returned")
    micros, row_id = cursor.split(".", 1)
    return encode_cursor(EPOCH + timedelta(microseconds=int(micros)), row_id)


def public_cursor(stored: str | None) -> str | None:
    """The client's cursor for a cursor of the store."""
    if stored is None:
        return None
    moment, row_id = decode_cursor(stored)
    return f"{(moment - EPOCH) // timedelta(microseconds=1)}.{row_id}"
