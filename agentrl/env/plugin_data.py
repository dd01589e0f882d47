"""What installed env plugins ship besides their envs: default run configs and task suites.

What this is: the lookup that lets any folder run `agentrl train --task NAME` once the plugin providing NAME
is installed. An env plugin is the package an entry point of the group `agentrl.envs` names (see
`agentrl.env.registration`); what it ships is package data in that package's `data/` folder:

    <package>/data/configs/<name>.yaml          a run config: `agentrl train --task <name>`
    <package>/data/tasks/<suite>/<split>.jsonl  a task suite: `tasks.suite: <suite>` in a config

Finding them imports nothing: the package's folder comes from `importlib.util.find_spec`, so listing what
the plugins ship never runs a plugin's code. Two plugins shipping the same config name or suite is a
`ConfigError` naming both (the working directory's files, which win, settle it).

What this is not: the resolution order (a `--config` file, then `./configs/` and `./tasks/`, then the
plugins), which is `agentrl.config.resolve_config_path` and `agentrl.tasks.resolve_suite`; nor a reader:
this module returns paths. docs/environments.md explains the layout to plugin authors.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentrl.env.registration import PLUGIN_GROUP
from agentrl.errors import ConfigError

DATA_DIR = "data"
CONFIGS_DIR = "configs"
TASKS_DIR = "tasks"


@dataclass(frozen=True)
class Plugin:
    """One installed env plugin, as its entry point and package metadata describe it.

    name:         the entry point's name (`calc` in `calc = "agentrl_calc"`)
    module:       the module the entry point imports (`agentrl_calc`)
    distribution: the installed distribution that declares it (`agentrl-env-calc`), when known
    version:      that distribution's version, when known
    data:         `<package>/data` of the module's top-level package, when that folder exists
    """

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    data: Path | None = None

    def configs(self) -> dict[str, Path]:
        """The run configs it ships, by name (`data/configs/<name>.yaml`)."""
        folder = self.data / CONFIGS_DIR if self.data else None
        if folder is None or not folder.is_dir():
            return {}
        return {path.stem: path for path in sorted(folder.glob("*.yaml")) if path.is_file()}

    def suites(self) -> list[str]:
        """The task suites it ships: every folder under `data/tasks/` holding a `.jsonl` file, as a relative
        path (`calc`, `maze/level1`); symlinked folders are followed."""
        folder = self.data / TASKS_DIR if self.data else None
        if folder is None or not folder.is_dir():
            return []
        found = {
            Path(directory).relative_to(folder).as_posix()
            for directory, _, files in os.walk(folder, followlinks=True)
            if any(name.endswith(".jsonl") for name in files)
        }
        return sorted(found - {"."})

    def suite_dir(self, suite: str) -> Path | None:
        """`data/tasks/<suite>/` when this plugin ships that suite."""
        if self.data is None or not _is_relative_name(suite):
            return None
        folder = self.data / TASKS_DIR / suite
        return folder if folder.is_dir() else None


def installed_plugins() -> list[Plugin]:
    """Every installed `agentrl.envs` entry point (the first found of each name), sorted by name."""
    unique: dict[str, importlib.metadata.EntryPoint] = {}
    for entry_point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        unique.setdefault(entry_point.name, entry_point)
    return [_plugin(unique[name]) for name in sorted(unique)]


def plugin_named(name: str | None) -> Plugin | None:
    """The installed plugin whose entry point is called `name`, if any."""
    return next((plugin for plugin in installed_plugins() if plugin.name == name), None)


def shipped_config(task: str, plugins: list[Plugin] | None = None) -> Path | None:
    """`data/configs/<task>.yaml` of the one installed plugin that ships it; None when none does."""
    found = [(p, p.configs()[task]) for p in _or_installed(plugins) if task in p.configs()]
    return _one(found, f"a config named {task!r}", "pass --config PATH, or put configs/NAME.yaml here")


def shipped_suite(suite: str, plugins: list[Plugin] | None = None) -> Path | None:
    """`data/tasks/<suite>/` of the one installed plugin that ships it; None when none does."""
    found = [(p, folder) for p in _or_installed(plugins) if (folder := p.suite_dir(suite)) is not None]
    return _one(found, f"the task suite {suite!r}", f"put the suite you mean in tasks/{suite}/ here")


def shipped_config_names(plugins: list[Plugin] | None = None) -> dict[str, str]:
    """Every config name an installed plugin ships, with the plugin's name."""
    return {name: p.name for p in _or_installed(plugins) for name in p.configs()}


def config_env_id(path: Path) -> str | None:
    """`env.id` of a run config file, or None when the file does not say (or is not valid YAML)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    env = data.get("env") if isinstance(data, Mapping) else None
    env_id = env.get("id") if isinstance(env, Mapping) else None
    return env_id if isinstance(env_id, str) else None


def config_suite(path: Path) -> str | None:
    """`tasks.suite` of a run config file, or None when the file does not say."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    suite = tasks.get("suite") if isinstance(tasks, Mapping) else None
    return suite if isinstance(suite, str) else None


def _plugin(entry_point: importlib.metadata.EntryPoint) -> Plugin:
    dist: Any = getattr(entry_point, "dist", None)
    return Plugin(
        name=entry_point.name,
        module=entry_point.module,
        distribution=dist.name if dist is not None else None,
        version=dist.version if dist is not None else None,
        data=_data_dir(entry_point.module),
    )


def _data_dir(module: str) -> Path | None:
    """`<package>/data` of the module's top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return None  # a broken plugin ships nothing; `make` reports it when its env is asked for
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location) / DATA_DIR
        if folder.is_dir():
            return folder
    return None


def _or_installed(plugins: list[Plugin] | None) -> list[Plugin]:
    return installed_plugins() if plugins is None else plugins


def _one(found: list[tuple[Plugin, Path]], what: str, fix: str) -> Path | None:
    if len(found) > 1:
        names = ", ".join(f"{plugin.name} ({path})" for plugin, path in found)
        raise ConfigError(f"several installed env plugins ship {what}: {names}; {fix}")
    return found[0][1] if found else None


def _is_relative_name(suite: str) -> bool:
    """A suite name is a relative path inside `data/tasks/` (`maze/level1`), never `..` or absolute."""
    parts = Path(suite).parts
    return bool(parts) and not Path(suite).is_absolute() and ".." not in parts
