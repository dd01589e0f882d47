"""The SWE-bench env's scripted policy (`agentrl demos --policy scripted`): the gold patch, applied the way
the tools let an agent apply it.

What this is: `scripted_policy`, the env's optional demonstrating policy (the `ScriptedPolicy` contract of
`agentrl.demos`). For each hunk of the record's gold `patch`: `view` the lines it changes, then
`str_replace` the changed lines (with the hunk's context lines when the changed lines alone are not unique
in the file); then `submit`. What this is not: a baseline (the gold patch is a privileged task field), and it
needs as many turns as 2 per hunk + 1 (`rollout.max_turns` and `env.kwargs.max_steps` must allow them).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.types import Action, ToolCall

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff: its file, first old line, and the old and new text (context included),
    with the lines that change in the middle."""

    path: str
    start: int
    length: int
    old: str
    new: str
    old_core: str
    new_core: str


def hunks(patch: str) -> list[Hunk]:
    """The hunks of a unified diff (`git diff` output)."""
    found: list[Hunk] = []
    path = ""
    lines = patch.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/")
        match = _HUNK.match(line)
        index += 1
        if not match:
            continue
        old: list[str] = []
        new: list[str] = []
        while index < len(lines) and lines[index][:1] in (" ", "-", "+", "\\") and lines[index][:2] != "--":
            body, kind = lines[index][1:], lines[index][:1]
            if kind in (" ", "-"):
                old.append(body)
            if kind in (" ", "+"):
                new.append(body)
            index += 1
        found.append(_hunk(path, int(match[1]), int(match[2] or 1), old, new))
    return found


def _hunk(path: str, start: int, length: int, old: list[str], new: list[str]) -> Hunk:
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_core, new_core = old[head : len(old) - tail], new[head : len(new) - tail]
    return Hunk(path, start, length, "\n".join(old), "\n".join(new), "\n".join(old_core), "\n".join(new_core))


def call(name: str, **arguments: Any) -> Action:
    return Action(text="", tool_calls=(ToolCall(name, arguments),))


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """View and replace each hunk of the gold patch, then submit."""
    for hunk in hunks(str(task.get("patch") or "")):
        yield call("view", path=hunk.path, start=hunk.start, end=hunk.start + hunk.length - 1)
        if hunk.old_core.strip():
            result = yield call("str_replace", path=hunk.path, old=hunk.old_core, new=hunk.new_core)
            if "<returncode>0</returncode>" in result:
                continue
        result = yield call("str_replace", path=hunk.path, old=hunk.old, new=hunk.new)
        if "<returncode>0</returncode>" not in result:
            return
    yield call("submit")
