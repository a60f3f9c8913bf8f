"""`task-scheduler keys create|list|revoke`: a key is printed once and only its hash is kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import store.signing
from cli.main import main
from store.engine import make_engine
from store.keys import find_active_key
from store.models import ApiKey


def test_keys_lifecycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", url)
    assert main(["keys", "create", "--tenant", "growth", "--admin"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"API key \(shown once\): (\S+)", out).group(1)  # type: ignore[union-attr]
    key_id = re.search(r"key id (\w+)", out).group(1)  # type: ignore[union-attr]
    engine = make_engine(url)
    with Session(engine) as session:
        stored = session.scalars(select(ApiKey)).all()
    assert len(stored) == 1 and stored[0].key_hash != key and key not in stored[0].key_hash
    found = find_active_key(engine, key)
    assert found is not None and found.tenant_id == "growth" and found.is_admin

    assert main(["keys", "list", "--tenant", "growth"]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "active" in listing and key not in listing

    assert main(["keys", "revoke", key_id]) == 0
    assert find_active_key(engine, key) is None
    assert main(["keys", "revoke", key_id]) == 1
    capsys.readouterr()
    assert main(["keys", "list"]) == 0
    assert "revoked" in capsys.readouterr().out


def test_signing_secret_shows_rotates_and_says_when_a_rotation_got_no_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", f"sqlite:///{tmp_path / 'keys.db'}")
    assert main(["keys", "signing-secret", "--tenant", "growth"]) == 0
    [current] = capsys.readouterr().out.splitlines()
    assert current.startswith("whsec_") and current.endswith("current")
    assert main(["keys", "signing-secret", "--tenant", "growth", "--rotate"]) == 0
    rotated = capsys.readouterr().out.splitlines()
    assert len(rotated) == 2 and rotated[0].endswith("current") and "signs until" in rotated[1]
    assert rotated[1].split()[0] == current.split()[0]
    monkeypatch.setattr(store.signing, "ROTATION_TRIES", 0)  # as one that never got a turn
    assert main(["keys", "signing-secret", "--tenant", "growth", "--rotate"]) == 1
    out = capsys.readouterr()
    assert "nothing changed, try again" in out.err and out.out == ""
