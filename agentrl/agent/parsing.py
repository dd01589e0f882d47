"""Tool-call parsing: an assistant completion's text to an `Action`, and a `ToolCall` back to text.

What this is: a pure parser for the Hermes format, one or more
`<tool_call>{"name": "...", "arguments": {...}}</tool_call>` blocks in the text. `arguments` may also be a
JSON-encoded string (the OpenAI wire style). A malformed turn is data, not an exception: the returned
`Action` carries no tool calls and a `parse_error` that says what is wrong, so the env can answer with an
error observation and the runner can mark the turn invalid.

What this is not: a lenient repairer. Almost-JSON (single quotes, trailing commas) is rejected, because
rewarding the policy for sloppy calls teaches it sloppy calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrl.env.toolcall import TOOL_CALL_CLOSE as CLOSE_TAG
from agentrl.env.toolcall import TOOL_CALL_OPEN as OPEN_TAG
from agentrl.env.toolcall import render_tool_call
from agentrl.types import Action, ToolCall

_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)


class _Malformed(ValueError):
    """Internal: one tool-call block could not be parsed; the message becomes `Action.parse_error`."""


def parse_turn(text: str) -> Action:
    """The `Action` of one assistant turn; never raises."""
    bodies = _BLOCK.findall(text)
    rest = _BLOCK.sub("", text)
    if OPEN_TAG in rest:
        return Action(text, (), f"unterminated {OPEN_TAG}: close every call with {CLOSE_TAG}")
    if CLOSE_TAG in rest:
        return Action(text, (), f"{CLOSE_TAG} without a matching {OPEN_TAG}")
    try:
        calls = tuple(_parse_call(body, index) for index, body in enumerate(bodies))
    except _Malformed as exc:
        return Action(text, (), str(exc))
    return Action(text, calls, None)


def format_tool_call(call: ToolCall) -> str:
    """The Hermes text of one call; `parse_turn(format_tool_call(c)).tool_calls == (c,)`."""
    return render_tool_call(call.name, call.arguments, multiline=True)


def _parse_call(body: str, index: int) -> ToolCall:
    where = f"tool call #{index + 1}"
    payload = _load_json(body, where)
    if not isinstance(payload, dict):
        raise _Malformed(f"{where}: expected a JSON object with 'name' and 'arguments', got {_kind(payload)}")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Malformed(f"{where}: missing 'name' (a non-empty string)")
    arguments = _arguments(payload.get("arguments", {}), where)
    return ToolCall(name=name.strip(), arguments=arguments)


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    """The arguments object; a JSON string holding an object is accepted too (OpenAI style)."""
    if isinstance(raw, str):
        raw = _load_json(raw, f"{where}: 'arguments' string") if raw.strip() else {}
    if not isinstance(raw, dict):
        raise _Malformed(f"{where}: 'arguments' must be a JSON object, got {_kind(raw)}")
    return raw


def _load_json(text: str, where: str) -> Any:
    if not text.strip():
        raise _Malformed(f"{where}: empty; put a JSON object between the tags")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Malformed(f"{where}: invalid JSON ({exc.msg} at char {exc.pos})") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
