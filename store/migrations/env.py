"""Alembic environment: runs on the connection handed over by ``store.engine.migrate``."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import store.models  # noqa: F401  (registers the tables on the metadata)

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through store.engine.migrate() or `task-scheduler migrate`")
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
