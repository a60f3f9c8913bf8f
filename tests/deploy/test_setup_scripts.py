"""The scripts the compose file's one-shot services run, executed for real against a local
Temporal dev server and PostgreSQL."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import text
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine
from tests.deploy.dockerfile import REPO
from tests.deploy.shell import run_sh
from workflows import attributes


def entrypoint_script(service: dict[str, Any]) -> Path:
    """The repo file that a service's `/bin/sh /scripts/X.sh` entrypoint runs."""
    entry = service["entrypoint"]
    assert entry[0] == "/bin/sh"
    mounts: dict[str, str] = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
    return REPO / mounts[entry[1]]


async def test_temporal_setup_creates_the_namespace_and_registers_our_search_attributes(
    services: dict[str, dict[str, Any]], dev_env: WorkflowEnvironment,
) -> None:
    script = entrypoint_script(services["temporal-setup"])
    namespace = f"setup-{uuid.uuid4().hex[:8]}"
    env = {
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": namespace,
        "TEMPORAL_SETUP_DELAY_SECONDS": "0.5",
    }
    await run_sh([str(script)], env)
    second = await run_sh([str(script)], env)  # re-running is harmless
    assert f"namespace {namespace} exists" in second

    listed = await dev_env.client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    registered = {
        name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_")
        for name, kind in listed.custom_attributes.items()
    }
    expected = {name: kind.upper() for name, kind in attributes.DEFINITIONS.items()}
    assert registered == expected


def test_postgres_init_gives_the_app_its_own_role_and_database(
    services: dict[str, dict[str, Any]], postgres_url: str,
) -> None:
    mount = next(v for v in services["postgresql"]["volumes"] if "docker-entrypoint-initdb.d" in v)
    script = REPO / mount.split(":")[0]
    server = urlsplit(postgres_url)
    role, database = f"app_{uuid.uuid4().hex[:8]}", f"appdb_{uuid.uuid4().hex[:8]}"
    env = {
        "PGHOST": server.hostname or "", "PGPORT": str(server.port),
        "POSTGRES_USER": server.username or "",
        "SCHEDULER_DB_USER": role, "SCHEDULER_DB_NAME": database,
        "SCHEDULER_DB_PASSWORD": "it's a \"quoted\"; DROP ROLE x; --",
    }
    result = subprocess.run(
        ["sh", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr

    admin = make_engine(postgres_url)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            owner = conn.execute(
                text("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :d"),
                {"d": database},
            ).scalar_one()
            login, superuser, has_password = conn.execute(
                text("SELECT rolcanlogin, rolsuper, rolpassword IS NOT NULL FROM pg_authid"
                     " WHERE rolname = :r"), {"r": role},
            ).one()
            assert (owner, login, superuser, has_password) == (role, True, False, True)
            conn.execute(text(f'DROP DATABASE "{database}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
    finally:
        admin.dispose()
