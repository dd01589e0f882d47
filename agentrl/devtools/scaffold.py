"""`agentrl envs new NAME [--sandboxed]`: write an installable env plugin package that trains as it is.

What this is: naming (`PluginNames`: from NAME, the distribution, package, env id and class names),
rendering (`render_plugin`: the files as text, a pure function of the templates) and writing
(`write_plugin`: the files, then the plugin's own task generator, which writes its task suite into the
package). The plugin it writes, and the template each file comes from (`agentrl/devtools/templates/`):

    NAME/pyproject.toml                      common/pyproject.toml.tmpl: entry point, package data, pytest
    NAME/README.md                           common/README.md.tmpl
    NAME/agentrl_NAME/__init__.py            common/plugin_init.py: registers the env
    NAME/agentrl_NAME/env.py                 GAME/env.py: the game
    NAME/agentrl_NAME/make_tasks.py          GAME/make_tasks.py: the task generator
    NAME/agentrl_NAME/policy.py              GAME/policy.py: the env's ScriptedPolicy
    NAME/agentrl_NAME/data/configs/NAME.yaml GAME/config.yaml.tmpl: the default run config
    NAME/agentrl_NAME/data/tasks/NAME/       the task suite (written by make_tasks)
    NAME/tests/test_plugin.py                common/plugin_tests.py: contract, suite, policy, training
    NAME/tests/test_NAME.py                  GAME/game_tests.py: the game's rules

The game (GAME) is a working example to replace: guess-the-number (pure Python, `guess/`), or with
`--sandboxed` find-a-value-with-shell-commands in a Docker sandbox (`lookup/`). `agentrl.devtools.templates`
says how a template names the plugin; docs/environments.md walks through both games.

What this is not: a package publisher, or an editor of existing plugins: it refuses a folder that exists.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from agentrl.errors import ConfigError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
MAX_NAME_LENGTH = 40
TEMPLATES = files("agentrl.devtools") / "templates"
GAMES = {
    False: ("guess", "guess the hidden number; every wrong guess is answered higher or lower."),
    True: ("lookup", "find a value in a file with shell commands run in a Docker sandbox, then submit it."),
}
SANDBOXED_ONLY = "  # only --sandboxed"
INSTALL = "pip install -e {path} --no-deps --no-build-isolation"
"""The one line that installs an env plugin (the docs, `agentrl envs new`'s printout, the plugin's README):
editable; --no-deps because agentrl, a plugin's one dependency, is installed already (pip would otherwise
look for it on a package index); --no-build-isolation builds with the installed setuptools instead of
downloading one. Run it with the pip of agentrl's virtualenv (`.venv/bin/pip` in a clone)."""
# the word the templates use for each part of PluginNames (agentrl.devtools.templates)
PLACEHOLDERS = {
    "agentrl-env-envname": "dist",
    "agentrl_envname": "package",
    "Envname": "Name",
    "envname": "name",
}


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


def install_command(path: str | Path) -> str:
    """The command that installs the plugin in folder `path` (`INSTALL`)."""
    return INSTALL.format(path=path)


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
    game, description = GAMES[sandboxed]
    package, stem = names.package, names.package.removeprefix("agentrl_")
    sources = {
        "pyproject.toml": "common/pyproject.toml.tmpl",
        "README.md": "common/README.md.tmpl",
        f"{package}/__init__.py": "common/plugin_init.py",
        f"{package}/env.py": f"{game}/env.py",
        f"{package}/make_tasks.py": f"{game}/make_tasks.py",
        f"{package}/policy.py": f"{game}/policy.py",
        f"{package}/data/configs/{name}.yaml": f"{game}/config.yaml.tmpl",
        "tests/test_plugin.py": "common/plugin_tests.py",
        f"tests/test_{stem}.py": f"{game}/game_tests.py",
    }
    values = {
        **{placeholder: getattr(names, field) for placeholder, field in PLACEHOLDERS.items()},
        "ENVNAME_GAME": description,
        "ENVNAME_FLAG": " --sandboxed" if sandboxed else "",
        "ENVNAME_LAYOUT": _layout(names, sandboxed),
    }
    return {
        path: render(TEMPLATES.joinpath(source).read_text(encoding="utf-8"), values, sandboxed)
        for path, source in sources.items()
    }


def render(template: str, values: dict[str, str], sandboxed: bool) -> str:
    """A template with each placeholder word replaced by its value, and its `# only --sandboxed` lines kept
    (without that comment) when `sandboxed`, else dropped."""
    kept = [_variant_line(line, sandboxed) for line in template.splitlines(keepends=True)]
    pattern = re.compile("|".join(re.escape(word) for word in sorted(values, key=len, reverse=True)))
    return pattern.sub(lambda match: values[match.group(0)], "".join(kept))


def _variant_line(line: str, sandboxed: bool) -> str:
    """`line` as this variant of the plugin has it: a `# only --sandboxed` line loses that comment when
    `sandboxed` and is dropped otherwise (as ""); any other line is as it is."""
    body = line.rstrip("\n")
    if not body.endswith(SANDBOXED_ONLY):
        return line
    return body.removesuffix(SANDBOXED_ONLY) + line[len(body) :] if sandboxed else ""


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
        f"- `{package}/policy.py`: the env's scripted policy, which solves the tasks",
        f"- `{package}/data/configs/{name}.yaml`: the default run config",
        "- `tests/test_plugin.py`: the plugin's tests; "
        f"`tests/test_{package.removeprefix('agentrl_')}.py`: the game's rules",
    ]
    return "\n".join(lines)
