"""`agentrl demos --task NAME --policy scripted|run:RUN_ID [--n N] [key=value ...]`: write demonstrations.

Episodes of the task's env on its train split, played through the real env service by the env's scripted
policy or replayed from the successful training episodes of an earlier run, written with their tokens as the
runner renders them (runs/<name>/demos.jsonl) for `agentrl sft`. See `agentrl/demos.py` and
docs/cold_start.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentrl.cli.runconfig import add_config_arguments, load_run_config


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "demos", help="write demonstrations (scripted policy or a run's successes) for agentrl sft"
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--policy",
        default="scripted",
        help="scripted (the env's scripted policy) or run:RUN_ID (a run's successful training episodes)",
    )
    parser.add_argument("--n", type=int, default=64, help="demonstrations to keep (default 64)")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes played at once (default 4)")
    parser.add_argument(
        "--service-url",
        metavar="URL",
        help="a running env service or fleet load balancer (same as the override service.url=URL)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. name=maze-demos")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.demos import run_demos

    overrides = [*args.overrides, *([f"service.url={args.service_url}"] if args.service_url else [])]
    config = load_run_config(args, overrides)
    result = run_demos(config, args.policy, args.n, args.concurrency)
    metrics = result.metrics
    dropped = ", ".join(
        f"{reason} {int(metrics[f'demos/{reason}'])}"
        for reason in ("failed", "too_long", "policy_stopped", "infra_error", "rejected")
        if metrics.get(f"demos/{reason}")
    )
    print(
        f"wrote {result.kept} demonstrations to {result.path} ({int(metrics['demos/kept'])} of "
        f"{result.played} played episodes qualified" + (f"; dropped: {dropped})" if dropped else ")")
    )
    if not result.kept:
        print("no demonstration qualified: see the episodes of this run in `agentrl ui`", file=sys.stderr)
        return 1
    if result.kept < args.n:
        print(f"warning: asked for {args.n}, the train split gave {result.kept}")
    print(f"next: agentrl sft --task {config.task} --demos {result.path}")
    return 0
