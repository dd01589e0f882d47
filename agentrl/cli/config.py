"""`agentrl config show [--task NAME | --config PATH] [key=value ...]` and `agentrl config reference [--write
PATH]`: a run's effective config with where each value came from, and the run config's reference.

What this is: thin handlers over `agentrl.config` (the loader) and `agentrl.config_reference`. `show` prints
one line per key: its value and its source, "default", the run config file it came from (a plugin's
shipped file named as such), or "override". What this is not: a way to change a config file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentrl.cli.runconfig import add_config_arguments


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("config", help="a run's effective config and sources; the config reference")
    actions = parser.add_subparsers(dest="action", required=True)
    show = actions.add_parser(
        "show", help="the effective config of --task/--config with overrides, and sources"
    )
    add_config_arguments(show)
    show.add_argument("overrides", nargs="*", metavar="key=value", help="as agentrl train takes them")
    show.set_defaults(handler=show_command)
    reference = actions.add_parser("reference", help="every key's type, default and meaning, as Markdown")
    reference.add_argument("--write", type=Path, metavar="PATH", help="write it there (docs/config.md)")
    reference.set_defaults(handler=reference_command)


def show_command(args: argparse.Namespace) -> int:
    import yaml

    from agentrl.cli.runconfig import load_run_config, task_name
    from agentrl.config import CONFIG_DIR, resolve_config_path, to_dict
    from agentrl.config_reference import provenance

    config = load_run_config(args, list(args.overrides))
    path = resolve_config_path(task_name(args), args.config)
    shipped = args.config is None and Path(path).parent.resolve() != CONFIG_DIR.resolve()
    label = f"plugin config {path}" if shipped else f"file {path}"
    file_data = yaml.safe_load(Path(path).read_text()) or {}
    for key, value, source in provenance(to_dict(config), file_data, label, list(args.overrides)):
        where = "--task" if key == "task" and source == "default" else source
        print(f"{key} = {json.dumps(value, default=str)}    # {where}")
    return 0


def reference_command(args: argparse.Namespace) -> int:
    from agentrl.config import RunConfig
    from agentrl.config_reference import reference_markdown

    text = reference_markdown(RunConfig)
    if args.write:
        args.write.write_text(text)
        print(f"wrote {args.write}")
    else:
        print(text, end="")
    return 0
