"""A page cursor names the row a page ended on, and nothing else passes for one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from store.cursors import decode_cursor, encode_cursor


def test_a_cursor_points_after_the_row_it_was_made_from() -> None:
    moment = datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)
    cursor = encode_cursor(moment, "a1:2026-12-01T09:00:00.000Z")
    assert cursor == "1796115600123456.a1:2026-12-01T09:00:00.000Z"
    assert decode_cursor(cursor) == (moment, "a1:2026-12-01T09:00:00.000Z")


@pytest.mark.parametrize("cursor", ["", "abc", "12.", ".row", "-1.row", "1.row id", "1.row/x"])
def test_a_malformed_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(ValueError, match="cursor is not one this API returned"):
        decode_cursor(cursor)
