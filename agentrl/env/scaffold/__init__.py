"""`agentrl envs new NAME [--sandboxed]`: write an installable env plugin package that trains as it is.

What this is: naming (`PluginNames`: from NAME, the distribution, package, env id and class names),
rendering (`render_plugin`: the files as text, a pure function) and writing (`write_plugin`: the files, then
the plugin's own task generator, which writes its task suite into the package). The plugin it writes:

    NAME/pyproject.toml                      entry point `agentrl.envs`, package data, pytest settings
    NAME/README.md
    NAME/agentrl_NAME/__init__.py            registers the env
    NAME/agentrl_NAME/env.py                 the game
    NAME/agentrl_NAME/make_tasks.py          the task generator
    NAME/agentrl_NAME/policy.py              a scripted policy that solves the tasks
    NAME/agentrl_NAME/data/configs/NAME.yaml the default run config (`agentrl train --task NAME`)
    NAME/agentrl_NAME/data/tasks/NAME/       the task suite (written by make_tasks)
    NAME/tests/test_NAME.py

The game is a working example to replace: guess-the-number (pure Python, `agentrl.env.scaffold.guess`),
or with `--sandboxed` find-a-value-with-shell-commands in a Docker sandbox (`agentrl.env.scaffold.lookup`).
docs/environments.md walks through both.

What this is not: a package publisher, or an editor of existing plugins: it refuses a folder that exists.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from string import Template

from agentrl.env.scaffold import common, guess, lookup
from agentrl.errors import ConfigError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
MAX_NAME_LENGTH = 40


@dataclass(frozen=True)
class PluginNames:
    """Every name a plugin called `name` uses, derived in one place.

    name:     the entry point, config and task suite name (`my-game`)
    package:  the Python package (`agentrl_my_game`)
    dist:     the distribution pip installs (`agentrl-env-my-game`)
    Name:     the class-name stem (`MyGame`: class `MyGameEnv`)
    env_id:   the registered id (`my-game/MyGame-v0`)
    """

    name: str
    package: str
    dist: str
    Name: str
    env_id: str


def plugin_names(name: str) -> PluginNames:
    """The names of a plugin called `name`; `ConfigError` unless `name` is lowercase letters and digits,
    words joined by single '-' or '_', starting with a letter."""
    if not NAME_PATTERN.match(name) or len(name) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"env name {name!r} is not usable: use lowercase letters and digits, words joined by '-' or '_', "
            f"starting with a letter, at most {MAX_NAME_LENGTH} characters (e.g. 'hilo' or 'my-game')"
        )
    words = re.split(r"[-_]", name)
    camel = "".join(word.capitalize() for word in words)
    return PluginNames(
        name=name,
        package="agentrl_" + "_".join(words),
        dist="agentrl-env-" + "-".join(words),
        Name=camel,
        env_id=f"{name}/{camel}-v0",
    )


def render_plugin(name: str, *, sandboxed: bool = False) -> dict[str, str]:
    """The plugin's files, by path relative to its folder, as text; the task suite is not among them
    (`write_plugin` runs the generator for it)."""
    names = plugin_names(name)
    game = lookup if sandboxed else guess
    package, config = names.package, f"{names.package}/data/configs/{name}.yaml"
    markers = ['    "slow: trains the real model (minutes on CPU)",\n']
    if sandboxed:
        markers.append('    "docker: needs a Docker engine and the agentrl/sandbox-python image",\n')
    values = {
        **vars(names),
        "game": game.GAME,
        "markers": "".join(markers),
        "variant_flag": " --sandboxed" if sandboxed else "",
        "layout": _layout(names, sandboxed),
    }
    templates = {
        "pyproject.toml": common.PYPROJECT,
        "README.md": common.README,
        f"{package}/__init__.py": common.INIT,
        f"{package}/env.py": game.ENV,
        f"{package}/make_tasks.py": game.MAKE_TASKS,
        f"{package}/policy.py": game.POLICY,
        config: game.CONFIG,
        f"tests/test_{names.package.removeprefix('agentrl_')}.py": game.TESTS,
    }
    return {path: Template(text).substitute(values) for path, text in templates.items()}


def write_plugin(name: str, folder: Path, *, sandboxed: bool = False) -> list[Path]:
    """Write the plugin into `folder` (which must not exist yet) and generate its task suite; return the
    files written. `ConfigError` when the folder exists or a package of the same name is importable."""
    names = plugin_names(name)
    if folder.exists():
        raise ConfigError(f"{folder} already exists; pick another name or --dir, or remove it first")
    if importlib.util.find_spec(names.package) is not None:
        raise ConfigError(
            f"a package named {names.package} is already importable here, so the new plugin would clash "
            "with it; pick another name"
        )
    files = render_plugin(name, sandboxed=sandboxed)
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _generate_tasks(folder, names)
    return sorted(path for path in folder.rglob("*") if path.is_file())


def _generate_tasks(folder: Path, names: PluginNames) -> None:
    """Run the new plugin's own generator (`python -m <package>.make_tasks`) in its folder."""
    done = subprocess.run(
        [sys.executable, "-m", f"{names.package}.make_tasks"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ConfigError(
            f"the new plugin's task generator failed (python -m {names.package}.make_tasks in {folder}):\n"
            f"{done.stderr[-2000:]}"
        )


def _layout(names: PluginNames, sandboxed: bool) -> str:
    """The README's list of the plugin's files."""
    package, name = names.package, names.name
    lines = [
        f"- `{package}/env.py`: the game: `reset`, `step`, the tools, few-shot `examples`, state keys"
        + (", the sandbox" if sandboxed else ""),
        f"- `{package}/make_tasks.py`: the task generator; `python -m {package}.make_tasks` rewrites"
        f" `{package}/data/tasks/{name}/`",
        f"- `{package}/policy.py`: a scripted policy that solves the tasks",
        f"- `{package}/data/configs/{name}.yaml`: the default run config",
        f"- `tests/test_{package.removeprefix('agentrl_')}.py`: the plugin's tests",
    ]
    return "\n".join(lines)
