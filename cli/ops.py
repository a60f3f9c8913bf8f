"""The operator commands `task-scheduler tasks ...` and `dead-letters ...`: clients of the REST API.

They never touch the database: what an operator sees is what the API answers, with the same
tenant isolation. Tables for humans; ``--json`` prints the API's JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from api.history import spec_diff
from cli.resume import resume_lines
from cli.terminal import shown
from scheduling.status import ResumeMissed

DEFAULT_URL = "http://127.0.0.1:8000"
TASK_STATUSES = ("PENDING", "RUNNING", "PAUSED", "COMPLETED", "FAILED", "CANCELLED")
EXIT_API_ERROR, EXIT_USAGE = 1, 2


class ApiProblem(Exception):
    """The API refused the request, or could not be reached; the message is for the operator."""


class UsageProblem(Exception):
    """The command cannot be sent as given (e.g. no API key)."""


@dataclass
class OpsClient:
    """A small synchronous client of the REST API, authenticated with one tenant's key."""

    http: httpx.Client

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request; the parsed JSON body (None for 204), or ApiProblem with the detail."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiProblem(f"cannot reach the API at {self.http.base_url}: {exc}") from exc
        if response.status_code >= 400:
            raise ApiProblem(_problem_detail(response))
        if response.status_code == 204 or not response.content:
            return None
        return response.json()


def _problem_detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("detail"):
        return f"{response.status_code}: {body['detail']}"
    return f"{response.status_code}: {response.text.strip()[:500] or response.reason_phrase}"


def _query(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None and v is not False}


