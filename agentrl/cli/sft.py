"""`agentrl sft --task NAME --demos PATH [key=value ...]`: supervised fine-tuning on demonstrations.

The cold start before RL: NLL on the assistant tokens of the episodes `agentrl demos` wrote, with the
trainer's model loading, micro-batching, LoRA, FSDP2 ranks (`trainer.nproc`), checkpoints and metrics, and
a held-out evaluation before and after. Its runs/<name>/final is a model `agentrl train model.name=...`
takes. Options: `sft.*` (agentrl/trainer/sft_update.py); see docs/cold_start.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from agentrl.cli.runconfig import add_config_arguments, config_arguments, load_run_config


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("sft", help="supervised fine-tuning on demonstrations (agentrl demos)")
    add_config_arguments(parser)
    parser.add_argument("--demos", metavar="PATH", help="runs/<name>/demos.jsonl (same as sft.demos=PATH)")
    parser.add_argument(
        "--service-url",
        metavar="URL",
        help="a running env service or fleet load balancer (same as the override service.url=URL)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. sft.epochs=2 sft.lr=1e-4")
    parser.set_defaults(handler=run)


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The overrides --demos and --service-url stand for; pure."""
    pairs = (("sft.demos", args.demos), ("service.url", args.service_url))
    return [f"{key}={value}" for key, value in pairs if value]


def format_result(label: str, result: Any) -> str:
    return (
        f"{label}: success {result.success_rate:.3f}, valid turns {1 - result.invalid_turn_rate:.3f} over "
        f"{result.episodes} episodes (mean reward {result.mean_reward:.3f}, infrastructure failures "
        f"{result.infra_failures})"
    )


def run(args: argparse.Namespace) -> int:
    from agentrl.cli.train import launch_ranks

    overrides = [*args.overrides, *flag_overrides(args)]
    config = load_run_config(args, overrides)
    if config.trainer.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch_ranks(config_arguments(args), overrides, config.trainer.nproc, subcommand="sft")
    # only a process that trains imports the trainer (seconds): not the one that launches torchrun's ranks
    from agentrl.trainer.distributed import die_with_parent, exit_rank
    from agentrl.trainer.sft import sft

    under_torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if under_torchrun:
        die_with_parent()
    before, after, run_dir = asyncio.run(sft(config))
    if before is not None:
        print(format_result("held-out before", before))
    if after is not None:
        print(format_result("held-out after ", after))
    if run_dir:
        print(f"run directory: {run_dir}")
        print(f"next: agentrl train --task {config.task} model.name={run_dir}/final")
    if under_torchrun:
        exit_rank(0)
    return 0
