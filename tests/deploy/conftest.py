"""The compose file as the deployment tests read it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.compose_file import DOTENV, interpolate, load_compose


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """docker-compose.yml as YAML (anchors and merge keys resolved), before interpolation."""
    return load_compose()


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    """docker-compose.yml as `docker compose config` sees it with a filled-in .env."""
    return interpolate(raw, dict(DOTENV))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]
