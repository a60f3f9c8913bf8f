"""The `task-scheduler` command: dev, api, worker, migrate, keys, and the operator commands
tasks and dead-letters (clients of the REST API)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from cli import calendars, ops
from cli.terminal import shown
from config.logging import configure_logging
from config.settings import QuotaSettings, Settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy import Engine


class ServerOptions(TypedDict):
    """How uvicorn serves the API (the keyword arguments of ``uvicorn.run``)."""

    http: Literal["httptools"]
    loop: Literal["asyncio"]
    reset_contextvars: bool


# httptools parses HTTP in C, where h11 (uvicorn's fallback) parses it in Python; the loop is
# named too, so that an installed uvloop is not taken up (measured: docs/capacity.md, "API").
# Each request starts from a fresh context: the tenant a request's store calls are charged to
# (api/database.py) does not carry over to the next request on its connection.
SERVER_OPTIONS: ServerOptions = {"http": "httptools", "loop": "asyncio", "reset_contextvars": True}


def _api(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    workers = args.workers or settings.api.workers
    host, port, level = settings.api.host, settings.api.port, settings.log.level.lower()
    if workers == 1:
        from api.app import create_app

        uvicorn.run(create_app(settings), host=host, port=port, log_level=level, access_log=False,
                    **SERVER_OPTIONS)
        return 0
    if settings.database.auto_migrate:
        # Once, here: the API processes would otherwise race each other to the schema.
        from store.engine import make_engine, migrate

        migrate(make_engine(settings.resolved_database_url))
        os.environ["SCHEDULER_DATABASE_AUTO_MIGRATE"] = "false"
    # The processes share the port; each builds its app from the same environment.
    uvicorn.run("cli.main:api_app", factory=True, workers=workers, host=host, port=port,
                log_level=level, access_log=False, **SERVER_OPTIONS)
    return 0


def api_app() -> FastAPI:
    """The API of one of several API processes (``task-scheduler api --workers N``)."""
    from api.app import create_app

    settings = Settings()
    configure_logging(settings.resolved_log_format, settings.log.level)
    return create_app(settings)


def _worker(settings: Settings, args: argparse.Namespace) -> int:
    from worker.run import run_worker

    overrides: dict[str, object] = {}
    if args.role is not None:
        overrides["role"] = args.role
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port or None
    worker = settings.worker.model_copy(update=overrides)
    asyncio.run(run_worker(settings.model_copy(update={"worker": worker})))
    return 0


def _migrate(settings: Settings) -> int:
    from store.engine import make_engine, migrate

    migrate(make_engine(settings.resolved_database_url))
    print("database is at the newest schema")
    return 0


def _keys(settings: Settings, args: argparse.Namespace) -> int:
    from store.engine import make_engine, migrate
    from store.keys import create_key, list_keys, revoke_key

    engine = make_engine(settings.resolved_database_url)
    if settings.database.auto_migrate:
        migrate(engine)
    if args.keys_command == "create":
        row, plain = create_key(engine, args.tenant, admin=args.admin)
        print(f"key id {row.id} for tenant {shown(row.tenant_id)}{' (admin)' if row.is_admin else ''}")
        print(f"API key (shown once): {plain}")
    elif args.keys_command == "signing-secret":
        return _signing_secret(settings, engine, args.tenant, rotate=args.rotate)
    elif args.keys_command == "list":
        for row in list_keys(engine, args.tenant):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            admin = "admin" if row.is_admin else ""
            print(f"{row.id}  {shown(row.tenant_id):20}  {shown(row.prefix)}...  {state:18} {admin}")
    else:
        if not revoke_key(engine, args.key_id):
            print(f"no active key {shown(args.key_id)}", file=sys.stderr)
            return 1
        print(f"revoked {shown(args.key_id)}")
    return 0


def _signing_secret(settings: Settings, engine: Engine, tenant: str, *, rotate: bool) -> int:
    from store.signing import RotationsContended, SecretBox, live_secrets, rotate_secret

    box, now = SecretBox(settings.signing.key.get_secret_value()), datetime.now(UTC)
    try:
        if rotate:
            live = rotate_secret(engine, tenant, now, timedelta(hours=settings.signing.rotation_hours), box)
        else:
            live = live_secrets(engine, tenant, now, box)
    except RotationsContended as exc:
        print(f"{exc}; nothing changed, try again", file=sys.stderr)
        return 1
    for secret in live:
        until = f"signs until {secret.expires_at:%Y-%m-%d %H:%M} UTC" if secret.expires_at else "current"
        print(f"{secret.secret}  created {secret.created_at:%Y-%m-%d %H:%M} UTC  {until}")
    return 0


QUOTA_FIELDS = ("max_active_tasks", "min_interval_seconds", "allow_seconds_cron",
                "max_body_bytes", "max_header_bytes", "workflow_types", "workflow_task_queues")


def _quotas(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from store.engine import make_engine, migrate
    from store.quotas import Quota, quota_for, set_quota

    engine = make_engine(settings.resolved_database_url)
    if settings.database.auto_migrate:
        migrate(engine)
    defaults = Quota.from_settings(settings.quota)
    if args.quotas_command == "set":
        kinds: dict[str, Callable[[str], object]] = {"max_active_tasks": int, "min_interval_seconds": float, "max_body_bytes": int,
                 "max_header_bytes": int,
                 "allow_seconds_cron": lambda v: {"true": True, "false": False}[v.lower()],
                 "workflow_types": _granted, "workflow_task_queues": _granted}
        changes: dict[str, object] = {}
        for name in QUOTA_FIELDS:
            raw = getattr(args, name)
            if raw is None:
                continue
            try:
                changes[name] = None if raw == "default" else kinds[name](raw)
            except (ValueError, KeyError):
                print(f"--{name.replace('_', '-')}: not a valid value: {shown(repr(raw))}", file=sys.stderr)
                return 2
        try:  # within the bounds of the settings' defaults
            QuotaSettings.model_validate({k: v for k, v in changes.items()
                                          if k in QuotaSettings.model_fields and v is not None})
        except ValidationError as exc:
            error = exc.errors()[0]
            print(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}", file=sys.stderr)
            return 2
        set_quota(engine, args.tenant, **changes)
    for name, value in asdict(quota_for(engine, args.tenant, defaults)).items():
        value_text = (",".join(value) or "(none)") if isinstance(value, tuple) else value
        print(f"{name:22} {shown(value_text)}")
    return 0


def _granted(value: str) -> list[str]:
    """A comma-separated grant of workflow types or task queues ('*': all the deployment allows)."""
    from activities.workflow_jobs import names

    granted = names(value)
    if not granted:
        raise ValueError("name at least one, or 'default' for none")
    return sorted(granted)


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    root = argparse.ArgumentParser(prog="task-scheduler", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    commands.add_parser("dev", help="run the embedded stack (dev server, worker, API)")
    api = commands.add_parser("api", help="run the REST API")
    api.add_argument(
        "--workers", type=int, choices=range(1, 65), metavar="N",
        help="API processes sharing the port (default: SCHEDULER_API_WORKERS, 1)",
    )
    worker = commands.add_parser("worker", help="run a Temporal worker")
    worker.add_argument(
        "--role", choices=("all", "workflows", "jobs"),
        help="workflows: task workflows, bookkeeping, reconciler; jobs: the job runs "
             "(<task queue>-jobs); all: both in one process (default: SCHEDULER_WORKER_ROLE, "
             "else all)",
    )
    worker.add_argument(
        "--metrics-port", type=int,
        help="serve Prometheus metrics on this port, 0 for none (default: "
             "SCHEDULER_WORKER_METRICS_PORT); each process on a host needs its own",
    )
    commands.add_parser("migrate", help="bring the database schema up to date")
    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(
        dest="keys_command", required=True
    )
    create = keys.add_parser("create", help="create a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--admin", action="store_true", help="may list across tenants")
    listing = keys.add_parser("list", help="list keys")
    listing.add_argument("--tenant")
    signing = keys.add_parser("signing-secret",
                              help="a tenant's secrets that sign its deliveries (made on first use)")
    signing.add_argument("--tenant", required=True)
    signing.add_argument("--rotate", action="store_true",
                         help="make a new one; the old one signs on for the rotation window")
    revoke = keys.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")
    quotas = commands.add_parser("quotas", help="per-tenant quotas").add_subparsers(
        dest="quotas_command", required=True
    )
    show = quotas.add_parser("show", help="a tenant's quotas (defaults where not set)")
    show.add_argument("--tenant", required=True)
    setter = quotas.add_parser(
        "set", help="set a tenant's quotas ('default' clears one)",
        epilog="--workflow-types and --workflow-task-queues take comma-separated names ('*': all "
               "that the deployment allows); a tenant's workflow jobs start only what both the "
               "deployment (SCHEDULER_WORKFLOW_JOB_TYPES, _TASK_QUEUES) and its grant allow",
    )
    setter.add_argument("--tenant", required=True)
    for name in QUOTA_FIELDS:
        setter.add_argument(f"--{name.replace('_', '-')}", dest=name)
    ops.add_commands(commands)
    calendars.add_commands(commands)
    return root


class _ClientSettings(BaseSettings):
    """What a client of the API reads of the settings: where the dev key is kept. The server's
    settings (and their production checks) are not its business."""

    model_config = Settings.model_config
    data_dir: Path = Settings.model_fields["data_dir"].default


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    args = parser().parse_args(argv)
    try:
        if args.command in ("tasks", "dead-letters", "calendars"):
            # A client of the API: it logs nothing itself.
            return ops.run(args, _ClientSettings().data_dir)
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
                             for e in exc.errors())
        print(f"task-scheduler: bad settings: {problems}", file=sys.stderr)
        return 2
    configure_logging(settings.resolved_log_format, settings.log.level)
    if args.command == "dev":
        from worker.dev import run_dev

        return run_dev(settings)
    if args.command == "keys":
        return _keys(settings, args)
    if args.command == "quotas":
        return _quotas(settings, args)
    if args.command == "worker":
        return _worker(settings, args)
    if args.command == "api":
        return _api(settings, args)
    return _migrate(settings)


if __name__ == "__main__":
    sys.exit(main())
