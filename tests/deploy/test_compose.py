"""docker-compose.yml, the Dockerfile and the scripts they run.

No Docker engine runs here, so the compose file is checked the way `docker compose config`
would: variables interpolated, then validated against the Compose Specification's JSON schema.
`compose-spec.json` beside this file is that schema, vendored unchanged from the PyPI package
check-jsonschema 0.39.0 (check_jsonschema/builtin_schemas/vendor/compose-spec.json,
sha256 d549057e...0e64; Apache-2.0, see compose-spec.LICENSE). The scripts the one-shot
services run are executed for real against a local Temporal dev server and PostgreSQL.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from sqlalchemy import text
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine
from tests.deploy.settings_env import settings_from, unknown_settings
from tests.deploy.shell import run_sh
from worker.dev import SERVER_CACHE_FLAGS, dev_server_command
from worker.settings import Settings
from workflows import attributes

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SCHEMA = Path(__file__).with_name("compose-spec.json")

# What a deployer puts in .env: the two secrets the file refuses to start without.
DOTENV = {"POSTGRES_PASSWORD": "pg-secret-for-test", "SCHEDULER_DB_PASSWORD": "app-secret-for-test"}

EXPECTED_SERVICES = {
    "postgresql", "temporal-schema", "temporal", "temporal-setup", "temporal-ui",
    "migrate", "api", "worker", "jobs-worker",
}
OUR_SERVICES = {"migrate", "api", "worker", "jobs-worker"}
APP_SERVICES = {"api", "worker", "jobs-worker"}

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, ${VAR:+alt}, $VAR, $$
_VARIABLE = re.compile(
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

    return _VARIABLE.sub(substitute, value)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """docker-compose.yml as YAML (anchors and merge keys resolved), before interpolation."""
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    """docker-compose.yml as `docker compose config` sees it with a filled-in .env."""
    return interpolate(raw, dict(DOTENV))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def one_shot_services(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services that others wait for to *finish* (service_completed_successfully)."""
    return {
        name
        for spec in services.values()
        for name, dep in (spec.get("depends_on") or {}).items()
        if dep.get("condition") == "service_completed_successfully"
    }


# --- the file is valid Compose ----------------------------------------------------------------


def test_compose_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_check_rejects_a_misspelt_key(compose: dict[str, Any]) -> None:
    """Guard against a schema that accepts anything: a typo in a service must fail."""
    broken = json.loads(json.dumps(compose))
    broken["services"]["api"]["helthcheck"] = broken["services"]["api"].pop("healthcheck")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert any("helthcheck" in error.message for error in validator.iter_errors(broken))


