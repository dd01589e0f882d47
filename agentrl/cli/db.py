"""`agentrl db upgrade|current [--url URL]`: bring the run store's schema to the newest Alembic revision, or
say which revision it is at.

What this is: thin handlers over `agentrl.store.migrations`. The store is `--url`, else $AGENTRL_DB_URL,
else sqlite:///runs/agentrl.db. `upgrade` is also what every `open_store` does, so running it by hand is
needed only to prepare a shared database (e.g. Postgres) before the first run. What this is not: a way to
write revisions (see `agentrl/store/migrations/__init__.py`) or to downgrade.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("db", help="manage the run store's schema (Alembic migrations)")
    parser.add_argument(
        "action", choices=["upgrade", "current"], help="upgrade to head, or show the revision"
    )
    parser.add_argument("--url", help="store URL (default: $AGENTRL_DB_URL, else sqlite:///runs/agentrl.db)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from agentrl.errors import StoreError
    from agentrl.store.migrations import current, head
    from agentrl.store.repository import open_store, resolve_url

    url = resolve_url(args.url)
    shown = make_url(url).render_as_string(hide_password=True)
    if args.action == "upgrade":
        store = open_store(url)  # opening the store upgrades it to head
        engine = store.engine
    else:
        engine = create_engine(url)  # a bare engine: `current` must not change what it inspects
    try:
        print(f"{shown}: at revision {current(engine) or '(none)'} (head: {head()})")
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot read the schema revision of {shown}: {exc}") from exc
    finally:
        engine.dispose()
    return 0
