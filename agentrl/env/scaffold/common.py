"""The files every plugin `agentrl envs new` writes has, whichever its game: packaging, registration, README.

What this is: `string.Template` texts (`$name`, `$package`, `$Name`, `$env_id`, `$dist`, `$game`, `$layout`
and `$markers`; a literal dollar is `$$`), rendered by `agentrl.env.scaffold`. What this is not: the game
itself (`agentrl.env.scaffold.guess` and `agentrl.env.scaffold.lookup`).
"""

from __future__ import annotations

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "agentrl env plugin: $env_id, $game"
requires-python = ">=3.11"
dependencies = ["agentrl"]

# importing $package registers $env_id; agentrl imports it when a run or `agentrl envs list` asks
[project.entry-points."agentrl.envs"]
$name = "$package"

[tool.setuptools.packages.find]
include = ["$package*"]

# the run config and task suite agentrl finds by name: `agentrl train --task $name` from any folder
[tool.setuptools.package-data]
$package = ["data/**/*"]

[tool.pytest.ini_options]
pythonpath = ["."]
markers = [
$markers]

[tool.ruff]
line-length = 110

[tool.ruff.lint]
select = ["E", "F", "I", "B", "UP"]
"""

INIT = '''\
"""$dist: $game

Importing this package registers `$env_id` (the `agentrl.envs` entry point names this module).
The game: `$package.env`; its tasks: `$package.make_tasks`;
a scripted policy: `$package.policy`. What the package ships besides code, found by agentrl by
name: `data/configs/$name.yaml` (the default run config) and `data/tasks/$name/` (the task suite).
"""

from agentrl.env import register

register(id="$env_id", entry_point="$package.env:${Name}Env")
'''

README = """\
# $dist

An agentrl env plugin registering `$env_id`: $game

Written by `agentrl envs new $name$variant_flag`, it trains as it is; agentrl's `docs/environments.md`
explains every part of it.

$layout

Install it, test it, check it through a real env service, train one step (from any folder: the run config
and the tasks ship inside the package):

```bash
pip install -e .                  # offline: add --no-build-isolation
pytest -q -m "not slow"
agentrl envs check $env_id --policy $package.policy:solve
agentrl train --task $name train.steps=1 eval.before=false eval.after=false
```

`agentrl train --task $name` trains with `$package/data/configs/$name.yaml`; a `configs/$name.yaml` in the
working directory wins over it, and `--config PATH` over both. To make the game yours, change
`$package/env.py` (the game), `$package/make_tasks.py` (then run `python -m $package.make_tasks` to rewrite
the task files), `$package/policy.py` and the tests; keep the few-shot `examples` in step with what the
env says, and re-run `pip install -e .` after changing the entry points in `pyproject.toml`.
"""
