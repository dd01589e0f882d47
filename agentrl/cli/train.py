"""`agentrl train --task NAME [key=value ...]`: train on `configs/NAME.yaml` with dotted overrides."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from agentrl.cli.eval import format_eval


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("train", help="train a policy on a task (configs/TASK.yaml)")
    parser.add_argument("--task", required=True, help="config name: configs/TASK.yaml")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=2"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.trainer.train import train

    config = load_config(args.task, args.overrides)
    before, after, run_dir = asyncio.run(train(config))
    if before is not None:
        print(format_eval("held-out before", before))
    if after is not None:
        print(format_eval("held-out after ", after))
    print(f"run directory: {run_dir}")
    return 0