# ----------------------------------------------------------------- formatting
def _when(value: str | None) -> str:
    if not value:
        return "-"
    moment = datetime.fromisoformat(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S%z").replace("+0000", "Z")


def _millis(start: str | None, end: str | None) -> str:
    if not start or not end:
        return "-"
    delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    return f"{delta.total_seconds() * 1000:.0f}ms"


def schedule_summary(task: dict[str, Any]) -> str:
    """One line for a task's schedule: the cron and zone, the interval, or the instant."""
    schedule = task.get("schedule", {})
    kind = task.get("schedule_type")
    if kind == "cron":
        return f"cron {schedule.get('cron')} {schedule.get('timezone') or 'UTC'}"
    if kind == "interval":
        seconds = schedule.get("interval_seconds")
        return f"every {seconds:g}s {schedule.get('interval_mode') or ''}".strip()
    if kind == "dates":
        dates = schedule.get("dates") or [None]
        return f"{len(dates)} dates to {_when(dates[-1])}"
    return f"once {_when(schedule.get('run_at'))}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int = 48) -> str:
    # Escaped before the cut, so that the widths are those of what the terminal shows.
    escaped = [[shown(c) for c in row] for row in rows]
    cells = [[c if len(c) <= width else c[: width - 1] + "…" for c in row] for row in escaped]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _outcome(run: dict[str, Any]) -> str:
    if run.get("error"):
        return str(run["error"]).splitlines()[0]
    if run.get("http_status"):
        return f"HTTP {run['http_status']}"
    return str(run.get("reason") or "")


def _task_lines(task: dict[str, Any]) -> str:
    last = task.get("last_run")
    job = task.get("job_details", {})
    target = job.get("url") or job.get("name") or job.get("workflow_type") or ""
    fields = [
        ("task", task["task_id"]),
        ("name", task["task_name"]),
        ("tenant", task["tenant_id"]),
        ("status", task["status"] + (f" ({task['status_reason']})" if task.get("status_reason") else "")),
        ("schedule", schedule_summary(task)),
        ("in words", task.get("description") or "-"),
        ("job", f"{job.get('type', '?')} {target}".strip()),
        ("next run", _when(task.get("next_run_at"))),
        *([("probe", _when(task["next_probe_at"]))] if task.get("next_probe_at") else []),
        ("last run", f"{last['status']} at {_when(last['scheduled_at'])}" if last else "-"),
        ("runs", (f"{task['run_count']} ({task['success_count']} ok, "
                  f"{task['failure_count']} failed, {task['skipped_count']} skipped)")),
        ("created", _when(task.get("created_at"))),
    ]
    if task.get("backfill"):
        fields.append(("backfill", backfill_summary(task["backfill"])))
    return "\n".join(f"{k + ':':10} {shown(v)}" for k, v in fields)


def backfill_summary(backfill: dict[str, Any]) -> str:
    """One line for a task's latest backfill: its progress, and why it stopped."""
    why = f" ({backfill['reason']})" if backfill.get("reason") else ""
    return (f"{backfill['status']}{why}: {backfill['started']} of {backfill['total']} started, "
            f"{backfill['left']} left ({backfill['mode']}, {_when(backfill['start'])} to "
            f"{_when(backfill['end'])})")


def _tasks_table(page: dict[str, Any]) -> str:
    rows = [
        [t["task_id"], t["task_name"], t["status"], schedule_summary(t), _when(t.get("next_run_at")),
         t["last_run"]["status"] if t.get("last_run") else "-",
         f"{t['run_count']}/{t['success_count']}/{t['failure_count']}/{t['skipped_count']}"]
        for t in page["items"]
    ]
    headers = ["TASK", "NAME", "STATUS", "SCHEDULE", "NEXT RUN", "LAST", "RUNS/OK/FAIL/SKIP"]
    return _table(headers, rows) if rows else "no tasks"


def _runs_table(page: dict[str, Any], *, with_task: bool = False) -> str:
    rows = [
        ([r.get("task_name") or r["task_id"]] if with_task else [])
        + [r["id"], _when(r["scheduled_at"]), r["trigger"], r["status"], str(r["attempts"]),
           _millis(r.get("instant") or r["scheduled_at"], r.get("started_at")),  # jitter is no lateness
           _millis(r.get("started_at"), r.get("finished_at")), _outcome(r)]
        for r in page["items"]
    ]
    headers = (["TASK"] if with_task else []) + [
        "EXECUTION", "SCHEDULED", "TRIGGER", "STATUS", "TRIES", "LATE", "TOOK", "OUTCOME"]
    return _table(headers, rows, width=72) if rows else "no executions"


def _with_cursor(text: str, page: dict[str, Any]) -> str:
    if page.get("next_cursor"):
        return f"{text}\nmore: --cursor {shown(page['next_cursor'])}"
    return text


# ----------------------------------------------------------------- commands
Command = Callable[[OpsClient, argparse.Namespace], tuple[Any, str]]


def _tasks_list(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    params = _query(limit=a.limit, cursor=a.cursor, status=a.status, name=a.name,
                    all_tenants=a.all_tenants)
    page = api.call("GET", "/tasks", params=params)
    return page, _with_cursor(_tasks_table(page), page)


def _tasks_get(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    task = api.call("GET", f"/tasks/{quote(a.task_id, safe='')}")
    return task, _task_lines(task)


def _fire_note(fire: dict[str, Any]) -> str:
    if fire.get("skipped"):
        return f"skipped: {fire['skipped']}"
    return str(fire.get("note") or "")


def _tasks_show(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    task_path = f"/tasks/{quote(a.task_id, safe='')}"
    task = api.call("GET", task_path)
    upcoming = api.call("GET", f"{task_path}/upcoming", params={"limit": a.limit})
    rows = [[f["local"], _when(f.get("instant")), _fire_note(f)] for f in upcoming["fires"]]
    fires = _table(["FIRE (LOCAL)", "RUNS AT (UTC, JITTER INCLUDED)", "NOTE"], rows, width=100) \
        if rows else "no upcoming fires"
    warnings = "".join(f"\nwarning: {shown(w)}" for w in upcoming["warnings"])
    if upcoming.get("on_resume"):
        warnings += f"\n\n{resume_lines(upcoming['on_resume'], a.limit)}"
    return {"task": task, "upcoming": upcoming}, f"{_task_lines(task)}\n\n{fires}{warnings}"


def _tasks_cancel(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    task = api.call("PATCH", "/task/cancel", json=_query(task_id=a.task_id, reason=a.reason))
    # 202: the workflow stops its running job first, so the status may not say CANCELLED yet.
    return task, f"cancel accepted\n{_task_lines(task)}"


def _tasks_pause(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    task = api.call("POST", f"/tasks/{quote(a.task_id, safe='')}/pause", json=_query(reason=a.reason))
    return task, f"pause accepted\n{_task_lines(task)}"


def _tasks_resume(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    task = api.call("POST", f"/tasks/{quote(a.task_id, safe='')}/resume", json=_query(missed=a.missed))
    return task, f"resume accepted\n{_task_lines(task)}"


def _tasks_signal(action: str) -> Command:
    def run(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
        task = api.call("POST", f"/tasks/{quote(a.task_id, safe='')}/{action}")
        return task, f"{action} accepted\n{_task_lines(task)}"

    return run


def _tasks_executions(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    page = api.call("GET", f"/tasks/{quote(a.task_id, safe='')}/executions",
                    params=_query(limit=a.limit, cursor=a.cursor))
    return page, _with_cursor(_runs_table(page), page)


def _versions_table(page: dict[str, Any]) -> str:
    items = page["items"]
    rows = []
    for n, v in enumerate(items):
        before = items[n + 1]["spec"] if n + 1 < len(items) else None
        changes = ("first version" if v["version"] == 1 else "-") if before is None else ", ".join(
            f"{c.field}: {c.before} -> {c.after}" for c in spec_diff(before, v["spec"])) or "no change"
        rows.append([str(v["version"]), _when(v["at"]), v["action"], v["actor"], changes])
    return _table(["VERSION", "AT", "ACTION", "BY", "CHANGES"], rows, width=120) if rows else "no versions"


def _tasks_history(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    page = api.call("GET", f"/tasks/{quote(a.task_id, safe='')}/versions",
                    params=_query(limit=a.limit, cursor=a.cursor))
    return page, _with_cursor(_versions_table(page), page)


def _tasks_backfill(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    body = _query(start=a.start, end=a.end, mode=a.mode, dry_run=a.dry_run)
    answer = api.call("POST", f"/tasks/{quote(a.task_id, safe='')}/backfill", json=body)
    rows = [[i["execution_id"], _when(i["scheduled_at"]), i["current"] or "-", i["action"],
             i.get("reason") or ""] for i in answer["instants"]]
    head = (f"dry run: {answer['to_run']} of {len(rows)} instants would run" if a.dry_run
            else f"backfill accepted: {answer['to_run']} of {len(rows)} instants run")
    # WHY is last and whole (up to 140 characters): it is the answer to "why not run".
    table = _table(["EXECUTION", "SCHEDULED", "NOW", "ACTION", "WHY"], rows, width=140) if rows else "no instants"
    return answer, f"{head}\n{table}"


def _dead_letters_list(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    page = api.call("GET", "/dead-letters", params=_query(limit=a.limit, cursor=a.cursor))
    return page, _with_cursor(_runs_table(page, with_task=True), page)


def _dead_letters_replay(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    run = api.call("POST", f"/dead-letters/{quote(a.execution_id, safe='')}/replay")
    return run, f"replaying {shown(a.execution_id)}: {shown(run.get('status', 'accepted'))}"


def common_options() -> argparse.ArgumentParser:
    """The options every API client command takes: --url, --key, --json."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("SCHEDULER_API_URL", DEFAULT_URL),
                        help="the API (env SCHEDULER_API_URL; default %(default)s)")
    common.add_argument("--key", default=os.environ.get("SCHEDULER_API_KEY"),
                        help="API key (env SCHEDULER_API_KEY; default: the dev key file)")
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    return common


def add_commands(commands: Any) -> None:
    """Add the `tasks` and `dead-letters` commands to the CLI's subparsers."""
    common = common_options()

    def leaf(group: Any, name: str, run: Command, help_: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, parents=[common], help=help_)
        sub.set_defaults(ops=run)
        return sub

    def paging(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--limit", type=int, default=50, help="at most this many (1-500)")
        sub.add_argument("--cursor", help="the cursor a previous page printed")

    tasks = commands.add_parser("tasks", help="list and operate tasks through the API")
    group = tasks.add_subparsers(dest="tasks_command", required=True)
    listing = leaf(group, "list", _tasks_list, "tasks, newest first")
    paging(listing)
    listing.add_argument("--status", choices=TASK_STATUSES, type=str.upper)
    listing.add_argument("--name", help="only tasks with this name")
    listing.add_argument("--all-tenants", action="store_true", help="admin keys only")
    for name, run, help_ in [
        ("get", _tasks_get, "a task's status, schedule and counts"),
        ("show", _tasks_show, "a task, its schedule in words and its upcoming fires"),
        ("cancel", _tasks_cancel, "cancel a task"),
        ("pause", _tasks_pause, "pause a task"),
        ("resume", _tasks_resume, "resume a paused task"),
        ("trigger", _tasks_signal("trigger"), "run a task's job now"),
        ("executions", _tasks_executions, "a task's run history, newest first"),
        ("history", _tasks_history, "a task's spec versions and what changed, newest first"),
    ]:
        sub = leaf(group, name, run, help_)
        sub.add_argument("task_id")
        if name in ("cancel", "pause"):
            sub.add_argument("--reason")
        if name == "resume":
            sub.add_argument("--missed", choices=[m.value for m in ResumeMissed],
                             help="the fires of the pause: skip records them skipped (default), "
                             "policy lets the missed-run policy decide them")
        if name in ("executions", "history"):
            paging(sub)
        if name == "show":
            sub.add_argument("--limit", type=int, default=10, help="upcoming fires to list (1-1000)")

    backfill = leaf(group, "backfill", _tasks_backfill,
                    "run a task's past instants in [--start, --end) again")
    backfill.add_argument("task_id")
    backfill.add_argument("--start", required=True, help="first instant looked at (RFC 3339)")
    backfill.add_argument("--end", required=True, help="end of the range, excluded (RFC 3339)")
    backfill.add_argument("--mode", choices=("missing", "failed", "all"),
                          help="missing (default): never executed; failed; all")
    backfill.add_argument("--dry-run", action="store_true", help="show what would run, change nothing")

    dead = commands.add_parser("dead-letters", help="runs that failed for good")
    group = dead.add_subparsers(dest="dead_letters_command", required=True)
    paging(leaf(group, "list", _dead_letters_list, "dead-lettered runs, newest first"))
    leaf(group, "replay", _dead_letters_replay, "run a dead-lettered execution again").add_argument(
        "execution_id")


def resolve_key(given: str | None, data_dir: Path) -> str:
    """The key to send: --key / SCHEDULER_API_KEY, else the dev key file of the data directory."""
    if given:
        return given
    dev_key = data_dir / "dev_api_key"
    if dev_key.is_file():
        return dev_key.read_text().strip()
    raise UsageProblem(f"no API key: pass --key, set SCHEDULER_API_KEY, or create {dev_key}")


def run(args: argparse.Namespace, data_dir: Path) -> int:
    """Run one operator command; 0 on success, 1 when the API refuses, 2 for usage errors."""
    try:
        key = resolve_key(args.key, data_dir)
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        # A cancel may take up to 33 s to answer (docs/scheduling.md, Cancel).
        timeout = httpx.Timeout(10.0, read=45.0)
        with httpx.Client(base_url=args.url, headers=headers, timeout=timeout) as http:
            body, text = args.ops(OpsClient(http), args)
    except UsageProblem as exc:
        print(f"task-scheduler: {shown(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except httpx.InvalidURL as exc:
        print(f"task-scheduler: --url {args.url!r}: {shown(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeEncodeError:
        print("task-scheduler: an API key is ASCII text; this one is not", file=sys.stderr)
        return EXIT_USAGE
    except ApiProblem as exc:
        print(f"error: {shown(exc)}", file=sys.stderr)
        return EXIT_API_ERROR
    print(json.dumps(body, indent=2) if args.json else text)
    return 0
