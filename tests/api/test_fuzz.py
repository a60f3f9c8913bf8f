"""Property-based fuzzing of the whole API from its own OpenAPI schema, with a valid key:
no 5xx, and every response matches the schema. The API and a worker run as real processes
(schemathesis calls are blocking, so the servers cannot share the test's event loop)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine, migrate
from store.keys import create_key
from tests.faults.processes import free_port, process_env, start_process, stop, wait_http

CASES_PER_OPERATION = 60
COUNTED: list[int] = []


@pytest.fixture(scope="module")
def fuzz_target(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{root / 'fuzz.db'}"
    engine = make_engine(url)
    migrate(engine)
    _, key = create_key(engine, "fuzzer")
    engine.dispose()
    port = free_port()
    env = process_env(temporal=dev_env.client.service_client.config.target_host, database_url=url,
                      task_queue=f"fuzz-{uuid.uuid4()}", api_port=str(port),
                      rate_limit_writes="10000/second", rate_limit_reads="10000/second")
    worker = start_process("worker", env, root / "worker.log")
    api = start_process("api", env, root / "api.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/livez", api)
        yield {"base_url": f"http://127.0.0.1:{port}", "key": key}
    finally:
        stop(api)
        stop(worker)
    print(f"\nschemathesis ran {sum(COUNTED)} cases")


def test_api_never_fails_and_matches_its_schema(fuzz_target: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_target['base_url']}/openapi.json")
    headers = {"Authorization": f"Bearer {fuzz_target['key']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=CASES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def exercise(case: Any) -> None:
            COUNTED.append(1)
            response = case.call(base_url=fuzz_target["base_url"],
                                 headers={**(case.headers or {}), **headers}, timeout=30)
            case.validate_response(response, checks=(
                not_a_server_error, status_code_conformance, content_type_conformance,
                response_schema_conformance,
            ))

        exercise()
    assert sum(COUNTED) >= len(operations) * 5
