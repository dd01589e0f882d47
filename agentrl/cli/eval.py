"""`agentrl eval --task NAME | --config PATH [key=value ...]`: held-out success rate of the configured model.

Which file `--task NAME` reads: `agentrl.config.resolve_config_path`, as for `agentrl train`.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from agentrl.cli.runconfig import add_config_arguments, load_run_config


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("eval", help="held-out success rate of a model on a task")
    add_config_arguments(parser)
    parser.add_argument(
        "--service-url",
        metavar="URL",
        help="a running env service or fleet load balancer (same as the override service.url=URL)",
    )
    parser.add_argument("--engine", choices=["auto", "cached", "hf", "openai"], help="same as engine.kind=")
    parser.add_argument("--model", help="openai: the served model name (engine.openai.model=)")
    parser.add_argument("--base-url", help="openai: the server's API root (engine.openai.base_url=)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. model.name=runs/RUN/final")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.trainer.run import run_eval

    result = asyncio.run(run_eval(load_run_config(args, [*args.overrides, *flag_overrides(args)])))
    print(format_eval("held-out", result))
    return 0


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides that --service-url, --engine, --model and --base-url stand for; pure."""
    pairs = (
        ("service.url", args.service_url),
        ("engine.kind", args.engine),
        ("engine.openai.model", args.model),
        ("engine.openai.base_url", args.base_url),
    )
    return [f"{key}={value}" for key, value in pairs if value]


def format_eval(label: str, result: Any) -> str:
    return (
        f"{label}: success {result.success_rate:.3f} over {result.episodes} episodes "
        f"(mean reward {result.mean_reward:.3f}, infrastructure failures {result.infra_failures})"
    )
