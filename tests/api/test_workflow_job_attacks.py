"""A hostile tenant's workflow jobs, through the API and a real worker: a workflow job starts
only a workflow type and task queue that the deployment allows and the tenant was granted,
never the scheduler's own (even where the settings list them), and its child says who
started it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.payloads import RUN_JOB, JobInput
from config.temporal import jobs_queue
from scheduling.spec import WorkflowJob
from store.engine import make_engine, migrate
from store.keys import create_key
from store.quotas import set_quota
from tests.api.conftest import serve_api
from tests.api.test_e2e import wait_for_status
from tests.conftest import new_worker, settings_of
from workflows.registry import workflow_job_rules
from workflows.state import TaskState

HOSTILE, VICTIM, UNGRANTED, TYPE_ONLY, GRANTED, REVOKED = (
    "tenant-a", "tenant-b", "tenant-n", "tenant-t", "tenant-g", "tenant-r")


@workflow.defn(name="PartnerReport", sandboxed=False)
class PartnerReport:
    @workflow.run
    async def run(self, region: str) -> str:
        return f"report:{region}"


@workflow.defn(name="ForgedRun", sandboxed=False)
class ForgedRun:
    """Calls the job activity with an input that never passed the API; returns its failure type."""

    @workflow.run
    async def run(self, job_input: JobInput, queue: str) -> str:
        try:
            await workflow.execute_activity(
                RUN_JOB, job_input, task_queue=queue, start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError as exc:
            cause = exc.cause
            return f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else repr(cause)
        return "ran"


@dataclass
class Deployment:
    base_url: str
    env: WorkflowEnvironment
    task_queue: str
    partner_queue: str
    keys: dict[str, str]
    engine: Any

    def client(self, tenant: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.keys[tenant]}"})


@pytest.fixture(scope="module")
async def deployment(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployment]:
    """API and worker whose operator listed the scheduler's own type and queues beside a
    partner's (a mistake the rule must survive); tenants granted all, part or none of it."""
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('wfjobs') / 'api.db'}")
    migrate(engine)
    queue = f"wfa-{uuid.uuid4()}"
    partner = f"{queue}-partner"
    allowed: dict[str, Any] = {
        "temporal_task_queue": queue, "workflow_job_types": "PartnerReport,TaskWorkflow",
        "workflow_job_task_queues": f"{partner},{queue},{jobs_queue(queue)}",
    }
    keys = {t: create_key(engine, t)[1] for t in (HOSTILE, VICTIM, UNGRANTED, TYPE_ONLY, GRANTED, REVOKED)}
    set_quota(engine, HOSTILE, workflow_types=["*"], workflow_task_queues=["*"])
    set_quota(engine, TYPE_ONLY, workflow_types=["PartnerReport"])
    for tenant in (GRANTED, REVOKED):
        set_quota(engine, tenant, workflow_types=["PartnerReport"], workflow_task_queues=[partner])
    rules = workflow_job_rules(settings_of(env="test", **allowed))
    async with (
        new_worker(dev_env.client, engine, task_queue=queue, workflow_jobs=rules),
        Worker(dev_env.client, task_queue=partner, workflows=[PartnerReport, ForgedRun]),
        serve_api(dev_env, engine, **allowed) as base_url,
    ):
        yield Deployment(base_url, dev_env, queue, partner, keys, engine)
    engine.dispose()


def forged_task_workflow_args(victim_task_id: str) -> list[dict[str, Any]]:
    """A TaskWorkflow start input naming the victim tenant, as the attacker would send it."""
    return [{
        "task_id": victim_task_id, "tenant_id": VICTIM, "created_at": datetime.now(UTC).isoformat(),
        "spec": {"task_name": "owned", "schedule_type": "interval", "interval_seconds": 1,
                 "job_details": {"type": "http", "url": "http://169.254.169.254/latest/meta-data/"}},
    }]


def workflow_task(job: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"task_name": "report", "schedule_type": "once",
            "run_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
            "job_details": {"type": "workflow", **job}, **fields}


