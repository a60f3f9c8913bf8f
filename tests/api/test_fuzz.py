"""Schemathesis runs every phase (examples, coverage, fuzzing, stateful) with every check
against a live API, worker and dev server: no 5xx, every status documented, every response as
documented, no valid request refused and no invalid one accepted. The values no schema can
state are pinned by tests/api/fuzz_hooks.py. The API and the worker run as real processes
(the schemathesis CLI is a process of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine, migrate
from store.keys import create_key
from store.quotas import set_quota
from tests.api.fuzz_hooks import SHORTEST_INTERVAL
from tests.conftest import new_postgres_database
from tests.faults.processes import ROOT, free_port, process_env, start_process, stop, wait_http

EXAMPLES_PER_OPERATION = 40
# Each database runs its own seed: the two runs together try twice the distinct inputs.
SEEDS = {"sqlite": 20261202, "postgres": 20261205}
ECHO_QUEUE = "fuzz-echo"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzz_target(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{root / 'fuzz.db'}"
    if request.param == "postgres":
        url = new_postgres_database(request.getfixturevalue("postgres_url"))
    engine = make_engine(url)
    migrate(engine)
    _, key = create_key(engine, "fuzzer")
    set_quota(engine, "fuzzer", workflow_types=["EchoWorkflow"], workflow_task_queues=[ECHO_QUEUE])
    engine.dispose()
    port = free_port()
    env = process_env(temporal=dev_env.client.service_client.config.target_host, database_url=url,
                      task_queue=f"fuzz-{uuid.uuid4()}", api_port=str(port),
                      # Limits are policy, tested on their own (test_exposure.py): the spoiled
                      # keys of the auth checks come faster than 10 a minute.
                      rate_limit_writes="10000/second", rate_limit_reads="10000/second",
                      rate_limit_auth_failures="10000/second",
                      quota_min_interval_seconds=str(SHORTEST_INTERVAL),
                      workflow_job_types="EchoWorkflow", workflow_job_task_queues=ECHO_QUEUE)
    worker = start_process("worker", env, root / "worker.log")
    api = start_process("api", env, root / "api.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/livez", api)
        yield {"base_url": f"http://127.0.0.1:{port}", "key": key, "root": root,
               "seed": SEEDS[request.param]}
    finally:
        stop(api)
        stop(worker)


def test_api_matches_its_openapi_document_under_every_check(fuzz_target: dict[str, Any]) -> None:
    base, root = fuzz_target["base_url"], fuzz_target["root"]
    # The key as the OpenAPI document's security scheme, so that the auth checks can leave it
    # out or spoil it and expect a 401.
    config = root / "schemathesis.toml"
    config.write_text(f'[auth.openapi.HTTPBearer]\nbearer = "{fuzz_target["key"]}"\n')
    command = [
        str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(config),
        "run", f"{base}/openapi.json", "--checks", "all",
        # One worker: with two, hypothesis parses source in two threads at once, which trips
        # CPython 3.11's "AST constructor recursion depth mismatch" now and then.
        "--max-examples", str(EXAMPLES_PER_OPERATION), "--workers", "1", "--seed", str(fuzz_target["seed"]),
        "--request-timeout", "30", "--generation-database", "none", "--no-color",
        "--report", "junit", "--report-junit-path", str(root / "junit.xml"),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.fuzz_hooks", "PYTHONPATH": str(ROOT),
           "FUZZ_WORKFLOW_QUEUE": ECHO_QUEUE}
    # In the test's own folder: the CLI keeps a cache in its working directory.
    run = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=280)
    report = run.stdout[-20_000:] + run.stderr[-2_000:]
    assert run.returncode == 0, report
    assert "30 selected / 30 total" in run.stdout, report
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅  {phase}" in run.stdout or f"✅ {phase}" in run.stdout, (phase, report)
