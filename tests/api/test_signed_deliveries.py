"""Signed deliveries over the API and the real workers: a tenant reads and rotates its signing
secret, and every HTTP job call and webhook arrives signed with it (checked by the target with
the independent ``standardwebhooks`` package)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso, wait_for_status
from tests.target import TargetServer

pytestmark = ON_BOTH_DATABASES

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$")


async def test_a_tenant_reads_its_own_secret_made_on_first_use(stack: Stack) -> None:
    async with stack.client("t1") as one, stack.client("t2") as two, stack.client(None) as nobody:
        first = await one.get("/signing-secret")
        assert first.status_code == 200, first.text
        [secret] = first.json()["secrets"]
        assert secret["secret"].startswith("whsec_") and secret["expires_at"] is None
        assert (await one.get("/signing-secret")).json() == first.json()  # made once
        other = (await two.get("/signing-secret")).json()["secrets"]
        assert [s["secret"] for s in other] != [secret["secret"]]
        assert (await nobody.get("/signing-secret")).status_code == 401
        assert (await nobody.post("/signing-secret/rotate")).status_code == 401


async def test_an_http_job_and_its_webhook_arrive_signed_and_self_describing(
    stack: Stack, target: TargetServer
) -> None:
    async with stack.client("t2") as api:
        target.secrets = [s["secret"] for s in (await api.get("/signing-secret")).json()["secrets"]]
        run_at = datetime.now(UTC) + timedelta(seconds=2)
        created = await api.post("/task/create", json={
            "task_name": "signed", "schedule_type": "once", "run_at": iso(run_at),
            "job_details": {"type": "http", "url": target.url("/job"), "method": "POST",
                            "body": {"hello": "world"}},
            "notify": {"url": target.url("/notes"), "events": ["completed"]},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        await target.wait_for(2, timeout=30)
        final = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"})
    assert final["status"] == "COMPLETED"
    job = next(r for r in target.received if r.path == "/job")
    note = next(r for r in target.received if r.path == "/notes")
    assert job.verified and note.verified, (job.headers, note.headers)
    execution_id = final["last_run"]["execution_id"]
    assert job.headers["webhook-id"] == job.headers["Idempotency-Key"] == execution_id
    assert job.headers["Scheduler-Task-Id"] == task_id == note.headers["Scheduler-Task-Id"]
    assert datetime.fromisoformat(job.headers["Scheduler-Scheduled-At"]) == run_at
    assert job.headers["Scheduler-Attempt"] == "1"
    assert TRACEPARENT.match(job.headers["traceparent"]), job.headers["traceparent"]


async def test_a_rotation_keeps_the_old_secret_signing_for_the_window(stack: Stack,
                                                                       target: TargetServer) -> None:
    async with stack.client("t1") as api:
        [old] = (await api.get("/signing-secret")).json()["secrets"]
        rotated = await api.post("/signing-secret/rotate")
        assert rotated.status_code == 201, rotated.text
        new, kept = rotated.json()["secrets"]
        assert new["secret"] != old["secret"] and new["expires_at"] is None
        assert kept["secret"] == old["secret"]
        window = datetime.fromisoformat(kept["expires_at"]) - datetime.now(UTC)
        assert timedelta(hours=23, minutes=59) < window <= timedelta(hours=24)
        assert (await api.get("/signing-secret")).json() == rotated.json()
        # A receiver that takes either secret during the window verifies the next delivery.
        target.secrets = [new["secret"], old["secret"]]
        created = await api.post("/task/create", json={
            "task_name": "after-rotation", "schedule_type": "once",
            "run_at": iso(datetime.now(UTC) + timedelta(seconds=1)),
            "job_details": {"type": "http", "url": target.url("/job"), "method": "GET"},
        })
        assert created.status_code == 201, created.text
        [request] = await target.wait_for(1, timeout=30)
    assert request.verified and request.status == 200


async def test_a_job_may_not_set_the_headers_a_delivery_signs_with(stack: Stack) -> None:
    async with stack.client("t1") as api:
        for name in ("Webhook-Signature", "webhook-id", "Scheduler-Attempt", "traceparent"):
            refused = await api.post("/task/create", json={
                "task_name": "forged", "schedule_type": "once",
                "run_at": iso(datetime.now(UTC) + timedelta(hours=1)),
                "job_details": {"type": "http", "url": "https://example.com/hook",
                                "headers": {name: "v1,forged"}},
            })
            assert refused.status_code == 422, (name, refused.text)
            assert name.lower() in refused.text.lower()
