"""Fixtures of the outbound tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.outbound.hostile_target import HostileTarget


@pytest.fixture
async def hostile() -> AsyncIterator[HostileTarget]:
    """A local HTTP target that answers as its path says (tests/outbound/hostile_target.py)."""
    server = HostileTarget()
    await server.start()
    yield server
    await server.stop()