async def refused(api: httpx.AsyncClient, path: str, body: dict[str, Any], field: str) -> str:
    answer = await api.post(path, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["field"] == field, problem
    return str(problem["detail"])


async def no_tasks(deployment: Deployment, *tenants: str) -> None:
    for tenant in tenants:
        async with deployment.client(tenant) as api:
            assert (await api.get("/tasks")).json()["items"] == [], tenant


async def assert_never_started(env: WorkflowEnvironment, workflow_id: str) -> None:
    with pytest.raises(RPCError) as caught:
        await env.client.get_workflow_handle(workflow_id).describe()
    assert caught.value.status == RPCStatusCode.NOT_FOUND


async def test_a_job_cannot_start_the_schedulers_task_workflow(deployment: Deployment) -> None:
    victim_task = uuid.uuid4().hex
    job = {"workflow_type": "TaskWorkflow", "task_queue": deployment.partner_queue,
           "args": forged_task_workflow_args(victim_task)}
    async with deployment.client(HOSTILE) as api:
        detail = await refused(api, "/task/create", workflow_task(job), "job_details.workflow_type")
        assert "scheduler itself" in detail
        # On the scheduler's own queue, where its worker would run it, and as a recurring task.
        for queue in (deployment.task_queue, jobs_queue(deployment.task_queue)):
            await refused(api, "/task/create", workflow_task({**job, "task_queue": queue}),
                          "job_details.workflow_type")
        await refused(api, "/task/recurring", workflow_task(
            job, schedule_type="interval", interval_seconds=60, run_at=None), "job_details.workflow_type")
    await no_tasks(deployment, HOSTILE, VICTIM)
    await assert_never_started(deployment.env, f"task-{victim_task}")


async def test_a_job_cannot_use_the_schedulers_task_queues_or_none(deployment: Deployment) -> None:
    async with deployment.client(HOSTILE) as api:
        for queue in (deployment.task_queue, jobs_queue(deployment.task_queue)):
            detail = await refused(api, "/task/create", workflow_task(
                {"workflow_type": "PartnerReport", "task_queue": queue, "args": ["eu"]}),
                "job_details.task_queue")
            assert "scheduler itself" in detail
        # No default queue: a job that names none would have landed on the scheduler's own.
        detail = await refused(api, "/task/create", workflow_task({"workflow_type": "PartnerReport"}),
                               "job_details.task_queue")
        assert "must name its task queue" in detail
    await no_tasks(deployment, HOSTILE)


async def test_a_tenant_starts_only_what_it_was_granted_and_the_deployment_allows(deployment: Deployment) -> None:
    job = {"workflow_type": "PartnerReport", "task_queue": deployment.partner_queue, "args": ["eu"]}
    async with deployment.client(UNGRANTED) as api:
        detail = await refused(api, "/task/create", workflow_task(job), "job_details.workflow_type")
        assert "this tenant" in detail
    async with deployment.client(TYPE_ONLY) as api:
        detail = await refused(api, "/task/create", workflow_task(job), "job_details.task_queue")
        assert "this tenant" in detail
    async with deployment.client(HOSTILE) as api:  # granted '*': still only what is allowed
        detail = await refused(api, "/task/create", workflow_task({**job, "workflow_type": "Payroll"}),
                               "job_details.workflow_type")
        assert "deployment" in detail
        await refused(api, "/task/create", workflow_task({**job, "task_queue": "payroll"}),
                      "job_details.task_queue")
    await no_tasks(deployment, UNGRANTED, TYPE_ONLY, HOSTILE)


async def test_an_update_cannot_turn_a_task_into_a_forbidden_workflow_job(deployment: Deployment) -> None:
    async with deployment.client(HOSTILE) as api:
        created = await api.post("/task/create", json={
            "task_name": "innocent", "schedule_type": "cron", "cron": "0 10 * * *",
            "job_details": {"type": "handler", "name": "noop"}})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        await wait_for_status(api, task_id, {"PENDING"})
        before = (await api.get(f"/tasks/{task_id}")).json()
        before.pop("updated_at")  # the workflow's own first write may come after this read
        forbidden: list[tuple[dict[str, Any], str]] = [
            ({"workflow_type": "TaskWorkflow", "task_queue": deployment.partner_queue,
              "args": forged_task_workflow_args(uuid.uuid4().hex)}, "job_details.workflow_type"),
            ({"workflow_type": "PartnerReport", "task_queue": deployment.task_queue}, "job_details.task_queue"),
            ({"workflow_type": "PartnerReport"}, "job_details.task_queue"),
        ]
        for job, field in forbidden:
            answer = await api.post("/task/update", json={
                "task_id": task_id, "job_details": {"type": "workflow", **job}})
            assert answer.status_code == 422, answer.text
            assert answer.json()["field"] == field
        after = (await api.get(f"/tasks/{task_id}")).json()
        after.pop("updated_at")
        assert after == before
    state = await deployment.env.client.get_workflow_handle(f"task-{task_id}").query(
        "state", result_type=TaskState)
    assert state.spec.job_details.type == "handler"


async def test_a_job_whose_grant_is_withdrawn_before_its_run_is_refused_by_the_worker(deployment: Deployment) -> None:
    async with deployment.client(REVOKED) as api:
        created = await api.post("/task/create", json=workflow_task(
            {"workflow_type": "PartnerReport", "task_queue": deployment.partner_queue, "args": ["eu"]},
            run_at=(datetime.now(UTC) + timedelta(seconds=4)).isoformat()))
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        set_quota(deployment.engine, REVOKED, workflow_types=None, workflow_task_queues=None)
        final = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"})
        assert final["status"] == "FAILED", final
        [run] = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
    assert run["attempts"] == 1  # refused for good, not retried
    assert "workflow job refused" in run["error"] and "this tenant" in run["error"]
    await assert_never_started(deployment.env, f"{run['id']}/workflow")


async def test_a_forged_job_input_is_refused_by_the_worker(deployment: Deployment) -> None:
    """What reaches the job activity without the API (a signal, a forged start) is held to the
    same rule: even the tenant granted everything cannot start the scheduler's workflow."""
    victim_task = uuid.uuid4().hex
    forgeries = [
        (HOSTILE, WorkflowJob(type="workflow", workflow_type="TaskWorkflow",
                              task_queue=deployment.task_queue, args=forged_task_workflow_args(victim_task))),
        (UNGRANTED, WorkflowJob(type="workflow", workflow_type="PartnerReport",
                                task_queue=deployment.partner_queue, args=["eu"])),
        (GRANTED, WorkflowJob(type="workflow", workflow_type="PartnerReport", args=["eu"])),
    ]
    for tenant, job in forgeries:
        execution_id = f"forged-{uuid.uuid4().hex}:2026-12-01T09:00:00Z"
        forged = JobInput(execution_id=execution_id, task_id=victim_task, tenant_id=tenant,
                          scheduled_at=datetime.now(UTC), job=job, trigger="manual")
        outcome = await deployment.env.client.execute_workflow(
            ForgedRun.run, args=[forged, jobs_queue(deployment.task_queue)],
            id=f"forger-{uuid.uuid4()}", task_queue=deployment.partner_queue)
        assert outcome.startswith("WorkflowJobRefused: workflow job refused"), outcome
        await assert_never_started(deployment.env, f"{execution_id}/workflow")
    await assert_never_started(deployment.env, f"task-{victim_task}")
    await no_tasks(deployment, VICTIM)


async def test_an_allowed_workflow_job_runs_and_its_child_names_who_started_it(deployment: Deployment) -> None:
    async with deployment.client(GRANTED) as api:
        created = await api.post("/task/create", json=workflow_task(
            {"workflow_type": "PartnerReport", "task_queue": deployment.partner_queue, "args": ["eu"]},
            run_at=datetime.now(UTC).isoformat()))
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        final = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"})
        assert final["status"] == "COMPLETED", final
        execution_id = final["last_run"]["execution_id"]
    child = deployment.env.client.get_workflow_handle(f"{execution_id}/workflow")
    assert await child.result() == "report:eu"
    description = await child.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    assert description.task_queue == deployment.partner_queue
    assert await description.memo() == {"tenant_id": GRANTED, "task_id": task_id,
                                        "execution_id": execution_id}


async def test_workflow_jobs_are_off_unless_the_deployment_names_them(dev_env: WorkflowEnvironment,
                                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('wfoff') / 'api.db'}")
    migrate(engine)
    _, key = create_key(engine, HOSTILE)
    set_quota(engine, HOSTILE, workflow_types=["*"], workflow_task_queues=["*"])
    try:
        async with serve_api(dev_env, engine, temporal_task_queue=f"off-{uuid.uuid4()}") as base_url:
            async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as api:
                detail = await refused(api, "/task/create", workflow_task(
                    {"workflow_type": "PartnerReport", "task_queue": "partner"}), "job_details.type")
                assert "off" in detail
    finally:
        engine.dispose()
