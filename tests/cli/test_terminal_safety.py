"""A tenant's text reaches the operator's terminal escaped: no escape sequence, bell or bidi
override of a task name, an API error or a tenant id is printed raw by the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.main import main
from cli.terminal import shown
from tests.api import conftest as api_conftest
from tests.api.conftest import Stack
from tests.cli.test_ops_cli import Cli, create

stack = api_conftest.stack  # the real API + worker + dev server, one per module

HOSTILE = "red\x1b[31m-title\x1b]0;owned\x07-rtl\u202egnp.exe-del\x7f-c1\x9b2J-tab\tnl\nend"
# Anything a terminal acts on: C0 but for the newlines the CLI itself prints, DEL, C1, bidi.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_shown_escapes_controls_and_bidi_and_keeps_the_rest() -> None:
    assert shown("a\x1b[31mb\x07\x00\x7f\x85\u202e\u2067\u200f") == (
        "a\\x1b[31mb\\x07\\x00\\x7f\\x85\\u202e\\u2067\\u200f")
    assert shown("plain naïve 東京 ✓ \\x1b") == "plain naïve 東京 ✓ \\x1b"
    assert shown("two\nlines\ttab") == "two\\x0alines\\x09tab"


async def test_every_table_and_line_escapes_a_tenants_text(stack: Stack) -> None:
    task_id = await create(stack, HOSTILE, tenant="t2")
    admin = Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["admin"])
    escaped = "red\\x1b[31m-title\\x1b]0;owned\\x07-rtl\\u202egnp.exe-del\\x7f-c1\\x9b2J"

    code, out, err = await admin("tasks", "list", "--all-tenants", "--limit", "500")
    assert code == 0, err
    assert not RAW.search(out), out
    row = next(line for line in out.splitlines() if line.startswith(task_id))
    assert escaped[:30] in row  # the cell is cut at its width, after escaping

    code, out, err = await admin("tasks", "get", task_id)
    assert code == 0, err
    assert not RAW.search(out)
    assert f"name:      {escaped}-tab\\x09nl\\x0aend" in out.splitlines()

    # The API's error names the id it was given: that comes back escaped too.
    code, out, err = await admin("tasks", "get", "x\x1b]0;owned\x07")
    assert code == 1 and not RAW.search(err), err

    code, out, err = await admin("tasks", "list", "--all-tenants", "--json", "--limit", "500")
    assert code == 0 and not RAW.search(out)  # JSON escapes them itself


def test_keys_list_escapes_tenant_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", f"sqlite:///{tmp_path / 'keys.db'}")
    assert main(["keys", "create", "--tenant", "t\x1b[2J\u202e"]) == 0
    assert main(["keys", "list"]) == 0
    assert main(["quotas", "show", "--tenant", "t\x1b[2J"]) == 0
    out = capsys.readouterr().out
    assert not RAW.search(out) and "t\\x1b[2J\\u202e" in out
