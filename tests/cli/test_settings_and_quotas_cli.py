"""Settings refuse development secrets in production; quotas are set per tenant by CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.main import main
from config.settings import Settings
from store.engine import make_engine
from store.quotas import Quota, quota_for


def test_dev_api_key_is_refused_outside_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_ENV", "production")
    monkeypatch.setenv("SCHEDULER_METRICS_TOKEN", "scrape-me-0123456789")
    monkeypatch.setenv("SCHEDULER_SIGNING_KEY", "c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q=")
    monkeypatch.setenv("SCHEDULER_DEV_API_KEY", "letmein")
    with pytest.raises(ValidationError, match="refused when SCHEDULER_ENV=production"):
        Settings()
    monkeypatch.setenv("SCHEDULER_ENV", "dev")
    assert Settings().dev.api_key is not None
    monkeypatch.setenv("SCHEDULER_ENV", "production")
    monkeypatch.delenv("SCHEDULER_DEV_API_KEY")
    assert Settings().egress_allow_list == []  # nothing private is reachable by default


def test_production_needs_a_metrics_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_ENV", "production")
    monkeypatch.setenv("SCHEDULER_SIGNING_KEY", "c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q=")
    for unset in (None, " "):
        if unset is not None:
            monkeypatch.setenv("SCHEDULER_METRICS_TOKEN", unset)
        with pytest.raises(ValidationError, match="SCHEDULER_METRICS_TOKEN must be set"):
            Settings()
    monkeypatch.setenv("SCHEDULER_METRICS_TOKEN", "scrape-me-0123456789")
    assert Settings().metrics.token is not None
    monkeypatch.setenv("SCHEDULER_ENV", "dev")
    monkeypatch.delenv("SCHEDULER_METRICS_TOKEN")
    assert Settings().metrics.token is None  # dev: /metrics open unless a token is set


def test_quotas_cli_sets_shows_and_clears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", url)
    assert main(["quotas", "set", "--tenant", "growth", "--max-active-tasks", "7",
                 "--allow-seconds-cron", "true"]) == 0
    out = capsys.readouterr().out
    assert "max_active_tasks       7" in out and "allow_seconds_cron     True" in out
    quota = quota_for(make_engine(url), "growth", Quota())
    assert quota.max_active_tasks == 7 and quota.allow_seconds_cron is True
    assert main(["quotas", "set", "--tenant", "growth", "--max-active-tasks", "default"]) == 0
    assert quota_for(make_engine(url), "growth", Quota()).max_active_tasks == Quota().max_active_tasks
    assert main(["quotas", "set", "--tenant", "growth", "--max-body-bytes", "lots"]) == 2
    assert "not a valid value" in capsys.readouterr().err


def test_workflow_job_settings_name_what_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().workflow_job.types == "" and Settings().workflow_job.task_queues == ""
    monkeypatch.setenv("SCHEDULER_WORKFLOW_JOB_TYPES", "Report, *")
    with pytest.raises(ValidationError, match="not a wildcard"):
        Settings()


def test_quotas_cli_grants_and_withdraws_workflow_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", url)
    assert main(["quotas", "show", "--tenant", "growth"]) == 0
    assert "workflow_types         (none)" in capsys.readouterr().out
    assert main(["quotas", "set", "--tenant", "growth", "--workflow-types", "Report,Sync",
                 "--workflow-task-queues", "partner"]) == 0
    out = capsys.readouterr().out
    assert "workflow_types         Report,Sync" in out and "workflow_task_queues   partner" in out
    quota = quota_for(make_engine(url), "growth", Quota())
    assert quota.workflow_types == ("Report", "Sync") and quota.workflow_task_queues == ("partner",)
    assert main(["quotas", "set", "--tenant", "growth", "--workflow-types", " , "]) == 2
    assert main(["quotas", "set", "--tenant", "growth", "--workflow-types", "default"]) == 0
    assert quota_for(make_engine(url), "growth", Quota()).workflow_types == ()


def test_quotas_cli_refuses_what_the_settings_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", url)
    for flag, value in (("--min-interval-seconds", "nan"), ("--min-interval-seconds", "inf"),
                        ("--min-interval-seconds", "-5"), ("--max-active-tasks", "-1")):
        assert main(["quotas", "set", "--tenant", "growth", flag, value]) == 2, (flag, value)
        assert flag in capsys.readouterr().err
    assert quota_for(make_engine(url), "growth", Quota()) == Quota()  # nothing was set


def test_bad_settings_are_one_line_and_exit_2_and_api_clients_need_none(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SCHEDULER_ENV", "production")  # no signing key, no metrics token
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("task-scheduler: bad settings:") and "SCHEDULER_SIGNING_KEY" in err
    assert "Traceback" not in err
    # A client of the API reads none of the server's settings: it gets as far as the API.
    assert main(["tasks", "list", "--url", "http://127.0.0.1:9", "--key", "k"]) == 1
    assert "cannot reach the API" in capsys.readouterr().err
    assert main(["tasks", "list", "--url", "http://[::1", "--key", "k"]) == 2
    assert main(["tasks", "list", "--url", "http://127.0.0.1:9", "--key", "tské"]) == 2
    assert "ASCII" in capsys.readouterr().err


def test_production_seals_under_no_development_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from config.settings import DEV_SIGNING_KEY

    other = "YW5vdGhlci1rZXktb2YtdGhpcnR5LXR3by1ieXRlcyE="
    monkeypatch.setenv("SCHEDULER_ENV", "production")
    monkeypatch.setenv("SCHEDULER_METRICS_TOKEN", "scrape-me-0123456789")
    for sealing_with_dev in (f"{DEV_SIGNING_KEY},{other}", f" {DEV_SIGNING_KEY} "):
        monkeypatch.setenv("SCHEDULER_SIGNING_KEY", sealing_with_dev)
        with pytest.raises(ValidationError, match="SCHEDULER_SIGNING_KEY must be set"):
            Settings()
    monkeypatch.setenv("SCHEDULER_SIGNING_KEY", " , ")
    with pytest.raises(ValidationError, match="names no key"):
        Settings()
    monkeypatch.setenv("SCHEDULER_SIGNING_KEY", f"{other},{DEV_SIGNING_KEY}")  # leaving dev behind
    assert Settings().signing.key.get_secret_value().startswith(other)
