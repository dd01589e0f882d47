"""The `--task NAME` and `--config PATH` arguments `agentrl train` and `agentrl eval` share.

What this is: their definition, the check that at least one is given, and `load_run_config`, which hands
them to `agentrl.config.load_config` (whose `resolve_config_path` says which file wins: `--config`, then
`./configs/NAME.yaml`, then the config an installed env plugin ships). What this is not: a subcommand.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError

TASK_HELP = "the run config's name: ./configs/TASK.yaml, else the config an installed env plugin ships"
CONFIG_HELP = "a run config YAML file anywhere (the run's task name: the file's stem, unless --task says)"


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", help=TASK_HELP)
    parser.add_argument("--config", type=Path, metavar="PATH", help=CONFIG_HELP)


def task_name(args: argparse.Namespace) -> str:
    """The run's task name: --task, else the --config file's stem."""
    if args.task:
        return str(args.task)
    if args.config is not None:
        return Path(args.config).stem
    raise ConfigError("say which run config to use: --task NAME (see `agentrl envs list`) or --config PATH")


def config_arguments(args: argparse.Namespace) -> list[str]:
    """The command-line arguments that name the same config again (for a re-executed command)."""
    return ["--task", task_name(args), *(["--config", str(args.config)] if args.config else [])]


def load_run_config(args: argparse.Namespace, overrides: Sequence[str]) -> Any:
    """The typed `RunConfig` the arguments name, with `overrides` applied."""
    from agentrl.config import load_config

    return load_config(task_name(args), overrides, config_path=args.config)
