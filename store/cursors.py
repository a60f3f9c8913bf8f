"""Page cursors: ``<microseconds since the epoch>.<row id>``, pointing after the last row of a
page (newest first). Any string of that shape is a valid cursor, so ``PATTERN`` is the whole
rule, and the API documents it as it is."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

# 16 digits reach the year 2286; row ids are task ids and execution ids.
PATTERN = r"^[0-9]{1,16}\.[0-9A-Za-z:._-]{1,200}$"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(PATTERN)


def encode_cursor(moment: datetime, row_id: str) -> str:
    """The cursor pointing after the row of this time and id."""
    return f"{(moment - EPOCH) // timedelta(microseconds=1)}.{row_id}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (time, id) a cursor points after; ValueError when it is malformed."""
    if not _CURSOR.fullmatch(cursor):
        raise ValueError("cursor is not one this API returned")
    micros, row_id = cursor.split(".", 1)
    return EPOCH + timedelta(microseconds=int(micros)), row_id
