"""`agentrl ui [--db URL] [--port P]`: serve the trajectory viewer (`agentrl.ui.app`) on 127.0.0.1.

What this is: uvicorn running the viewer app over one store (`--db`, else $AGENTRL_DB_URL, else
sqlite:///runs/agentrl.db) until interrupted. What this is not: reachable from other machines: it binds the
loopback address only (use an SSH tunnel to look from elsewhere); there is no authentication.
"""

from __future__ import annotations

import argparse
from typing import Any

HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("ui", help="serve the trajectory viewer on 127.0.0.1")
    parser.add_argument(
        "--db", metavar="URL", help="store URL (default: $AGENTRL_DB_URL, else runs/agentrl.db)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from agentrl.store.repository import close_store, open_store
    from agentrl.ui.app import create_app

    close_store(open_store(args.db))  # fail here, with agentrl's message, when the store cannot be opened
    print(f"agentrl viewer on http://{HOST}:{args.port}/ (Ctrl-C to stop)", flush=True)
    uvicorn.run(create_app(args.db), host=HOST, port=args.port, log_level="warning")
    return 0
