"""Reading docker-compose.yml the way `docker compose config` does: YAML, then variables
interpolated from the deployer's .env."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.deploy.dockerfile import REPO

COMPOSE = REPO / "docker-compose.yml"

# What a deployer puts in .env: the secrets the file refuses to start without.
DOTENV = {"POSTGRES_PASSWORD": "pg-secret-for-test", "SCHEDULER_DB_PASSWORD": "app-secret-for-test",
          "SCHEDULER_METRICS_TOKEN": "metrics-token-for-test",
          "SCHEDULER_SIGNING_KEY": "c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q="}

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, ${VAR:+alt}, $VAR, $$
VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(Exception):
    """A ${VAR:?message} whose variable is unset, as `docker compose` would refuse it."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose-style variable interpolation over every string value of a loaded file."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        current = env.get(name)
        missing = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-"):
            return arg if missing else str(current)
        if op in (":?", "?"):
            if missing:
                raise MissingVariable(f"{name}: {arg}")
            return str(current)
        if op in (":+", "+"):
            return "" if missing else arg
        return current or ""

    return VARIABLE.sub(substitute, value)


def load_compose() -> dict[str, Any]:
    """docker-compose.yml as YAML (anchors and merge keys resolved), before interpolation."""
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded
