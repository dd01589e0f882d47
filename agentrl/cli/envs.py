"""`agentrl envs list|new|check`: the registered environments, a new env plugin, and an env's health.

- `list`: every registered env (installed plugins included) with its plugin (distribution and version), its
  tools, and the run configs and task suites its plugin ships.
- `new NAME [--sandboxed] [--dir PATH]`: write an installable plugin package that trains as it is
  (`agentrl.devtools.scaffold`).
- `check ID [--task NAME | --suite SUITE] [--policy random|scripted|MODULE:FUNCTION] ...`: `check_env`, then
  episodes through a real env service session, as a short report; exit code 1 when a check failed
  (`agentrl.devtools.service_check`). Its header names the task file it read (in ./tasks/ or the plugin's).
  The policies are `ScriptedPolicy`s (`agentrl.env.scripted`). Its last finding, "resources", warns of the
  files and sockets the check left unclosed (ResourceWarnings, `agentrl.env.checker`'s recorder), with where
  each was opened when PYTHONTRACEMALLOC is set.

What this is not: the logic; each action is a thin handler over the modules named above.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.errors import ConfigError, EnvNotFound

if TYPE_CHECKING:
    from agentrl.devtools.service_check import Finding
    from agentrl.env.scripted import ScriptedPolicy

RESOURCE_WARNINGS_SHOWN = 3  # distinct unclosed files or sockets named on the "resources" line


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("envs", help="list, create and check environments")
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="registered envs: plugin, version, tools, shipped configs and tasks")
    new = actions.add_parser("new", help="write a new env plugin package that trains as it is")
    new.add_argument("name", metavar="NAME", help="lowercase, e.g. hilo or my-game")
    new.add_argument("--sandboxed", action="store_true", help="an env that runs commands in a Docker sandbox")
    new.add_argument("--dir", type=Path, help="the folder to write (default: ./NAME)")
    check = actions.add_parser("check", help="check_env, then episodes through a real env service session")
    check.add_argument("env_id", metavar="ID", help="a registered env id, e.g. agentrl/Maze-v0")
    source = check.add_mutually_exclusive_group()
    source.add_argument(
        "--task", help="the run config with the env kwargs and tasks (default: the one for ID)"
    )
    source.add_argument("--suite", help="a task suite to draw tasks from instead (no env kwargs)")
    check.add_argument(
        "--policy",
        default="random",
        help="random (the default), scripted (the env's own scripted_policy), or MODULE:FUNCTION: a "
        "ScriptedPolicy (agentrl.env.scripted) or a solve(task, transcript) -> turn text",
    )
    check.add_argument("--episodes", type=int, help="episodes through the service (default 8)")
    check.add_argument("--group-size", type=int, help="episodes per task and seed (default 2)")
    check.add_argument("--max-turns", type=int, help="turns before an episode is cut (default: the config's)")
    check.add_argument("--seed", type=int, help="the policy's and the episodes' seed")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    actions = {"list": list_command, "new": new_command, "check": check_command}
    return actions[args.action](args)


# --- list ----------------------------------------------------------------------------------------------


def list_command(args: argparse.Namespace) -> int:
    from agentrl.env import list_envs
    from agentrl.env.plugin_data import installed_plugins

    plugins = {plugin.name: plugin for plugin in installed_plugins()}
    print(format_env_table([env_row(info, plugins.get(info.plugin or "")) for info in list_envs()]))
    return 0


def env_row(info: Any, plugin: Any) -> dict[str, str]:
    """One env's line of `envs list`: the configs its plugin ships that name it, and their task suites."""
    from agentrl.env.plugin_data import config_env_id, config_suite

    shipped = plugin.configs() if plugin is not None else {}
    configs = [name for name, path in shipped.items() if config_env_id(path) == info.id]
    suites = {config_suite(shipped[name]) for name in configs}
    return {
        "id": info.id,
        "plugin": _plugin_label(plugin, info.plugin),
        "tools": ", ".join(spec["function"]["name"] for spec in info.tools) or "-",
        "config": ", ".join(configs) or "-",
        "tasks": ", ".join(sorted(s for s in suites if s and plugin.suite_dir(s))) or "-",
    }


def _plugin_label(plugin: Any, name: str | None) -> str:
    if plugin is None:
        return name or "-"
    if plugin.distribution:
        return f"{plugin.name} ({plugin.distribution} {plugin.version})"
    return plugin.name


def format_env_table(rows: Sequence[Mapping[str, str]]) -> str:
    """One line per env: id, plugin (distribution and version), tools, shipped config(s), shipped suite(s)."""
    columns = ("id", "plugin", "tools", "config", "tasks")
    widths = {c: max([len(c), *(len(row[c]) for row in rows)]) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip()]
    lines += ["  ".join(row[c].ljust(widths[c]) for c in columns).rstrip() for row in rows]
    if not rows:
        lines.append("(no environments registered; pip install an env plugin, or `agentrl envs new NAME`)")
    return "\n".join(lines)


# --- new -----------------------------------------------------------------------------------------------


def new_command(args: argparse.Namespace) -> int:
    from agentrl.devtools.scaffold import install_command, plugin_names, write_plugin

    names = plugin_names(args.name)
    folder = args.dir or Path(args.name)
    written = write_plugin(args.name, folder, sandboxed=args.sandboxed)
    print(f"wrote {len(written)} files to {folder}/: the env plugin {names.dist}, registering {names.env_id}")
    print("next:")
    print(f"  {install_command(folder)}")
    print(f"  agentrl envs check {names.env_id} --policy scripted")
    print(f"  agentrl train --task {names.name} train.steps=1 eval.before=false eval.after=false")
    return 0


# --- check ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckSource:
    """Where `envs check` takes its tasks and env kwargs from: a run config, or a bare task suite."""

    config: str | None
    env_kwargs: dict[str, Any]
    root: str
    suite: str
    split: str
    max_turns: int


def check_command(args: argparse.Namespace) -> int:
    from agentrl.devtools.service_check import CheckConfig, check_service_env, format_report
    from agentrl.env import list_envs
    from agentrl.env.checker import recording_resource_warnings
    from agentrl.env.plugin_data import plugin_named
    from agentrl.tasks import load_tasks, task_file

    registered = {info.id: info for info in list_envs()}
    if args.env_id not in registered:
        raise EnvNotFound(not_registered_message(args.env_id, list(registered)))
    source = check_source(args)
    given = {"episodes": args.episodes, "group_size": args.group_size, "seed": args.seed}
    config = replace(
        CheckConfig(max_turns=args.max_turns or source.max_turns),
        **{key: value for key, value in given.items() if value is not None},
    )
    plugin = plugin_named(registered[args.env_id].plugin)
    shipped_by = (
        f"plugin {plugin.distribution or plugin.name} {plugin.version or ''}".rstrip() if plugin else ""
    )
    header = "; ".join(
        part
        for part in (
            shipped_by,
            f"config {source.config}" if source.config else f"suite {source.suite}",
            f"tasks {task_file(source.root, source.suite, source.split)}",
            f"policy {args.policy}",
            f"{config.episodes} episodes in groups of {config.group_size}",
        )
        if part
    )
    tasks = load_tasks(source.root, source.suite, source.split)
    policy = None if args.policy == "random" else load_policy(args.policy, args.env_id)
    with recording_resource_warnings() as leaks:
        report = check_service_env(
            args.env_id,
            tasks,
            env_kwargs=source.env_kwargs,
            policy=policy,
            config=config,
            header=f"{args.env_id} ({header})",
        )
    report.findings.append(resource_finding(leaks))
    print(format_report(report))
    return report.exit_code(args.strict)


def resource_finding(leaks: Sequence[str]) -> Finding:
    """The "resources" line: "ok", or a warning naming the files and sockets the check left unclosed (the
    lines of `recording_resource_warnings`; the same file or socket opened again counts once in the names)."""
    from agentrl.devtools.service_check import Finding

    if not leaks:
        return Finding("ok", "resources", "every file and socket opened was closed (no ResourceWarning)")
    distinct = list(dict.fromkeys(re.sub(r"fd=\d+", "fd=N", leak) for leak in leaks))
    shown = "; ".join(distinct[:RESOURCE_WARNINGS_SHOWN])
    more = (
        f" (and {len(distinct) - RESOURCE_WARNINGS_SHOWN} more)"
        if len(distinct) > RESOURCE_WARNINGS_SHOWN
        else ""
    )
    return Finding(
        "warn",
        "resources",
        f"{len(leaks)} ResourceWarning(s), files or sockets never closed: {shown}{more}; close what the env "
        "opens in env.close() (or use a with-block)",
    )


def check_source(args: argparse.Namespace) -> CheckSource:
    """The check's tasks and env kwargs: --suite (tasks only), else --task, else the one run config (in
    ./configs/ or shipped by a plugin) whose env.id is the env checked."""
    from agentrl.agent.rollout_config import RolloutConfig
    from agentrl.config import TasksConfig, load_config

    if args.suite:
        tasks = TasksConfig()
        return CheckSource(None, {}, tasks.root, args.suite, tasks.train_split, RolloutConfig().max_turns)
    name = args.task or config_naming(args.env_id)
    config = load_config(name)
    if config.env.id != args.env_id:
        raise ConfigError(f"the run config {name!r} is for {config.env.id!r}, not {args.env_id!r}")
    tasks = config.tasks
    return CheckSource(
        name, dict(config.env.kwargs), tasks.root, tasks.suite, tasks.train_split, config.rollout.max_turns
    )


def config_naming(env_id: str, config_dir: Path | None = None) -> str:
    """The name of the one run config whose env.id is `env_id`: ./configs/ first, then the configs installed
    plugins ship; `ConfigError` when there is none or more than one."""
    from agentrl.config import CONFIG_DIR
    from agentrl.env.plugin_data import config_env_id, installed_plugins

    folder = config_dir or CONFIG_DIR
    candidates = {name: path for plugin in installed_plugins() for name, path in plugin.configs().items()}
    candidates |= {path.stem: path for path in sorted(folder.glob("*.yaml"))}  # the working directory wins
    names = sorted(name for name, path in candidates.items() if config_env_id(path) == env_id)
    if len(names) == 1:
        return names[0]
    if not names:
        raise ConfigError(
            f"no run config names {env_id!r} (in ./configs/ or shipped by a plugin); pass --task NAME for "
            "its env kwargs and tasks, or --suite SUITE for tasks only"
        )
    raise ConfigError(f"several run configs name {env_id!r} ({', '.join(names)}); pick one with --task NAME")


def not_registered_message(env_id: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"no environment registered as {env_id!r}.{hint} `agentrl envs list` shows the registered ones."


def load_policy(spec: str, env_id: str) -> ScriptedPolicy:
    """The scripted policy `--policy` names: `scripted`, the env class's own; MODULE:FUNCTION, a
    `ScriptedPolicy` (a generator function), or a `solve(task, transcript) -> str` (adapted to one)."""
    from agentrl.env import scripted_policy_of, transcript_policy

    if spec == "scripted":
        policy = scripted_policy_of(env_id)
        if policy is None:
            raise ConfigError(
                f"{env_id} has no scripted policy (an optional `scripted_policy` on the env class; "
                "docs/cold_start.md): give MODULE:FUNCTION, or the default random policy"
            )
        return policy
    named = import_named(spec)
    return named if inspect.isgeneratorfunction(named) else transcript_policy(named)


def import_named(spec: str) -> Any:
    """The callable MODULE:FUNCTION names."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f"--policy {spec!r}: give random, scripted or MODULE:FUNCTION, "
            "e.g. agentrl_hilo.policy:scripted_policy"
        )
    try:
        named = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--policy {spec!r}: cannot import it ({exc!r})") from exc
    if not callable(named):
        raise ConfigError(
            f"--policy {spec!r} is not callable; it must be a ScriptedPolicy (agentrl.env.scripted)"
        )
    return named
