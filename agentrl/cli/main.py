"""The `agentrl` command: parses the subcommand and hands off to one module per subcommand.

What this is: argument parsing and the translation of agentrl's own errors into a one-line message and exit
code 2. What this is not: any logic; each subcommand module holds its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agentrl.cli import db, envs, eval, runs, sandbox, search, serve, swebench, train, ui
from agentrl.errors import AgentRLError
from agentrl.memory import choose_allocator

SUBCOMMANDS = {
    "train": train,
    "eval": eval,
    "envs": envs,
    "sandbox": sandbox,
    "runs": runs,
    "db": db,
    "ui": ui,
    "swebench": swebench,
    "serve": serve,
    "search": search,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrl", description="Train LLM agents with reinforcement learning."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS.values():
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    choose_allocator(reexec=argv is None)  # first: it may re-execute this command under tcmalloc
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except AgentRLError as exc:
        print(f"agentrl {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
