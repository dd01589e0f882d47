"""The harness endpoint's chat layer, pure: request checks, rendering in agentrl's tool format, replies with
OpenAI tool calls, and the continuation text that appends new messages without re-tokenising the reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.parsing import format_tool_call
from agentrl.agent.prompting import render_first_prompt, render_observation_delta
from agentrl.env.core import tool_spec
from agentrl.errors import ChatError
from agentrl.harness.chat import ChatFormat, Message, continuation_text, make_reply, parse_request
from agentrl.types import ToolCall

TOKENIZER = byte_tokenizer(pad=False)
CHAT = ChatFormat(TOKENIZER)
TOOLS = [tool_spec("add", "Add n.", {"n": {"type": "integer"}})]
CALL_IDS = [f"call_{i}" for i in range(4)]


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "agentrl", "messages": [{"role": "user", "content": "Reach 5."}], **fields}


def test_a_request_in_canonical_form() -> None:
    request = parse_request(
        body(
            messages=[
                {
                    "role": "developer",
                    "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief"}],
                },
                {"role": "user", "content": "Reach 5."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"n": 2}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "total=2"},
            ],
            tools=TOOLS,
            temperature=0.5,
            max_completion_tokens=7,
            stop="END",
            logprobs=True,
            frequency_penalty=0.1,  # unknown fields are ignored
        )
    )
    assert request.messages[0] == Message("system", "Be brief")
    assert request.messages[2] == Message("assistant", "", (ToolCall("add", {"n": 2}),))
    assert (request.temperature, request.max_tokens, request.stop, request.logprobs) == (
        0.5,
        7,
        ("END",),
        True,
    )
    assert request.tool_choice == "auto" and request.shown_tools == tuple(TOOLS)
    assert parse_request(body(tools=TOOLS, tool_choice="none")).shown_tools == ()


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content",
        ),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream": True}, "stream"),
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0]"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ],
)
def test_bad_requests_name_their_parameter(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ChatError) as caught:
        parse_request(body(**fields))
    assert caught.value.status == 400 and caught.value.param == param


def test_rendering_matches_the_episode_loop_first_prompt() -> None:
    """With the env's tools and no system message, the endpoint renders the runner's own first prompt."""
    request = parse_request(body(tools=TOOLS))
    rendered = CHAT.encode(CHAT.render(request.messages, request.shown_tools, True))
    assert rendered == render_first_prompt(TOKENIZER, TOOLS, [], "Reach 5.")


def test_a_reply_with_a_tool_call_and_without() -> None:
    request = parse_request(body(tools=TOOLS))
    text = "Adding.\n" + format_tool_call(ToolCall("add", {"n": 2}))
    reply = make_reply(text, False, request, CALL_IDS)
    assert reply.content == "Adding." and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": json.dumps({"n": 2})}}
    ]
    assert reply.message == Message("assistant", "Adding.", (ToolCall("add", {"n": 2}),))
    plain = make_reply("I think 5. END more", True, parse_request(body(stop=["END"])), CALL_IDS)
    assert (plain.content, plain.tool_calls, plain.finish_reason) == ("I think 5. ", [], "length")
    broken = make_reply('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', False, request, CALL_IDS)
    assert broken.tool_calls == [] and broken.action.parse_error is not None


@pytest.mark.parametrize("ended_turn", [True, False])
def test_the_continuation_equals_the_runner_observation_delta(ended_turn: bool) -> None:
    first = parse_request(body(tools=TOOLS))
    reply = make_reply(format_tool_call(ToolCall("add", {"n": 2})), False, first, CALL_IDS)
    wire = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}
    second = parse_request(
        body(
            messages=[
                *first_messages(),
                wire,
                {"role": "tool", "tool_call_id": "call_0", "content": "total=2"},
            ],
            tools=TOOLS,
        )
    )
    text = continuation_text(CHAT, first.messages, reply.message, second, ended_turn)
    assert text is not None
    assert CHAT.encode(text) == render_observation_delta(TOKENIZER, "total=2", ended_turn)


def first_messages() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Reach 5."}]


def test_a_rewritten_history_is_no_continuation() -> None:
    first = parse_request(body(tools=TOOLS))
    reply = make_reply(format_tool_call(ToolCall("add", {"n": 2})), False, first, CALL_IDS)
    edited = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "add", "arguments": '{"n": 3}'}}],
    }
    tool = {"role": "tool", "content": "total=3"}
    for messages in [
        [*first_messages(), edited, tool],  # the reply was edited
        [{"role": "user", "content": "Summary: reached 2."}, tool],  # history summarised
        first_messages(),  # the same request again
    ]:
        later = parse_request(body(messages=messages, tools=TOOLS))
        assert continuation_text(CHAT, first.messages, reply.message, later, True) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": ["bash"]},
        {"tools": [{"type": "function", "function": "bash"}]},
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": "add"}},
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "add", "arguments": "{"}}],
                }
            ]
        },
        {"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "add"}}]}]},
        {"messages": ["hello"]},
        {"seed": 1.5},
    ],
)
def test_malformed_shapes_are_400s_not_crashes(fields: dict[str, Any]) -> None:
    with pytest.raises(ChatError):
        parse_request(body(**fields))
