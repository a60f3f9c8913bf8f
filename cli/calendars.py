"""The operator commands `task-scheduler calendars ...`: a tenant's calendars of excluded dates,
through the REST API (the same tenant isolation as every other client)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from cli.ops import Command, OpsClient, _query, _table, _with_cursor, common_options
from cli.terminal import shown


def _lines(calendar: dict[str, Any]) -> str:
    place = calendar.get("holidays") or {}
    holidays = " ".join(filter(None, [place.get("country"), place.get("subdivision")])) or "-"
    dates = ", ".join(calendar.get("dates") or []) or "-"
    return "\n".join(f"{k:<10} {shown(v)}" for k, v in [
        ("id", calendar.get("calendar_id")), ("name", calendar.get("name")),
        ("holidays", holidays), ("dates", dates)])


def _body(a: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"name": a.name, "dates": a.date or []}
    if a.country:
        body["holidays"] = {"country": a.country, "subdivision": a.subdivision}
    return body


def _list(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    page = api.call("GET", "/calendars", params=_query(limit=a.limit, cursor=a.cursor))
    rows = [[c["calendar_id"], c["name"], str(len(c["dates"])),
             (c.get("holidays") or {}).get("country") or "-"] for c in page["items"]]
    return page, _with_cursor(_table(["ID", "NAME", "DATES", "HOLIDAYS"], rows), page)


def _get(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    calendar = api.call("GET", f"/calendars/{quote(a.calendar_id, safe='')}")
    return calendar, _lines(calendar)


def _create(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    calendar = api.call("POST", "/calendars", json=_body(a))
    return calendar, _lines(calendar)


def _replace(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    calendar = api.call("PUT", f"/calendars/{quote(a.calendar_id, safe='')}", json=_body(a))
    return calendar, _lines(calendar)


def _delete(api: OpsClient, a: argparse.Namespace) -> tuple[Any, str]:
    api.call("DELETE", f"/calendars/{quote(a.calendar_id, safe='')}")
    return None, f"deleted {shown(a.calendar_id)}"


def add_commands(commands: Any) -> None:
    """Add the `calendars` commands to the CLI's subparsers."""
    common = common_options()
    group = commands.add_parser("calendars", help="calendars of dates tasks do not run on"
                                ).add_subparsers(dest="calendars_command", required=True)

    def leaf(name: str, run: Command, help_: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, parents=[common], help=help_)
        sub.set_defaults(ops=run)
        return sub

    def contents(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--name", required=True)
        sub.add_argument("--date", action="append", help="an excluded date, YYYY-MM-DD (repeat)")
        sub.add_argument("--country", help="public holidays of this country (ISO code, e.g. DE)")
        sub.add_argument("--subdivision", help="and of this subdivision (e.g. BY)")

    listing = leaf("list", _list, "the tenant's calendars, newest first")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (1-500)")
    listing.add_argument("--cursor", help="the cursor a previous page printed")
    contents(leaf("create", _create, "create a calendar"))
    for name, run, help_ in [("get", _get, "a calendar's dates and holidays"),
                             ("replace", _replace, "give a calendar new contents"),
                             ("delete", _delete, "delete a calendar no running task excludes")]:
        sub = leaf(name, run, help_)
        sub.add_argument("calendar_id")
        if name == "replace":
            contents(sub)
