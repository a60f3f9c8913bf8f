"""deploy/k8s: the manifests parse, are valid Kubernetes objects, and are wired together:
a KEDA ScaledObject scales each worker Deployment on the task queue its workers poll."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from tests.deploy.settings_env import settings_from, unknown_settings
from tests.deploy.shell import run_sh
from workflows import attributes

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
EXAMPLE_ONLY = {"secret.example.yaml"}

# The temporal trigger's metadata keys, from KEDA's scaler docs (2.17 to 2.22); KEDA reads
# only these, so anything else is a typo that would silently fall back to a default.
KEDA_TEMPORAL_KEYS = {
    "endpoint", "endpointFromEnv", "namespace", "activationTargetQueueSize", "targetQueueSize",
    "taskQueue", "queueTypes", "buildId", "selectAllActive", "selectUnversioned",
    "workerDeploymentName", "workerDeploymentBuildId", "includeRunningWorkflowCount",
    "workflowTaskQueueForCount", "apiKeyFromEnv", "minConnectTimeout", "unsafeSsl",
    "tlsServerName", "enableTLS",
}


def load_all() -> dict[str, list[dict[str, Any]]]:
    """Every YAML file in deploy/k8s, by file name, as its list of documents."""
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        for path in sorted(K8S.glob("*.yaml"))
    }


@pytest.fixture(scope="module")
def files() -> dict[str, list[dict[str, Any]]]:
    return load_all()


@pytest.fixture(scope="module")
def objects(files: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects `kubectl apply -k` would create, by (kind, name)."""
    listed = files["kustomization.yaml"][0]["resources"]
    return {
        (doc["kind"], doc["metadata"]["name"]): doc
        for name in listed for doc in files[name]
    }


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container_env(obj: dict[str, Any], objects: dict[tuple[str, str], dict[str, Any]],
                  secret: dict[str, str]) -> dict[str, str]:
    """The environment of a workload's single container: envFrom sources, then env."""
    (container,) = pod_spec(obj)["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(objects[("ConfigMap", source["configMapRef"]["name"])]["data"])
        else:
            assert source["secretRef"]["name"] == "task-scheduler"
            env.update(secret)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["configMapKeyRef"]
            env[item["name"]] = objects[("ConfigMap", ref["name"])]["data"][ref["key"]]
    return env


@pytest.fixture(scope="module")
def example_secret(files: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    (secret,) = files["secret.example.yaml"]
    return secret["stringData"]  # type: ignore[no-any-return]


def test_every_manifest_parses_with_the_expected_kinds(
    files: dict[str, list[dict[str, Any]]],
) -> None:
    kinds = sorted(doc["kind"] for docs in files.values() for doc in docs)
    assert kinds == sorted([
        "ConfigMap", "Deployment", "Deployment", "Deployment", "Job", "Job", "Kustomization",
        "PodDisruptionBudget", "PodDisruptionBudget", "PodDisruptionBudget",
        "ScaledObject", "ScaledObject", "Secret", "Service",
    ])
    for docs in files.values():
        for doc in docs:
            assert doc["apiVersion"] and (doc["kind"] == "Kustomization" or doc["metadata"]["name"])


def test_kustomization_lists_every_manifest_but_the_secret_example(
    files: dict[str, list[dict[str, Any]]],
) -> None:
    listed = files["kustomization.yaml"][0]["resources"]
    assert sorted(listed) == sorted(set(files) - EXAMPLE_ONLY - {"kustomization.yaml"})


def test_builtin_kinds_are_valid_kubernetes_objects(files: dict[str, list[dict[str, Any]]]) -> None:
    """Strict validation against the Kubernetes OpenAPI schemas: unknown fields fail."""
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    checked = 0
    for docs in files.values():
        for doc in docs:
            if doc["apiVersion"].startswith(("keda.sh/", "kustomize.config.k8s.io/")):
                continue
            for version in ("1.30.0", kv.latest_version()):
                kv.validate(doc, version, strict=True)
            checked += 1
    assert checked == 11


def scaled_deployment(
    objects: dict[tuple[str, str], dict[str, Any]], name: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ScaledObject and the Deployment it scales."""
    scaled = objects[("ScaledObject", name)]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    target = scaled["spec"]["scaleTargetRef"]
    return scaled, objects[(target.get("kind", "Deployment"), target["name"])]


@pytest.mark.parametrize(("name", "role", "queue_suffix", "queue_types"), [
    ("task-scheduler-worker", "workflows", "", {"workflow", "activity"}),
    # job runs have their own queue, <task queue>-jobs, and workers of their own
    ("task-scheduler-jobs-worker", "jobs", "-jobs", {"activity"}),
])
def test_each_scaled_object_scales_its_workers_on_the_queue_they_poll(
    objects: dict[tuple[str, str], dict[str, Any]], example_secret: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, name: str, role: str, queue_suffix: str,
    queue_types: set[str],
) -> None:
    scaled, worker = scaled_deployment(objects, name)
    assert pod_spec(worker)["containers"][0]["args"] == ["worker"]
    env = container_env(worker, objects, example_secret)
    assert settings_from(env, monkeypatch).worker.role == role

    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "temporal"
    assert set(meta) <= KEDA_TEMPORAL_KEYS, set(meta) - KEDA_TEMPORAL_KEYS
    assert all(isinstance(v, str) for v in meta.values()), "KEDA trigger metadata is string-only"
    assert meta["taskQueue"] == env["SCHEDULER_TEMPORAL_TASK_QUEUE"] + queue_suffix
    assert meta["namespace"] == env["SCHEDULER_TEMPORAL_NAMESPACE"]
    endpoint = env[meta["endpointFromEnv"]] if "endpointFromEnv" in meta else meta["endpoint"]
    assert endpoint == env["SCHEDULER_TEMPORAL_ADDRESS"]
    assert set(meta["queueTypes"].split(",")) == queue_types
    assert int(meta["targetQueueSize"]) > 0

    # timers fire and runs are dispatched to workers already polling: never scale to zero
    assert 2 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]
    assert "replicas" not in worker["spec"], "the ScaledObject owns the worker replica count"


def test_the_two_worker_deployments_select_only_their_own_pods(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    workflows = objects[("Deployment", "task-scheduler-worker")]
    jobs = objects[("Deployment", "task-scheduler-jobs-worker")]
    for one, other in ((workflows, jobs), (jobs, workflows)):
        selector = one["spec"]["selector"]["matchLabels"]
        assert selector.items() <= one["spec"]["template"]["metadata"]["labels"].items()
        assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()


def test_api_deployment_probes_and_service(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    api = objects[("Deployment", "task-scheduler-api")]
    (container,) = pod_spec(api)["containers"]
    assert container["args"] == ["api"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["spec"]["replicas"] >= 2

    service = objects[("Service", "task-scheduler-api")]
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert api["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports
    assert dict(e for e in (
        (i["name"], i.get("value")) for i in container["env"]
    ))["SCHEDULER_API_PORT"] == str(ports[port["targetPort"]])


def test_pod_disruption_budgets_select_real_pods(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    workloads = [o for (kind, _), o in objects.items() if kind == "Deployment"]
    for (kind, name), pdb in objects.items():
        if kind == "PodDisruptionBudget":
            selector = pdb["spec"]["selector"]["matchLabels"]
            assert any(
                selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
                for w in workloads
            ), name


@pytest.mark.parametrize("workload", [
    ("Deployment", "task-scheduler-api"), ("Deployment", "task-scheduler-worker"),
    ("Deployment", "task-scheduler-jobs-worker"),
    ("Job", "task-scheduler-migrate"), ("Job", "task-scheduler-temporal-setup"),
])
def test_pods_run_non_root_with_pinned_images(
    objects: dict[tuple[str, str], dict[str, Any]], workload: tuple[str, str],
) -> None:
    spec = pod_spec(objects[workload])
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] != 0
    assert spec.get("automountServiceAccountToken") is False
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"]["drop"] == ["ALL"]
        image = container["image"]
        assert re.search(r":\d+\.\d+\.\d+$", image) and not image.endswith(":latest"), image
        assert "memory" in container["resources"]["limits"]


@pytest.mark.parametrize("workload", [
    ("Deployment", "task-scheduler-api"), ("Deployment", "task-scheduler-worker"),
    ("Deployment", "task-scheduler-jobs-worker"), ("Job", "task-scheduler-migrate"),
])
def test_app_pods_get_settings_the_app_reads(
    objects: dict[tuple[str, str], dict[str, Any]], example_secret: dict[str, str],
    workload: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = container_env(objects[workload], objects, example_secret)
    assert not unknown_settings(env), unknown_settings(env)
    settings = settings_from(env, monkeypatch)
    assert settings.env == "production" and settings.database.auto_migrate is False
    assert settings.resolved_database_url.startswith("postgresql://")
    assert settings.temporal.address.endswith(":7233")


def test_the_api_replicas_share_the_documented_rate_limits(
    objects: dict[tuple[str, str], dict[str, Any]], example_secret: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Counted per replica in memory: the replicas together give each tenant the defaults.
    api = objects[("Deployment", "task-scheduler-api")]
    settings = settings_from(container_env(api, objects, example_secret), monkeypatch)
    limits = settings.rate_limit
    assert limits.storage == "memory://"
    defaults = type(limits)()
    for name in ("writes", "reads", "auth_failures"):
        mine, default = getattr(limits, name), getattr(defaults, name)
        per, unit = mine.split("/")
        assert f"{int(per) * api['spec']['replicas']}/{unit}" == default, name


def test_the_secret_example_holds_no_real_values(example_secret: dict[str, str]) -> None:
    assert set(example_secret) == {"SCHEDULER_DATABASE_URL", "SCHEDULER_METRICS_TOKEN",
                                   "SCHEDULER_SIGNING_KEY"}
    assert example_secret["SCHEDULER_METRICS_TOKEN"] == example_secret["SCHEDULER_SIGNING_KEY"] == "CHANGE-ME"
    assert ":CHANGE-ME@" in example_secret["SCHEDULER_DATABASE_URL"]
    assert ".example." in example_secret["SCHEDULER_DATABASE_URL"]


async def test_temporal_setup_job_registers_our_search_attributes(
    objects: dict[tuple[str, str], dict[str, Any]], dev_env: WorkflowEnvironment,
) -> None:
    """Run the Job's own shell script against a local server and list what it registered."""
    (container,) = pod_spec(objects[("Job", "task-scheduler-temporal-setup")])["containers"]
    shell, flags, script = container["command"]
    assert shell == "/bin/sh"
    namespace = f"job-{uuid.uuid4().hex[:8]}"
    env = {"TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
           "TEMPORAL_NAMESPACE": namespace}
    await run_sh([flags, script], env, timeout=120)

    listed = await dev_env.client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    registered = {
        name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_")
        for name, kind in listed.custom_attributes.items()
    }
    assert registered == {name: kind.upper() for name, kind in attributes.DEFINITIONS.items()}
