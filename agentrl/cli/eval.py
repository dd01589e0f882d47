"""`agentrl eval --task NAME [key=value ...]`: greedy held-out success rate of the configured model."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("eval", help="held-out success rate of a model on a task")
    parser.add_argument("--task", required=True, help="config name: configs/TASK.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. model.name=runs/RUN/final")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.trainer.train import run_eval

    result = asyncio.run(run_eval(load_config(args.task, args.overrides)))
    print(format_eval("held-out", result))
    return 0


def format_eval(label: str, result: Any) -> str:
    return (
        f"{label}: success {result.success_rate:.3f} over {result.episodes} episodes "
        f"(mean reward {result.mean_reward:.3f}, infrastructure failures {result.infra_failures})"
    )
