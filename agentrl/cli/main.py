"""The `agentrl` command: parses the subcommand and hands off to one module per subcommand.

What this is: argument parsing and the translation of agentrl's own errors into a one-line message and exit
code 2. The built-in subcommands are the modules of this package; installed plugins add theirs through the
entry-point group `agentrl.cli` (`CLI_PLUGIN_GROUP`), each entry point naming a module (or any object)
with `add_parser(commands)`, like the built-in modules. A plugin that fails to import or to add its parser
does not break the other subcommands: its subcommand stays listed, and running it prints an
`EnvPluginError` that names the plugin.

What this is not: any logic; each subcommand module holds its own. Nothing here imports a plugin package
by name (tests/unit/test_cli_plugins.py checks it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agentrl.cli import config, db, demos, envs, eval, fleet, runs, sandbox, serve, sft, study, train, ui
from agentrl.errors import AgentRLError, EnvPluginError
from agentrl.memory import choose_allocator

CLI_PLUGIN_GROUP = "agentrl.cli"

SUBCOMMANDS = {
    "train": train,
    "eval": eval,
    "demos": demos,
    "sft": sft,
    "envs": envs,
    "sandbox": sandbox,
    "runs": runs,
    "db": db,
    "ui": ui,
    "serve": serve,
    "fleet": fleet,
    "study": study,
    "config": config,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrl", description="Train LLM agents with reinforcement learning."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS.values():
        module.add_parser(commands)
    for entry_point in plugin_entry_points():
        add_plugin_parser(commands, entry_point)
    return parser


def plugin_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed `agentrl.cli` entry points, one per name (the first found), sorted by name."""
    unique: dict[str, importlib.metadata.EntryPoint] = {}
    for entry_point in importlib.metadata.entry_points(group=CLI_PLUGIN_GROUP):
        unique.setdefault(entry_point.name, entry_point)
    return [unique[name] for name in sorted(unique)]


def add_plugin_parser(commands: Any, entry_point: importlib.metadata.EntryPoint) -> None:
    """Let one plugin add its subcommand; a failing plugin gets a stand-in that reports the failure."""
    try:
        entry_point.load().add_parser(commands)
    except Exception as exc:
        add_broken_plugin(commands, entry_point, plugin_error(entry_point, exc))


def plugin_error(entry_point: importlib.metadata.EntryPoint, exc: Exception) -> EnvPluginError:
    return EnvPluginError(
        f"the {CLI_PLUGIN_GROUP} plugin {entry_point.name!r} ({entry_point.value}) failed to load: {exc!r}. "
        "Fix or reinstall the package that provides it "
        "(pip install -e envs/<name> --no-deps --no-build-isolation), or uninstall it."
    )


def add_broken_plugin(
    commands: Any, entry_point: importlib.metadata.EntryPoint, error: EnvPluginError
) -> None:
    """A subcommand under the plugin's name that takes any arguments and raises `error` when run."""
    if entry_point.name in commands.choices:  # the plugin got as far as adding its own subcommand
        print(f"agentrl: {type(error).__name__}: {error}", file=sys.stderr)
        return
    parser = commands.add_parser(
        entry_point.name, help=f"(broken plugin: {entry_point.value})", add_help=False
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=_raiser(error))


def _raiser(error: EnvPluginError) -> Callable[[argparse.Namespace], NoReturn]:
    def raise_error(args: argparse.Namespace) -> NoReturn:
        raise error

    return raise_error


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
