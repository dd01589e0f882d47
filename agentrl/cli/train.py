"""`agentrl train --task NAME | --config PATH [key=value ...]`: train on a run config with dotted overrides.

Which file `--task NAME` reads: `agentrl.config.resolve_config_path` (./configs/NAME.yaml, else the config an
installed env plugin ships).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
from typing import Any

from agentrl.cli.eval import format_eval
from agentrl.cli.runconfig import add_config_arguments, config_arguments, load_run_config


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("train", help="train a policy on a task (configs/TASK.yaml or a plugin's)")
    add_config_arguments(parser)
    parser.add_argument(
        "--service-url",
        metavar="URL",
        help="a running env service or fleet load balancer (same as the override service.url=URL)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=2"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *([f"service.url={args.service_url}"] if args.service_url else [])]
    config = load_run_config(args, overrides)
    if config.trainer.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch_ranks(config_arguments(args), overrides, config.trainer.nproc)
    # only a process that trains imports the trainer (seconds): not the one that launches torchrun's ranks
    from agentrl.trainer.distributed import die_with_parent, exit_rank
    from agentrl.trainer.train import train

    under_torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if under_torchrun:  # torchrun gave this rank a session of its own
        die_with_parent()
    before, after, run_dir = asyncio.run(train(config))
    if before is not None:
        print(format_eval("held-out before", before))
    if after is not None:
        print(format_eval("held-out after ", after))
    if run_dir:  # rank 0 reports; the other ranks return ""
        print(f"run directory: {run_dir}")
    if under_torchrun:
        exit_rank(0)  # everything is written and closed: skip interpreter finalization (see exit_rank)
    return 0


def launch_ranks(config_args: list[str], overrides: list[str], nproc: int, subcommand: str = "train") -> int:
    """Re-run this command (`subcommand`: train, or sft) under torchrun with `nproc` ranks on this host
    (rendezvous on 127.0.0.1)."""
    from agentrl.trainer.distributed import die_with_parent

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        "-m",
        "agentrl.cli.main",
        subcommand,
        *config_args,
        *overrides,
    ]
    # torchrun dies with this process, and its ranks with torchrun (they call die_with_parent themselves)
    return subprocess.run(command, check=False, preexec_fn=die_with_parent).returncode
