"""The ports no job or webhook may call off the public internet, as each process sees them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.settings import Settings, WorkerSettings
from tests.conftest import settings_of
from worker.dev import deny_ports, dev_server_command, worker_roles


def test_own_ports_name_the_api_temporal_and_metrics() -> None:
    settings = settings_of(api_port=8100, temporal_address="127.0.0.1:7300", temporal_ui_port=8300,
                        worker_metrics_port=9500, egress_deny_ports=" 6379, 5432 ")
    assert settings.own_ports == {8100, 7300, 8300, 9500, 6379, 5432}


def test_each_dev_worker_knows_every_workers_metrics_port() -> None:
    launcher = settings_of(worker_metrics_port=7000)
    workers = worker_roles(launcher)
    assert [port for _, _, port in workers] == [7000, 7001]
    env = deny_ports(launcher, workers, (7243, 7244))
    # A worker process gets its own port on the command line, which replaces the setting.
    for _, _, port in workers:
        child = settings_of(egress_deny_ports=env).model_copy(update={"worker": WorkerSettings(metrics_port=port)})
        assert {7000, 7001, 7243, 7244} <= child.own_ports


def test_the_dev_server_listens_on_the_side_ports_it_was_given() -> None:
    command = dev_server_command(Settings(), (7243, 7244))
    assert command[command.index("--http-port") + 1] == "7243"
    assert command[command.index("--metrics-port") + 1] == "7244"


def test_deny_ports_must_be_ports() -> None:
    with pytest.raises(ValidationError):
        settings_of(egress_deny_ports="9464,metrics")