def test_secrets_are_required_from_the_environment_and_never_written_in_the_file(
    raw: dict[str, Any],
) -> None:
    for secret in DOTENV:
        env = {k: v for k, v in DOTENV.items() if k != secret}
        with pytest.raises(MissingVariable, match=secret):
            interpolate(raw, env)
    for name, spec in raw["services"].items():
        for key, value in (spec.get("environment") or {}).items():
            if re.search(r"PASSWORD|PWD", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", str(value)), (name, key, value)
    url = raw["services"]["api"]["environment"]["SCHEDULER_DATABASE_URL"]
    user, password = r"(\$\{[^}]+\}|[^:@/]+)", r"\$\{SCHEDULER_DB_PASSWORD:\?[^}]+\}"
    assert re.fullmatch(rf"postgresql://{user}:{password}@.+", url), url
    assert not any(secret in COMPOSE.read_text() for secret in DOTENV.values())


def test_every_variable_the_file_reads_is_in_the_env_example() -> None:
    used = {m["braced"] or m["bare"] for m in _VARIABLE.finditer(COMPOSE.read_text())} - {None}
    example = (REPO / "deploy" / "compose.env.example").read_text()
    documented = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    assert used == documented, (used - documented, documented - used)


def test_every_service_the_stack_needs_exists(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) >= EXPECTED_SERVICES, EXPECTED_SERVICES - set(services)


def test_depends_on_points_at_real_services_with_conditions_and_has_no_cycle(
    services: dict[str, dict[str, Any]],
) -> None:
    valid = {"service_started", "service_healthy", "service_completed_successfully"}
    graph: dict[str, set[str]] = {}
    for name, spec in services.items():
        deps = spec.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on must use the long form with conditions"
        for dep, how in deps.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert how.get("condition") in valid, (name, dep, how)
            if how["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy"
        graph[name] = set(deps)
    done: set[str] = set()
    while graph.keys() - done:
        ready = {n for n in graph.keys() - done if graph[n] <= done}
        assert ready, f"dependency cycle among {sorted(graph.keys() - done)}"
        done |= ready


def test_start_order_schema_then_server_then_setup_then_app(
    services: dict[str, dict[str, Any]],
) -> None:
    def condition(service: str, dep: str) -> str:
        return str(services[service]["depends_on"][dep]["condition"])

    assert condition("temporal-schema", "postgresql") == "service_healthy"
    assert condition("temporal", "temporal-schema") == "service_completed_successfully"
    assert condition("temporal-setup", "temporal") == "service_healthy"
    assert condition("temporal-ui", "temporal") == "service_healthy"
    assert condition("migrate", "postgresql") == "service_healthy"
    for app in APP_SERVICES:
        # search attributes must exist before the first workflow start sets them
        assert condition(app, "temporal-setup") == "service_completed_successfully"
        assert condition(app, "migrate") == "service_completed_successfully"


def test_long_running_services_have_healthchecks_and_one_shots_do_not_restart_forever(
    services: dict[str, dict[str, Any]],
) -> None:
    one_shots = one_shot_services(services)
    assert one_shots == {"temporal-schema", "temporal-setup", "migrate"}
    for name, spec in services.items():
        if name in one_shots:
            assert spec.get("restart", "no").startswith(("no", "on-failure")), name
            continue
        check = spec.get("healthcheck")
        assert check and not check.get("disable") and check.get("test"), f"{name}: no healthcheck"
        assert spec.get("restart") in {"always", "unless-stopped"}, name


def test_api_healthcheck_probes_readiness(services: dict[str, dict[str, Any]]) -> None:
    probe = " ".join(services["api"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/readyz" in probe


@pytest.mark.parametrize("service", ["worker", "jobs-worker"])
def test_workers_run_two_replicas_without_fixed_names_or_host_ports(
    services: dict[str, dict[str, Any]], service: str,
) -> None:
    worker = services[service]
    assert worker["deploy"]["replicas"] == 2
    assert "container_name" not in worker and "ports" not in worker
    assert "replicas" not in services["api"].get("deploy", {})


def test_the_workflows_and_the_job_runs_have_worker_services_of_their_own(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    roles = {}
    for name in ("worker", "jobs-worker"):
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        roles[name] = settings_from(env, monkeypatch).worker_role
        # each container serves its metrics where its healthcheck looks
        port = env["SCHEDULER_WORKER_METRICS_PORT"]
        assert f"127.0.0.1:{port}/metrics" in " ".join(services[name]["healthcheck"]["test"])
    assert roles == {"worker": "workflows", "jobs-worker": "jobs"}


def test_images_are_pinned(services: dict[str, dict[str, Any]]) -> None:
    for name, spec in services.items():
        image = spec.get("image")
        assert image, f"{name} has no image (ours need one too, to share the build)"
        assert "@sha256:" in image or re.search(r":[^/:]*\d+\.\d+[^/:]*$", image), (
            f"{name}: {image} is not pinned to a version"
        )
        assert not image.endswith(":latest"), f"{name}: {image}"


def test_temporal_server_and_admin_tools_versions_match(
    services: dict[str, dict[str, Any]],
) -> None:
    server = services["temporal"]["image"]
    assert server.startswith("temporalio/server:")
    version = server.split(":", 1)[1]
    for tool in ("temporal-schema", "temporal-setup"):
        assert services[tool]["image"] == f"temporalio/admin-tools:{version}"


def test_temporal_persists_in_the_compose_postgresql(services: dict[str, dict[str, Any]]) -> None:
    server = services["temporal"]["environment"]
    postgres = services["postgresql"]["environment"]
    assert server["DB"] == "postgres12" and server["POSTGRES_SEEDS"] == "postgresql"
    assert server["POSTGRES_USER"] == postgres["POSTGRES_USER"]
    assert server["POSTGRES_PWD"] == postgres["POSTGRES_PASSWORD"] == DOTENV["POSTGRES_PASSWORD"]
    schema = services["temporal-schema"]["environment"]
    assert schema["POSTGRES_SEEDS"] == "postgresql"
    assert schema["SQL_PASSWORD"] == server["POSTGRES_PWD"]


def test_dynamic_config_is_mounted_where_the_server_reads_it(
    services: dict[str, dict[str, Any]],
) -> None:
    server = services["temporal"]
    path = Path(server["environment"]["DYNAMIC_CONFIG_FILE_PATH"])
    host_dir, container_dir = next(
        (v.split(":")[0], v.split(":")[1]) for v in server["volumes"]
        if path.is_relative_to(v.split(":")[1])
    )
    local = REPO / host_dir / path.relative_to(container_dir)
    config = yaml.safe_load(local.read_text())
    for key, entries in config.items():
        assert all(set(entry) == {"value", "constraints"} for entry in entries), key


def test_the_compose_server_cache_is_sized_for_herds_like_the_embedded_one() -> None:
    # The default history cache refused the completions of a herd of 10,000 (their jobs ran
    # again): the embedded dev server and the compose server both raise it, to the same values.
    embedded = dict(
        flag.split("=", 1) for flag in SERVER_CACHE_FLAGS if flag != "--dynamic-config-value"
    )
    assert set(embedded) == {"history.hostLevelCacheMaxSize", "history.hostLevelCacheMaxSizeBytes"}
    command = dev_server_command(Settings())
    for key, value in embedded.items():
        assert f"{key}={value}" in command
    config = yaml.safe_load(
        (REPO / "deploy/temporal/dynamicconfig/task-scheduler.yaml").read_text()
    )
    assert {key: str(config[key][0]["value"]) for key in embedded} == embedded


def test_every_bind_mount_exists_in_the_repo(services: dict[str, dict[str, Any]]) -> None:
    for name, spec in services.items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"


# --- our services are wired to the right places ------------------------------------------------


@pytest.mark.parametrize("service", sorted(OUR_SERVICES))
def test_our_services_reach_temporal_and_postgresql_by_service_name(
    services: dict[str, dict[str, Any]], service: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {k: str(v) for k, v in services[service]["environment"].items()}
    assert not unknown_settings(env), f"{service}: Settings ignores {unknown_settings(env)}"
    settings = settings_from(env, monkeypatch)
    assert settings.env == "production" and settings.resolved_log_format == "json"

    host, _, port = settings.temporal_address.partition(":")
    assert host == "temporal" and host in services
    assert f"{port}:{port}" in " ".join(services["temporal"]["ports"])

    url = urlsplit(settings.resolved_database_url)
    pg = services["postgresql"]["environment"]
    assert url.scheme == "postgresql" and url.hostname == "postgresql" and url.port == 5432
    assert url.username == pg["SCHEDULER_DB_USER"] and url.password == pg["SCHEDULER_DB_PASSWORD"]
    assert url.path == f"/{pg['SCHEDULER_DB_NAME']}"
    assert settings.auto_migrate is False, "replicas must not race to migrate; `migrate` does it"


def test_our_services_run_our_image_as_non_root_on_a_read_only_root(
    services: dict[str, dict[str, Any]],
) -> None:
    images = {services[name]["image"] for name in OUR_SERVICES}
    assert len(images) == 1
    for name in OUR_SERVICES:
        spec = services[name]
        assert spec["build"]["context"] == "." and spec["build"]["dockerfile"] == "Dockerfile"
        uid = str(spec["user"]).split(":")[0]
        assert uid.isdigit() and int(uid) != 0, f"{name} runs as {spec['user']}"
        assert uid == dockerfile_user().split(":")[0]
        assert spec["read_only"] is True and "no-new-privileges:true" in spec["security_opt"]
    assert services["api"]["command"] == ["api"]
    assert services["worker"]["command"] == ["worker"]
    assert services["jobs-worker"]["command"] == ["worker"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["api"]["environment"]["SCHEDULER_API_HOST"] == "0.0.0.0"


# --- the Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    pairs = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def dockerfile_user() -> str:
    """The USER of the final stage."""
    final = dockerfile_instructions()
    last_from = max(i for i, (word, _) in enumerate(final) if word == "FROM")
    users = [args for word, args in final[last_from:] if word == "USER"]
    assert users, "the final stage sets no USER, so it runs as root"
    return users[-1]


def test_dockerfile_final_stage_runs_as_a_numeric_non_root_user() -> None:
    uid = dockerfile_user().split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_dockerfile_uses_a_pinned_python_3_11_slim_base() -> None:
    args = dict(
        a.split("=", 1) for word, a in dockerfile_instructions() if word == "ARG" and "=" in a
    )
    froms = [a.split()[0] for word, a in dockerfile_instructions() if word == "FROM"]
    for base in froms:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image


def test_dockerfile_installs_every_package_and_runs_the_console_script() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    top_level = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    instructions = dockerfile_instructions()
    copied = {shlex.split(a)[0].rstrip("/") for word, a in instructions if word == "COPY"
              if not a.startswith("--")}
    assert top_level | {"pyproject.toml"} <= copied, top_level - copied
    assert ("RUN", "/opt/venv/bin/pip install .") in instructions
    entry = next(json.loads(a) for word, a in instructions if word == "ENTRYPOINT")
    assert entry == ["task-scheduler"] and "task-scheduler" in project["project"]["scripts"]

    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, ".dockerignore should be an allow-list"
    for path in top_level | {"pyproject.toml"}:
        assert f"!{path}/" in ignore or f"!{path}" in ignore, f"{path} is excluded from the context"


def test_the_image_gets_every_data_file_the_packages_read() -> None:
    """`pip install .` copies only .py files unless pyproject declares package data: a template
    missing from the wheel works in the source tree and breaks in the container."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = sorted(setuptools["packages"], key=len, reverse=True)
    declared = setuptools.get("package-data", {})
    missing = []
    for root in {p.split(".")[0] for p in packages}:
        for path in sorted((REPO / root).rglob("*")):
            if not path.is_file() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
                continue
            if path.name == "script.py.mako":  # Alembic's template for new revisions: dev only
                continue
            relative = path.relative_to(REPO)
            package = next(p for p in packages if relative.parts[:len(p.split("."))] == tuple(
                p.split(".")))
            inside = relative.relative_to(*package.split(".")).as_posix()
            patterns = [*declared.get(package, []), *declared.get("*", [])]
            if not any(fnmatch.fnmatch(inside, pattern) for pattern in patterns):
                missing.append(f"{relative} (package {package})")
    assert not missing, "not in the wheel, add [tool.setuptools.package-data]: " + ", ".join(missing)


# --- the scripts the one-shot services run, executed for real --------------------------------


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
