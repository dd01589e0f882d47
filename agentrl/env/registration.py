"""The env registry: a thin layer over Gymnasium's own, plus plugin discovery and tool metadata.

What this is: `register` forwards to `gymnasium.register` (so `gymnasium.make("ns/Name-v0")` works as users
expect) and records what agentrl needs on top: the tool specs and which plugin registered the env. `make`
calls `gymnasium.make` and returns the bare agentrl `Env`; on an unknown id it first imports the installed
plugins (entry-point group `agentrl.envs`, each naming a module whose import registers envs) and retries.

What this is not: a second registry. Gymnasium's `registry` dict stays the source of truth for ids, entry
points and constructor kwargs; `_METADATA` only adds tools and provenance.

Why `make` returns the unwrapped env: Gymnasium's `PassiveEnvChecker` and `OrderEnforcing` wrappers are
testing aids (we run `check_env` in every plugin's tests instead) and would hide our `Env` type and its
`StepResult`. They are disabled or peeled off. Any other wrapper (e.g. `TimeLimit` from `max_episode_steps`)
changes behaviour, so rather than silently drop it `make` refuses; agentrl envs enforce their own limits and
the runner has its own turn budget. Use `gymnasium.make` directly if you want Gymnasium's wrappers.

A plugin's import error is never swallowed: it surfaces as `EnvPluginError` naming the plugin. An env
registered while no plugin is loading (its package was imported for another reason, e.g. its `agentrl.cli`
subcommand) is credited to the installed plugin whose top-level package defines it.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator

from agentrl.env.core import Env
from agentrl.errors import EnvError, EnvNotFound, EnvPluginError

PLUGIN_GROUP = "agentrl.envs"
_HARMLESS_WRAPPERS = (gymnasium.wrappers.PassiveEnvChecker, gymnasium.wrappers.OrderEnforcing)


@dataclass(frozen=True)
class EnvInfo:
    """What `list_envs` reports about one registered env."""

    id: str
    entry_point: str
    tools: tuple[Mapping[str, Any], ...]
    plugin: str | None


@dataclass(frozen=True)
class _Registration:
    tools: tuple[Mapping[str, Any], ...] | None
    plugin: str | None


_METADATA: dict[str, _Registration] = {}
_loaded_plugins: set[str] = set()
_loading_plugin: list[str] = []  # the plugin whose import is running, so `register` can record it
_plugin_lock = threading.RLock()  # the service makes envs from worker threads


def register(
    id: str,
    entry_point: str | Callable[..., Env],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **gymnasium_kwargs: Any,
) -> None:
    """Register an env with Gymnasium and record its agentrl metadata.

    `tools` overrides the tool specs read from the env class; `gymnasium_kwargs` go to `gymnasium.register`
    (e.g. `kwargs={...}` for constructor arguments). Gymnasium's checker wrappers are off by default.
    """
    gymnasium_kwargs.setdefault("order_enforce", False)
    gymnasium_kwargs.setdefault("disable_env_checker", True)
    gymnasium.register(id=id, entry_point=entry_point, **gymnasium_kwargs)
    plugin = _loading_plugin[-1] if _loading_plugin else _plugin_providing(entry_point)
    _METADATA[id] = _Registration(tools=None if tools is None else tuple(tools), plugin=plugin)


def make(id: str, **kwargs: Any) -> Env:
    """Build a registered env (bare, without Gymnasium's checker wrappers); load plugins on a miss."""
    if not _is_registered(id):
        load_plugins()
    if not _is_registered(id):
        raise EnvNotFound(_not_found_message(id))
    env = gymnasium.make(id, disable_env_checker=True, **kwargs)
    return _unwrap(env, id)


def list_envs() -> list[EnvInfo]:
    """Every env registered through `agentrl.env.register`, after importing all installed plugins."""
    load_plugins()
    return [_info(env_id, registration) for env_id, registration in sorted(_METADATA.items())]


def load_plugins() -> None:
    """Import every installed plugin of the `agentrl.envs` entry-point group not imported yet."""
    with _plugin_lock:
        for entry_point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
            if entry_point.name not in _loaded_plugins:
                _load_plugin(entry_point)


def _plugin_providing(entry_point: str | Callable[..., Env]) -> str | None:
    """The installed env plugin whose package holds `entry_point`, for envs registered outside
    `load_plugins` (e.g. a plugin imported first for its `agentrl.cli` subcommand)."""
    if isinstance(entry_point, str):
        module = entry_point.partition(":")[0]
    else:
        module = getattr(entry_point, "__module__", None) or ""
    package = module.partition(".")[0]
    for plugin in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        if plugin.module.partition(".")[0] == package:
            return plugin.name
    return None


def _load_plugin(entry_point: importlib.metadata.EntryPoint) -> None:
    _loading_plugin.append(entry_point.name)
    try:
        entry_point.load()
    except Exception as exc:
        raise EnvPluginError(
            f"env plugin {entry_point.name!r} ({entry_point.value}) failed to import: {exc!r}. "
            "Fix or reinstall the package that provides it, or uninstall it."
        ) from exc
    finally:
        _loading_plugin.pop()
    _loaded_plugins.add(entry_point.name)


def tools_of(id: str) -> tuple[Mapping[str, Any], ...]:
    """The tool specs of a registered env: given at registration, else the env class's `tools`."""
    registration = _METADATA.get(id)
    if registration is not None and registration.tools is not None:
        return registration.tools
    creator = _creator(gymnasium.spec(id).entry_point, id)
    return tuple(getattr(creator, "tools", ()))


def _is_registered(id: str) -> bool:
    try:
        gymnasium.spec(id)
    except gymnasium.error.Error:
        return False
    return True


def _not_found_message(id: str) -> str:
    known = sorted(set(gymnasium.registry) | set(_METADATA))
    close = difflib.get_close_matches(id, known, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"No environment registered as {id!r}.{hint} Run `agentrl envs list` to see the registered ones, "
        f"or `pip install` the plugin package that provides it (entry-point group {PLUGIN_GROUP!r})."
    )


def _unwrap(env: gymnasium.Env[Any, Any], id: str) -> Env:
    while isinstance(env, _HARMLESS_WRAPPERS):
        env = env.env
    if isinstance(env, gymnasium.Wrapper):
        raise EnvError(
            f"{id!r} is registered with the Gymnasium wrapper {type(env).__name__}, which agentrl.env.make "
            "would drop. Implement the limit inside the env, or use gymnasium.make for wrapped envs."
        )
    if not isinstance(env, Env):
        raise EnvError(
            f"{id!r} built a {type(env).__name__}, not an agentrl.env.Env; subclass agentrl.env.Env."
        )
    return env


def _creator(entry_point: Any, id: str) -> Any:
    if not isinstance(entry_point, str):
        return entry_point
    try:
        return load_env_creator(entry_point)
    except Exception as exc:
        raise EnvPluginError(f"cannot import the entry point {entry_point!r} of env {id!r}: {exc!r}") from exc


def _entry_point_name(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{entry_point.__module__}:{entry_point.__qualname__}"


def _info(env_id: str, registration: _Registration) -> EnvInfo:
    return EnvInfo(
        id=env_id,
        entry_point=_entry_point_name(gymnasium.spec(env_id).entry_point),
        tools=tools_of(env_id),
        plugin=registration.plugin,
    )
