"""docker-compose.yml: services, start order, secrets, images and server settings.

No Docker engine runs here, so the compose file is checked the way `docker compose config`
would: variables interpolated, then validated against the Compose Specification's JSON schema.
`compose-spec.json` beside this file is that schema, vendored unchanged from the PyPI package
check-jsonschema 0.39.0 (check_jsonschema/builtin_schemas/vendor/compose-spec.json,
sha256 d549057e...0e64; Apache-2.0, see compose-spec.LICENSE). The scripts its one-shot
services run are in test_setup_scripts.py, the image in test_dockerfile.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from config.settings import Settings
from tests.deploy.compose_file import COMPOSE, DOTENV, VARIABLE, MissingVariable, interpolate
from tests.deploy.dockerfile import REPO, dockerfile_user
from tests.deploy.settings_env import settings_from, unknown_settings
from worker.dev import FAIRNESS_FLAGS, SERVER_CACHE_FLAGS, dev_server_command

SCHEMA = Path(__file__).with_name("compose-spec.json")

EXPECTED_SERVICES = {
    "postgresql", "temporal-schema", "temporal", "temporal-setup", "temporal-ui",
    "migrate", "api", "worker", "jobs-worker",
}
OUR_SERVICES = {"migrate", "api", "worker", "jobs-worker"}
APP_SERVICES = {"api", "worker", "jobs-worker"}


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
    used = {m["braced"] or m["bare"] for m in VARIABLE.finditer(COMPOSE.read_text())} - {None}
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
        roles[name] = settings_from(env, monkeypatch).worker.role
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


def test_the_compose_server_is_configured_like_the_embedded_one() -> None:
    # The default history cache refused the completions of a herd of 10,000 (their jobs ran
    # again): the embedded dev server and the compose server both raise it, to the same values;
    # and both hand out backlogs by tenant (fairness).
    flags = [*SERVER_CACHE_FLAGS, *FAIRNESS_FLAGS]
    embedded = dict(flag.split("=", 1) for flag in flags if flag != "--dynamic-config-value")
    assert set(embedded) == {"history.hostLevelCacheMaxSize", "history.hostLevelCacheMaxSizeBytes",
                             "matching.enableFairness"}
    command = dev_server_command(Settings())
    for key, value in embedded.items():
        assert f"{key}={value}" in command
    config = yaml.safe_load(
        (REPO / "deploy/temporal/dynamicconfig/task-scheduler.yaml").read_text()
    )
    assert {key: str(config[key][0]["value"]).lower() for key in embedded} == embedded


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

    host, _, port = settings.temporal.address.partition(":")
    assert host == "temporal" and host in services
    assert f"{port}:{port}" in " ".join(services["temporal"]["ports"])

    url = urlsplit(settings.resolved_database_url)
    pg = services["postgresql"]["environment"]
    assert url.scheme == "postgresql" and url.hostname == "postgresql" and url.port == 5432
    assert url.username == pg["SCHEDULER_DB_USER"] and url.password == pg["SCHEDULER_DB_PASSWORD"]
    assert url.path == f"/{pg['SCHEDULER_DB_NAME']}"
    assert settings.database.auto_migrate is False, "replicas must not race to migrate; `migrate` does it"


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
