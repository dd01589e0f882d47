"""The search env's scripted policy (`agentrl demos --policy scripted`): search, then answer.

What this is: `scripted_policy`, the env's optional demonstrating policy (the `ScriptedPolicy` contract of
`agentrl.demos`), in the run's format (`env.kwargs.format`: tags or tools). It searches the question's
keywords, as the few-shot examples do; when a passage it needs (the task's `gold_ids`) has not shown up, it
searches that passage's title; then it answers with the task's answer. What this is not: a baseline (the
answer and the gold passages are privileged task fields).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any

from agentrl.types import Action, ToolCall

STOPWORDS = frozenset(
    "a an and another as by class default documentation documented function has is it its method mentions "
    "module of or parameter that the to value what which with".split()
)
MAX_QUERY_WORDS = 8
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def keywords(question: str) -> str:
    """The question's content words (dotted names split, stopwords dropped), at most MAX_QUERY_WORDS."""
    words: list[str] = []
    for word in _WORD.findall(question):
        if word.lower() not in STOPWORDS and word not in words:
            words.append(word)
    return " ".join(words[:MAX_QUERY_WORDS])


def move(format: str, kind: str, text: str) -> Action:
    """A search or answer turn in the tags format (`<search>...</search>`) or as a tool call."""
    if format == "tags":
        return Action(text=f"<{kind}>{text}</{kind}>")
    argument = "query" if kind == "search" else "text"
    return Action(text="", tool_calls=(ToolCall(kind, {argument: text}),))


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """Search the question's keywords, then the title of each gold passage not seen yet (within the step
    budget, one step kept for the answer), then answer."""
    format = str(env_kwargs.get("format", "tags"))
    budget = int(env_kwargs.get("max_steps", 4)) - 1
    seen = yield move(format, "search", keywords(str(task["question"])))
    searches = 1
    for gold in task.get("gold_ids") or ():
        title = str(gold).removeprefix("py:")
        if f"(Title: {title})" in seen or searches >= budget:
            continue
        seen += (yield move(format, "search", title.replace(".", " "))) or ""
        searches += 1
    yield move(format, "answer", str(task["answer"]))
