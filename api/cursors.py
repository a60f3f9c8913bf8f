"""Page cursors as the API documents them: the query parameter and the response field, with
the store's pattern (store/cursors.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import Field

from store.cursors import PATTERN

DESCRIPTION = "the next_cursor of the previous page"

CursorQuery = Annotated[str | None, Query(pattern=PATTERN, description=DESCRIPTION,
                                          examples=["1763453560123456.5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4"])]
NextCursor = Annotated[str | None, Field(
    pattern=PATTERN, description="pass as ?cursor= for the next page; null on the last page"
)]
