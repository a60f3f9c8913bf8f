"""Database engine creation (SQLite with WAL by default, PostgreSQL by URL) and migrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for the URL; a SQLite file gets WAL and a busy timeout, since API and worker share it."""
    if url.startswith("sqlite"):
        pool: dict[str, int] = {}
        if url.startswith("sqlite:///") and ":memory:" not in url:
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            # A file keeps its connections like a server would: a connection opened and closed
            # per burst costs its pragmas each time.
            pool = {"pool_size": pool_size, "max_overflow": pool_size}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision."""
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for our migrations, run on this connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config
