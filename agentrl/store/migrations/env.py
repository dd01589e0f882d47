"""Alembic's entry point for the run store: runs the migrations on the connection `migrations.upgrade`
passes in `config.attributes["connection"]`, or on an engine made from `sqlalchemy.url`, or (offline,
`--sql`) renders them as SQL for that URL. `render_as_batch` lets later revisions alter SQLite tables."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from agentrl.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.begin() as owned:
            run_on(owned)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
