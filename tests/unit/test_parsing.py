"""Hermes tool-call parsing: well-formed calls, many malformed ones, and the format/parse round trip."""

from __future__ import annotations

import pytest

from agentrl.agent.parsing import CLOSE_TAG, OPEN_TAG, format_tool_call, parse_turn
from agentrl.env import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, render_tool_call
from agentrl.types import Action, ToolCall


def test_plain_text_is_a_clean_action_without_calls() -> None:
    assert parse_turn("The answer is 42.") == Action("The answer is 42.", (), None)


def test_empty_text_is_a_clean_action_without_calls() -> None:
    assert parse_turn("") == Action("", (), None)


def test_one_call_with_surrounding_text() -> None:
    text = 'Let me compute.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    action = parse_turn(text)
    assert action.parse_error is None
    assert action.text == text
    assert action.tool_calls == (ToolCall("python", {"code": "print(1)"}),)


def test_several_calls_keep_their_order() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> then '
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert [call.name for call in parse_turn(text).tool_calls] == ["a", "b"]


def test_arguments_as_a_json_string_are_accepted() -> None:
    text = '<tool_call>{"name": "submit", "arguments": "{\\"answer\\": 42}"}</tool_call>'
    assert parse_turn(text).tool_calls == (ToolCall("submit", {"answer": 42}),)


@pytest.mark.parametrize("arguments", ['""', "null"])
def test_empty_or_missing_arguments_become_an_empty_object(arguments: str) -> None:
    missing = parse_turn('<tool_call>{"name": "look"}</tool_call>')
    empty = parse_turn(f'<tool_call>{{"name": "look", "arguments": {arguments}}}</tool_call>')
    assert missing.tool_calls == (ToolCall("look", {}),)
    if arguments == '""':
        assert empty.tool_calls == (ToolCall("look", {}),)
    else:
        assert empty.tool_calls == () and "'arguments' must be a JSON object" in str(empty.parse_error)


def test_name_is_stripped_of_whitespace() -> None:
    assert (
        parse_turn('<tool_call>{"name": " look ", "arguments": {}}</tool_call>').tool_calls[0].name == "look"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>', "invalid JSON"),
        ("<tool_call>{'name': 'a', 'arguments': {}}</tool_call>", "invalid JSON"),
        ('<tool_call>{"name": "a", "arguments": {},}</tool_call>', "invalid JSON"),
        ("<tool_call></tool_call>", "empty"),
        ("<tool_call>   \n </tool_call>", "empty"),
        ('<tool_call>{"arguments": {}}</tool_call>', "missing 'name'"),
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "missing 'name'"),
        ('<tool_call>{"name": 7, "arguments": {}}</tool_call>', "missing 'name'"),
        ('<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>', "must be a JSON object, got a list"),
        ('<tool_call>{"name": "a", "arguments": 3}</tool_call>', "must be a JSON object, got a number"),
        ('<tool_call>{"name": "a", "arguments": "[1]"}</tool_call>', "must be a JSON object, got a list"),
        ('<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>', "'arguments' string: invalid JSON"),
        ('<tool_call>["a", {}]</tool_call>', "expected a JSON object"),
        ('<tool_call>"a"</tool_call>', "expected a JSON object"),
        ('<tool_call>{"name": "a", "arguments": {}}', "unterminated <tool_call>"),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name"', "unterminated"),
        ('{"name": "a", "arguments": {}}</tool_call>', "without a matching <tool_call>"),
    ],
)
def test_malformed_turns_carry_no_calls_and_say_why(text: str, expected: str) -> None:
    action = parse_turn(text)
    assert action.text == text
    assert action.tool_calls == ()
    assert action.parse_error is not None and expected in action.parse_error


def test_one_bad_call_among_good_ones_rejects_the_turn_and_names_it() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": 1}</tool_call>'
    action = parse_turn(text)
    assert action.tool_calls == ()
    assert action.parse_error is not None and action.parse_error.startswith("tool call #2")


@pytest.mark.parametrize(
    "call",
    [
        ToolCall("python", {"code": 'print("hi")\nx = {"a": [1, 2]}'}),
        ToolCall("submit", {"answer": 42, "unit": None, "ok": True}),
        ToolCall("search", {"query": "café ünïcode ✓"}),
        ToolCall("look", {}),
    ],
)
def test_format_then_parse_round_trips(call: ToolCall) -> None:
    text = format_tool_call(call)
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
    assert parse_turn(text) == Action(text, (call,), None)
    inline = render_tool_call(call.name, call.arguments)
    assert parse_turn(inline) == Action(inline, (call,), None)


def test_the_parser_and_the_env_renderer_share_one_format() -> None:
    assert (OPEN_TAG, CLOSE_TAG) == (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    call = ToolCall("search", {"query": "café"})
    assert format_tool_call(call) == render_tool_call(call.name, call.arguments, multiline=True)
