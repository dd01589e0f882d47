"""`agentrl envs list`: the registered environments, including installed plugins, with their tools."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("envs", help="list registered environments")
    parser.add_argument("action", choices=["list"], help="what to do")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.env import list_envs

    for info in list_envs():
        tools = ", ".join(spec["function"]["name"] for spec in info.tools) or "-"
        print(f"{info.id:32s} tools: {tools:24s} plugin: {info.plugin or '-'}")
    return 0
