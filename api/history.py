"""A task's history as the API shows it: its events, its spec versions, and a rollback to one
of them (an update like any other, named ``rollback`` in the history)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api.database import in_thread
from api.errors import InvalidTask, NotFound
from api.schemas import EventOut, EventPage, TaskOut, VersionOut, VersionPage
from api.service import Principal, TaskService
from scheduling.spec import TaskChanges
from store.events import list_events, read_version
from store.models import TaskEvent
from workflows.events import ROLLBACK, Origin


async def task_events(service: TaskService, who: Principal, task_id: str, *, limit: int,
                      cursor: str | None) -> EventPage:
    """Every change of a task of the caller's tenant, newest first (404 for anyone else's)."""
    task = await service.get(who, task_id)
    rows, next_cursor = await _page(service, task, limit, cursor, versions_only=False)
    return await service.rendering.run(who.tenant_id, lambda: EventPage(
        items=[EventOut.from_row(r) for r in rows], next_cursor=next_cursor))


async def task_versions(service: TaskService, who: Principal, task_id: str, *, limit: int,
                        cursor: str | None) -> VersionPage:
    """The versions of a task's spec, newest first."""
    task = await service.get(who, task_id)
    rows, next_cursor = await _page(service, task, limit, cursor, versions_only=True)
    return await service.rendering.run(who.tenant_id, lambda: VersionPage(
        items=[VersionOut.from_row(r) for r in rows], next_cursor=next_cursor))


async def rollback(service: TaskService, who: Principal, task_id: str, version: int, *,
                   idempotency_key: str | None = None) -> TaskOut:
    """Restore the spec of one of the task's own versions, as an update: the same validation
    and Idempotency-Key rules; an unknown version is a 404 and changes nothing."""
    task = await service.get(who, task_id)
    row = await in_thread(read_version, service.engine, task_id=task_id, tenant_id=task.tenant_id,
                          version=version)
    if row is None or row.spec is None:
        raise NotFound(f"task {task_id} has no version {version}", field="version")
    # Measured as a client would send it: UTF-8, no escapes, no spaces.
    body = json.dumps(row.spec, ensure_ascii=False, separators=(",", ":"))
    try:
        changes = TaskChanges.model_validate_json(body)
    except ValidationError as exc:  # a spec stored by an older release that this one refuses
        raise InvalidTask(f"version {version} cannot be restored: {exc.errors()[0]['msg']}",
                          field="version") from exc
    origin = Origin(actor=who.key_id, action=ROLLBACK, detail={"version": version})
    return await service.update(
        who, task_id, changes, body_size=len(body.encode()), idempotency_key=idempotency_key,
        origin=origin, request={"rollback": task_id, "version": version},
    )


@dataclass(frozen=True)
class Change:
    """One field of the spec that differs between two versions (dotted for nested ones)."""

    field: str
    before: str
    after: str


@dataclass(frozen=True)
class VersionDiff:
    """A version as the task page shows it: the changes from the version before it (None for
    the oldest on the page: the first version, or one whose predecessor is on a later page)."""

    version: VersionOut
    changes: list[Change] | None


def version_diffs(versions: list[VersionOut]) -> list[VersionDiff]:
    """Each version (newest first) with what changed since the one before it."""
    shown = []
    for n, version in enumerate(versions):
        before = versions[n + 1].spec if n + 1 < len(versions) else None
        shown.append(VersionDiff(version, None if before is None else spec_diff(before, version.spec)))
    return shown


def spec_diff(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """The fields whose values differ, in order, with both values as JSON text."""
    old, new = _flat(before), _flat(after)
    return [Change(name, _text(old.get(name)), _text(new.get(name)))
            for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]


def _flat(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _text(value: Any) -> str:
    return "—" if value is None else json.dumps(value, ensure_ascii=False)


async def _page(service: TaskService, task: TaskOut, limit: int, cursor: str | None, *,
                versions_only: bool) -> tuple[list[TaskEvent], str | None]:
    try:
        rows, next_cursor = await in_thread(
            list_events, service.engine, task_id=task.task_id, tenant_id=task.tenant_id,
            limit=limit, cursor=cursor, versions_only=versions_only)
    except ValueError as exc:
        raise InvalidTask(f"cursor: {exc}", field="cursor") from exc
    return list(rows), next_cursor
