"""The two interaction formats of the search env: Search-R1's tags, and structured tool calls.

What this is: pure functions from an assistant turn to a `Move` (search, answer, or invalid with the reason),
the text of retrieval results, the first observation, and the few-shot exchanges shown to the model.
- "tags" (Search-R1, arXiv 2503.09516): the turn's first complete `<search>query</search>` or
  `<answer>text</answer>` block decides the move; results come back as `<information>...</information>`.
  When the move is an answer, the last `<answer>` block of the turn is the one scored (a model that
  corrects itself within the turn is held to its final word).
- "tools": the turn's first Hermes tool call, `search(query)` or `answer(text)`.

What this is not: the tool-call parser (`agentrl.agent.parsing` turns the text into `Action.tool_calls`
before the env sees it) or the scoring of answers (`agentrl_search.scoring`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.env import render_tool_call, tool_spec
from agentrl.types import Action

Format = Literal["tags", "tools"]
FORMATS: tuple[str, ...] = ("tags", "tools")
MoveKind = Literal["search", "answer", "invalid"]

_TAG_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

SEARCH_TOOL = tool_spec(
    "search",
    "Search the documentation; returns the best matching passages with their titles",
    {"query": {"type": "string", "description": "a few keywords, e.g. textwrap wrap width"}},
)
ANSWER_TOOL = tool_spec(
    "answer",
    "Give your final answer; this ends the episode",
    {"text": {"type": "string", "description": "a few words only, e.g. 70"}},
)
TOOLS = (SEARCH_TOOL, ANSWER_TOOL)
TAGS_HELP = "Write <search>keywords</search> to search, or <answer>a few words</answer> to answer."
TOOLS_HELP = (
    "Call exactly one tool per turn, e.g. "
    + render_tool_call("search", {"query": "keywords"})
    + " or "
    + render_tool_call("answer", {"text": "a few words"})
)


@dataclass(frozen=True)
class Move:
    """What a turn asks for: `text` is the query, the answer, or (invalid) what was wrong."""

    kind: MoveKind
    text: str


def parse_move(action: Action, format: Format) -> Move:
    return parse_tags(action.text) if format == "tags" else parse_tool_call(action)


def parse_tags(text: str) -> Move:
    first = _TAG_BLOCK.search(text)
    if first is None:
        return Move("invalid", "your turn has no complete search block or answer block")
    kind, content = first.group(1), first.group(2).strip()
    if kind == "answer":
        content = _ANSWER_BLOCK.findall(text)[-1].strip()
    if not content:
        return Move("invalid", f"the <{kind}> block is empty")
    return Move("search" if kind == "search" else "answer", content)


def parse_tool_call(action: Action) -> Move:
    if not action.tool_calls:
        return Move("invalid", action.parse_error or "your turn has no tool call")
    call = action.tool_calls[0]
    expected = {"search": "query", "answer": "text"}.get(call.name)
    if expected is None:
        return Move("invalid", f"unknown tool {call.name!r}; the tools are search and answer")
    value = call.arguments.get(expected) if set(call.arguments) == {expected} else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        got = sorted(call.arguments) or "none"
        return Move("invalid", f"{call.name} takes one non-empty string argument {expected!r}; got {got}")
    return Move("search" if call.name == "search" else "answer", value.strip())


def format_help(format: Format) -> str:
    return TAGS_HELP if format == "tags" else TOOLS_HELP


def question_observation(question: str, format: Format) -> str:
    if format == "tags":
        return (
            f"Question: {question}\nSearch with <search>keywords</search>; results come back in "
            "<information>...</information>. Then answer with <answer>a few words</answer>."
        )
    return f"Question: {question}\nCall search to look it up, then call answer with a few words."


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)].rstrip() + "..."


def results_text(hits: Sequence[Mapping[str, Any]], format: Format, passage_chars: int) -> str:
    """Retrieved passages as "Doc i (Title: t) text" lines, in `<information>` tags for the tags format."""
    lines = [
        f"Doc {i} (Title: {hit['title']}) {clip(hit['text'], passage_chars)}" for i, hit in enumerate(hits, 1)
    ]
    body = "\n".join(lines) or "No results; try other keywords."
    return f"<information>{body}</information>" if format == "tags" else body


# Two solved episodes on passages outside the corpus (webbrowser and getpass are not among the indexed
# modules), so no example answers a task of any split.
_EXAMPLES = (
    (
        "What is the default value of the new parameter of webbrowser.open?",
        "webbrowser open new",
        (
            {
                "title": "webbrowser.open",
                "text": "function webbrowser.open(url, new=0, autoraise=True). Display url using the default "
                "browser. If possible, open url in a location determined by new.",
            },
            {
                "title": "webbrowser.open_new",
                "text": "function webbrowser.open_new(url). Open url in a new window of the default browser.",
            },
        ),
        "0",
    ),
    (
        'Which function of the getpass module is documented as: "Get the username from the environment or '
        'password database."?',
        "getpass username environment password database",
        (
            {
                "title": "getpass.getuser",
                "text": "function getpass.getuser(). Get the username from the environment or password "
                "database.",
            },
            {
                "title": "getpass.getpass",
                "text": "function getpass.getpass(prompt='Password: ', stream=None). Prompt for a password, "
                "with echo turned off.",
            },
        ),
        "getuser",
    ),
)


def _assistant(format: Format, name: str, argument: str, value: str) -> dict[str, Any]:
    if format == "tags":
        return {"role": "assistant", "content": f"<{name}>{value}</{name}>"}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": name, "arguments": {argument: value}}],
    }


def few_shot_examples(format: Format, passage_chars: int) -> tuple[dict[str, Any], ...]:
    """Two solved episodes (question, search, results, answer), ending on the assistant's answer."""
    messages: list[dict[str, Any]] = []
    for question, query, hits, answer in _EXAMPLES:
        messages += [
            {"role": "user", "content": question_observation(question, format)},
            _assistant(format, "search", "query", query),
            {"role": "tool", "content": results_text(hits, format, passage_chars)},
            _assistant(format, "answer", "text", answer),
        ]
    return tuple(messages)


def answer_prefix(format: Format) -> str:
    """The text before the answer in a final turn: IGPO's `credit.answer.answer_format.prefix`.

    For tool calls that is how the runner's prompts write a call (multiline), cut inside the empty answer.
    """
    if format == "tags":
        return "<answer>"
    call = render_tool_call("answer", {"text": ""}, multiline=True)
    return call[: call.rindex('""') + 1]
