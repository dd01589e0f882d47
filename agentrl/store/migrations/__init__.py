"""Schema management for the run store with Alembic, configured in code (no alembic.ini needed).

What this is: `upgrade(engine)` brings a database to the newest revision (`head`); `current(engine)` says
which revision it is at. `repository.open_store` calls `upgrade`, so a fresh database gets its tables from
the migrations, never from `metadata.create_all`. A store made before Alembic (its tables exist but there
is no `alembic_version` table) is stamped with the initial revision first, which matches those tables.
Revisions live in `versions/`, one file each; `env.py` is Alembic's entry point.

A new revision, after changing `models.py`:
    .venv/bin/python -c "from agentrl.store.migrations import revision; revision('add a foo column')"
autogenerates `versions/NNNN_*.py` (the next number) by comparing the models with a scratch SQLite
database at head. Read and fix it by hand before committing (autogenerate misses some changes).

What this is not: a downgrade policy. Downgrades are written for each revision but only upgrades are
run by agentrl (`agentrl db upgrade`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, inspect

HERE = Path(__file__).resolve().parent
INITIAL_REVISION = "0001"
VERSION_TABLE = "alembic_version"


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """Alembic's config, pointing at this folder and at a live connection (or a URL for offline use)."""
    config = Config()
    config.set_main_option("script_location", str(HERE))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade the database behind `engine` to `revision`; return the revision it is at afterwards."""
    with engine.begin() as connection:
        tables = set(inspect(connection).get_table_names())
        config = alembic_config(connection)
        if "runs" in tables and VERSION_TABLE not in tables:
            command.stamp(config, INITIAL_REVISION)  # a store created by create_all before Alembic
        command.upgrade(config, revision)
    return current(engine)


def current(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str | None:
    """The newest revision in `versions/`."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def revision(message: str) -> None:
    """Autogenerate a new revision file from the difference between `models.py` and the head schema."""
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{scratch}/scratch.db")
        upgrade(engine)
        with engine.begin() as connection:
            latest = head()
            number = f"{int(latest) + 1:04d}" if latest else INITIAL_REVISION
            command.revision(alembic_config(connection), message=message, autogenerate=True, rev_id=number)
        engine.dispose()
