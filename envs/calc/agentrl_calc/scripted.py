"""The calc env's scripted policy (`agentrl demos --policy scripted`): compute with python, then submit.

What this is: `scripted_policy`, the env's optional demonstrating policy (the `ScriptedPolicy` contract of
`agentrl.demos`), playing the exchange the few-shot examples show: `python(print(<expression>))`, then
`submit` of the printed number, once per part of a multi-part task. What this is not: a baseline (it
falls back to the task's answer if the printed output is not the right number, which never happens on
the generated tasks).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any

from agentrl.types import Action, ToolCall

_QUESTION = re.compile(r"What is ([0-9+\-*/() ]+)\?")


def call(name: str, **arguments: str) -> Action:
    return Action(text="", tool_calls=(ToolCall(name, arguments),))


def printed_number(observation: str) -> str | None:
    """The last line of a python observation ("exit code 0\\n<number>"), when the code succeeded."""
    lines = [line.strip() for line in observation.splitlines() if line.strip()]
    return lines[-1] if len(lines) >= 2 and lines[0] == "exit code 0" else None


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """Per part: `python(code="print(<the question's expression>)")`, then `submit(answer=<what it printed>)`.
    A calc-chain record names its expressions; a calc record's is read from its question."""
    from agentrl_calc.env import chain_of, is_correct

    _, answers = chain_of(task)
    expressions = task.get("expressions") or [_expression(str(task["question"]))]
    for expression, expected in zip(expressions, answers, strict=True):
        answer = str(expected)
        if expression is not None:
            output = yield call("python", code=f"print({expression})")
            printed = printed_number(output)
            if printed is not None and is_correct(printed, answer):
                answer = printed
        yield call("submit", answer=answer)


def _expression(question: str) -> str | None:
    match = _QUESTION.fullmatch(question.strip())
    return match.group(1).strip() if match is not None else None
