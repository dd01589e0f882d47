"""`check_env`: Gymnasium's env checker plus the agentrl-specific parts of the Env contract.

What this is: the one function every env plugin's tests call. On top of
`gymnasium.utils.env_checker.check_env` it checks that the tool specs are valid OpenAI function specs,
that `examples` are chat messages, that `info["state_key"]` is hashable or None after reset and after a step,
that the optional context keys of a step's info are well-formed when present (`info["context_reset"]` a
bool, `info["state_text"]` a short str; `check_context_info`, which `agentrl envs check` also runs on every
step it plays), that the same seed and task give the same first observation, and, when the env claims a
fork capability, that a fork taken mid-episode steps exactly like the original from the same action (an env
that claims "none" must refuse with `ForkUnsupported`).

`recording_resource_warnings` records the ResourceWarnings (files and sockets never closed) that a block of
code raises, including those of the garbage it leaves behind, as lines naming where each was opened (when
`tracemalloc` traces): the env plugins' test fixtures and `agentrl envs check` use it.

What this is not: a runtime guard. The service and runner never call it; it costs several resets.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sysconfig
import tracemalloc
import warnings
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from agentrl.env.core import INFO_CONTEXT_RESET, INFO_STATE_KEY, INFO_STATE_TEXT, Env
from agentrl.errors import EnvError, ForkUnsupported
from agentrl.types import Action

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ROLES = frozenset({"system", "user", "assistant", "tool"})
STATE_TEXT_MAX_CHARS = 2000  # info["state_text"] is written into every window's head: a line, not a log


def check_env(
    env: Env,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    actions: Sequence[Action] = (),
) -> None:
    """Raise `EnvError` (or Gymnasium's own assertion) if `env` breaks the Env contract.

    `options` is passed to our resets (e.g. `{"task": {...}}`); Gymnasium's part resets without a task, so
    an env must also accept `options=None` (typically by drawing a task from the seed). `actions` drive the
    fork check (the first is taken before the fork, the rest on both); by default one turn without a tool
    call before it and one after.
    """
    gymnasium_check_env(env, skip_render_check=True)
    check_tool_specs(env.tools)
    check_examples(env.examples)
    _check_first_observation(env, seed, options)
    _check_step_info(env, seed, options)
    check_fork(env, seed=seed, options=options, actions=actions or (Action(text=""), Action(text="")))


def check_tool_specs(specs: Any) -> None:
    """Raise `EnvError` unless `specs` is a sequence of OpenAI function-format specs with unique names."""
    if isinstance(specs, str | bytes | Mapping) or not hasattr(specs, "__iter__"):
        raise EnvError(f"env.tools must be a sequence of tool specs, got {type(specs).__name__}")
    names = [_check_tool_spec(spec) for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise EnvError(f"duplicate tool names {duplicates}; each tool needs its own name")


def check_examples(examples: Any) -> None:
    """Raise `EnvError` unless `examples` is a sequence of chat messages with a string role and content."""
    if isinstance(examples, str | bytes | Mapping) or not hasattr(examples, "__iter__"):
        raise EnvError(f"env.examples must be a sequence of chat messages, got {type(examples).__name__}")
    for index, message in enumerate(examples):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in _ROLES or not isinstance(message.get("content", ""), str):
            raise EnvError(
                f"env.examples[{index}] must be a chat message with a 'role' in {sorted(_ROLES)} and a "
                f"string 'content', got {message!r}"
            )


def _check_tool_spec(spec: Any) -> str:
    function = spec.get("function") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or spec.get("type") != "function" or not isinstance(function, Mapping):
        raise EnvError(
            f'tool spec {spec!r} must be {{"type": "function", "function": {{...}}}}; use tool_spec()'
        )
    name = function.get("name")
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise EnvError(f"tool name {name!r} must match {_TOOL_NAME.pattern}")
    if not isinstance(function.get("description", ""), str):
        raise EnvError(f"tool {name!r}: description must be a string")
    _check_parameters(name, function.get("parameters"))
    return name


def _check_parameters(name: str, parameters: Any) -> None:
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        raise EnvError(f'tool {name!r}: parameters must be a JSON schema with "type": "object"')
    properties = parameters.get("properties", {})
    if not isinstance(properties, Mapping) or not all(isinstance(p, Mapping) for p in properties.values()):
        raise EnvError(f"tool {name!r}: parameters.properties must map names to JSON schemas")
    required = parameters.get("required", [])
    missing = [key for key in required if key not in properties] if isinstance(required, list) else None
    if missing is None or missing:
        raise EnvError(f"tool {name!r}: parameters.required must list names of properties (bad: {missing})")


def _check_state_key(info: Any, where: str) -> None:
    if not isinstance(info, Mapping) or INFO_STATE_KEY not in info:
        raise EnvError(
            f"{where}: info must contain {INFO_STATE_KEY!r} (a hashable key of the state, or None)"
        )
    if not isinstance(info[INFO_STATE_KEY], Hashable):
        kind = type(info[INFO_STATE_KEY]).__name__
        raise EnvError(f"{where}: info[{INFO_STATE_KEY!r}] must be hashable, got {kind}")


def _check_first_observation(env: Env, seed: int, options: Mapping[str, Any] | None) -> None:
    first, first_info = env.reset(seed=seed, options=dict(options) if options else None)
    again, again_info = env.reset(seed=seed, options=dict(options) if options else None)
    _check_state_key(first_info, "reset")
    if first != again or first_info[INFO_STATE_KEY] != again_info[INFO_STATE_KEY]:
        raise EnvError(
            f"reset(seed={seed}) with the same task gave different first observations or state keys "
            f"({first!r} vs {again!r}); draw all randomness from the seed"
        )


def check_context_info(info: Mapping[str, Any], where: str = "step") -> None:
    """Raise `EnvError` unless the optional context keys of a step's `info` are well-formed when present:
    `info["context_reset"]` a bool, `info["state_text"]` a str (or None) of at most `STATE_TEXT_MAX_CHARS`."""
    if INFO_CONTEXT_RESET in info and not isinstance(info[INFO_CONTEXT_RESET], bool):
        kind = type(info[INFO_CONTEXT_RESET]).__name__
        raise EnvError(
            f"{where}: info[{INFO_CONTEXT_RESET!r}] must be a bool, got {kind}; set True on a step after "
            "which the episode needs none of the earlier turns, else False or leave it out"
        )
    text = info.get(INFO_STATE_TEXT)
    if text is not None and not isinstance(text, str):
        raise EnvError(
            f"{where}: info[{INFO_STATE_TEXT!r}] must be a str, got {type(text).__name__}; write what the "
            "agent must remember as a short text, or leave it out"
        )
    if text is not None and len(text) > STATE_TEXT_MAX_CHARS:
        raise EnvError(
            f"{where}: info[{INFO_STATE_TEXT!r}] is a str of {len(text)} chars, more than "
            f"{STATE_TEXT_MAX_CHARS}; it is written into every window's head: keep only what the agent must "
            "remember"
        )


def _check_step_info(env: Env, seed: int, options: Mapping[str, Any] | None) -> None:
    env.reset(seed=seed, options=dict(options) if options else None)
    result = env.step(Action(text=""))
    if len(result) != 5:
        raise EnvError("step must return a StepResult (observation, reward, terminated, truncated, info)")
    _check_state_key(result[4], "step")
    check_context_info(result[4], "step")


def check_fork(
    env: Env, *, seed: int = 0, options: Mapping[str, Any] | None = None, actions: Sequence[Action] = ()
) -> None:
    """Raise `EnvError` unless a fork of `env` after `actions[0]` steps like `env` on each later action
    (observation, reward, flags, state key) and counts the same turns; an env whose `fork_capability` is
    "none" must refuse with `ForkUnsupported`."""
    env.reset(seed=seed, options=dict(options) if options else None)
    if env.fork_capability == "none":
        try:
            env.fork().close()
        except ForkUnsupported:
            return
        raise EnvError(f"{type(env).__name__} says fork_capability='none' but fork() did not refuse")
    if actions and _over(env.step(actions[0])):
        return  # the episode ended before there was anything to fork
    fork = env.fork()
    try:
        if fork.turns_taken != env.turns_taken:
            raise EnvError(f"the fork counts {fork.turns_taken} turns taken, the original {env.turns_taken}")
        for index, action in enumerate(actions[1:], start=1):
            original, forked = _observed(env.step(action)), _observed(fork.step(action))
            if original != forked:
                raise EnvError(
                    f"after fork(), action {index} gave {forked!r} on the fork but {original!r} on the "
                    f"original ({env.fork_capability!r} fork); a fork must copy all of the episode's state"
                )
            if original[2] or original[3]:
                break
    finally:
        fork.close()


def _observed(result: Any) -> tuple[Any, ...]:
    observation, reward, terminated, truncated, info = result
    return observation, float(reward), bool(terminated), bool(truncated), info.get(INFO_STATE_KEY)


def _over(result: Any) -> bool:
    return bool(result[2] or result[3])


@contextlib.contextmanager
def recording_resource_warnings() -> Iterator[list[str]]:
    """Record every ResourceWarning raised in the block, and by the garbage it leaves (`gc.collect()` at its
    end), into the yielded list, filled when the block ends: a line per warning (`describe_resource_warning`).

    Other warnings are issued again after the block, as they came. Like `warnings.catch_warnings`, not
    thread-safe: warnings of other threads while the block runs are recorded too.
    """
    leaks: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            yield leaks
        finally:
            gc.collect()
    for warning in caught:
        if issubclass(warning.category, ResourceWarning):
            leaks.append(describe_resource_warning(warning))
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno, source=warning.source
            )


def describe_resource_warning(warning: warnings.WarningMessage) -> str:
    """The warning's text and where its file or socket was opened: the innermost frame of the allocation
    outside the standard library and installed packages (needs `tracemalloc`, e.g. PYTHONTRACEMALLOC=20)."""
    text = str(warning.message)
    traced = tracemalloc.get_object_traceback(warning.source) if warning.source is not None else None
    if traced is None:
        return f"{text} (where it was opened: run with PYTHONTRACEMALLOC=20)"
    frames = list(traced)  # oldest call first
    library = tuple({sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")})
    own = [frame for frame in frames if not frame.filename.startswith(library)] or frames
    return f"{text}, opened at {own[-1].filename}:{own[-1].lineno}"
