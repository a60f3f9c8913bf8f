"""Which SCHEDULER_* variables the app reads, and the Settings a deployed process would build."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from config.settings import Settings, setting_fields

# Variables the deployment may set before Settings reads them (none today). Keep it empty
# unless a field is on its way, so a typo cannot hide behind it.
AWAITED_SETTINGS: set[str] = set()


def unknown_settings(env: Mapping[str, str]) -> set[str]:
    """SCHEDULER_* names in env that Settings does not read (it ignores unknown ones silently)."""
    known = {env for _, env, _ in setting_fields()}
    return {k for k in env if k.startswith("SCHEDULER_")} - known - AWAITED_SETTINGS


def settings_from(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The Settings a process would build from exactly these SCHEDULER_* variables."""
    for name in list(os.environ):
        if name.startswith("SCHEDULER_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("SCHEDULER_") and name not in AWAITED_SETTINGS:
            monkeypatch.setenv(name, value)
    return Settings()
