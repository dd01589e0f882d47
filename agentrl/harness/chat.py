"""OpenAI chat requests <-> token ids: the chat template, agentrl's tool-call format, and continuations.

What this is: pure functions over a Hugging Face tokenizer, used by the harness endpoint.
- `parse_request` checks an OpenAI `/v1/chat/completions` body and gives a `ChatRequest` of canonical
  `Message`s (content as one string, tool calls as `ToolCall`s); anything it cannot serve is a `ChatError`
  (an OpenAI-style 400 naming the parameter).
- `ChatFormat.render` writes messages as the episode loop does (`agentrl.agent.prompting`): a template that
  knows tools gets `tools=` and OpenAI tool calls; one that does not (SmolLM2's ChatML) gets the tools and
  the Hermes `<tool_call>` format described in the system message, and calls written as `<tool_call>` text.
- `make_reply` turns a completion into what the harness sees: `content` and OpenAI `tool_calls` parsed by
  `agentrl.agent.parsing` (so the model is trained on exactly the format the runner trains it on).
- `continuation_text`: when a request's messages are the previous call's messages, the reply that call
  returned, then new messages, the text to append after the sampled tokens (the end-of-turn marker the
  completion may lack, the new messages, the next assistant header), rendered as
  `prompting.render_observation_delta` renders observations. Earlier tokens are never re-tokenised.

What this is not: a server (`agentrl.harness.endpoint`) or the record of an episode (`recorder`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase

from agentrl.agent.parsing import format_tool_call, parse_turn
from agentrl.agent.prompting import end_of_turn_text, supports_tools, system_prompt
from agentrl.env.toolcall import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from agentrl.errors import ChatError, ModelError
from agentrl.types import Action, ToolCall

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP_STRINGS = 4
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r".*?" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class Message:
    """One chat message in canonical form: what rendering depends on, and what continuations compare."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()


ToolChoice = Literal["auto", "none", "required"] | str


@dataclass(frozen=True)
class ChatRequest:
    """The parts of an OpenAI chat request the endpoint serves; None means "not given"."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"
    model: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    seed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def shown_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools the model is shown: none when `tool_choice` is "none"."""
        return () if self.tool_choice == "none" else self.tools

    @property
    def tools_key(self) -> str:
        """Equal for two requests exactly when their shown tools render the same."""
        return json.dumps(self.shown_tools, sort_keys=True)


def parse_request(body: Any) -> ChatRequest:
    """The `ChatRequest` of a decoded JSON body; `ChatError` (400) for anything not served."""
    if not isinstance(body, dict):
        raise ChatError("the request body must be a JSON object")
    if body.get("stream"):
        raise ChatError("streaming is not supported; set stream=false", "stream", "unsupported_parameter")
    if body.get("n", 1) not in (1, None):
        raise ChatError("only n=1 is supported", "n", "unsupported_parameter")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise ChatError("'messages' must be a non-empty list", "messages")
    messages = tuple(_message(raw, f"messages[{index}]") for index, raw in enumerate(raw_messages))
    tools = _tools(body.get("tools"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        model=str(body.get("model") or ""),
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0, open_low=True),
        max_tokens=None if max_tokens is None else _positive_int(max_tokens, "max_tokens"),
        stop=_stop(body.get("stop")),
        logprobs=bool(body.get("logprobs") or False),
        seed=None if body.get("seed") is None else _int(body["seed"], "seed"),
    )


def _message(raw: Any, where: str) -> Message:
    if not isinstance(raw, dict):
        raise ChatError(f"{where} must be an object", where)
    role = raw.get("role")
    if role not in ROLES:
        raise ChatError(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    content = _content(raw.get("content"), f"{where}.content")
    calls = raw.get("tool_calls") or ()
    if calls and role != "assistant":
        raise ChatError(f"{where}: only assistant messages carry tool_calls", f"{where}.tool_calls")
    if not isinstance(calls, list | tuple):
        raise ChatError(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    return Message(
        "system" if role == "developer" else role,
        content,
        tuple(_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)),
    )


def _content(raw: Any, where: str) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    if isinstance(raw, list):
        parts = []
        for index, part in enumerate(raw):
            if not (
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                raise ChatError(
                    f"{where}[{index}]: only text content parts are supported", where, "unsupported_content"
                )
            parts.append(part["text"])
        return "".join(parts)
    raise ChatError(f"{where} must be a string, a list of text parts or null", where)


def _tool_call(raw: Any, where: str) -> ToolCall:
    body = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise ChatError(f"{where} must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}", where)
    arguments = body.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ChatError(f"{where}.function.arguments is not valid JSON", where) from None
    if not isinstance(arguments, dict):
        raise ChatError(f"{where}.function.arguments must be a JSON object", where)
    return ToolCall(body["name"], arguments)


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ChatError("'tools' must be a list", "tools")
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise ChatError(f"tools[{index}] must be a function tool", f"tools[{index}]")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ChatError(f"tools[{index}].function.name must be a non-empty string", f"tools[{index}]")
    return tuple(raw)


def _tool_choice(raw: Any, tools: Sequence[dict[str, Any]]) -> str:
    if raw is None:
        return "auto"
    if raw in ("auto", "none", "required"):
        return str(raw)
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    known = {tool["function"]["name"] for tool in tools}
    if not isinstance(name, str) or name not in known:
        raise ChatError("tool_choice must be auto, none, required or a function among 'tools'", "tool_choice")
    return name


def _number(
    body: Mapping[str, Any], name: str, low: float, high: float, open_low: bool = False
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ChatError(f"'{name}' must be a number", name)
    if value > high or value < low or (open_low and value == low):
        raise ChatError(f"'{name}' must be in {'(' if open_low else '['}{low}, {high}], got {value}", name)
    return float(value)


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChatError(f"'{name}' must be an integer", name)
    return value


def _positive_int(value: Any, name: str) -> int:
    if _int(value, name) < 1:
        raise ChatError(f"'{name}' must be at least 1", name)
    return int(value)


def _stop(raw: Any) -> tuple[str, ...]:
    stops = (raw,) if isinstance(raw, str) else tuple(raw or ())
    if len(stops) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stops):
        raise ChatError(f"'stop' must be a string or up to {MAX_STOP_STRINGS} non-empty strings", "stop")
    return stops


class ChatFormat:
    """How one tokenizer's chat template writes messages (computed once per tokenizer)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.native = supports_tools(tokenizer)
        self.end_of_turn = end_of_turn_text(tokenizer)
        self.closing = self._closing()

    def render(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], generation: bool) -> str:
        """The template's text of `messages` (with the tools shown, if any), plus the assistant header when
        `generation`. A template error is a `ChatError`."""
        converted = [self._template_message(message) for message in messages]
        if tools and not self.native:
            if converted and converted[0]["role"] == "system":
                converted[0] = {"role": "system", "content": system_prompt(tools, converted[0]["content"])}
            else:
                converted.insert(0, {"role": "system", "content": system_prompt(tools, None)})
        try:
            text = self.tokenizer.apply_chat_template(
                converted,
                tools=list(tools) if tools and self.native else None,
                tokenize=False,
                add_generation_prompt=generation,
            )
        except Exception as exc:  # jinja raises what the template author chose (e.g. role order)
            raise ChatError(f"the model's chat template refused the messages: {exc}", "messages") from None
        return str(text)

    def encode(self, text: str) -> list[int]:
        # The template wrote any BOS it wants; adding special tokens again would duplicate it.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _template_message(self, message: Message) -> dict[str, Any]:
        if message.role != "assistant" or not message.tool_calls:
            return {"role": message.role, "content": message.content}
        if self.native:
            wire = [
                {"type": "function", "function": {"name": call.name, "arguments": dict(call.arguments)}}
                for call in message.tool_calls
            ]
            return {"role": "assistant", "content": message.content, "tool_calls": wire}
        text = "\n".join([message.content, *map(format_tool_call, message.tool_calls)]).strip()
        return {"role": "assistant", "content": text}

    def _closing(self) -> str:
        """What the template writes after an assistant message's content (e.g. "<|im_end|>\\n")."""
        probe = [Message("user", "Probe question.")]
        reply = Message("assistant", "Probe answer.")
        header = self.render(probe, (), True)
        full = self.render([*probe, reply], (), False)
        if not full.startswith(header + reply.content):
            raise ModelError("the chat template rewrites earlier messages; use an append-only template")
        return full[len(header) + len(reply.content) :]


def continuation_text(
    chat: ChatFormat,
    previous: Sequence[Message],
    reply: Message,
    current: ChatRequest,
    ended_turn: bool,
) -> str | None:
    """The text to append after a previous call's prompt and sampled tokens to make `current`'s prompt, when
    `current.messages` are `previous`, then `reply` (the assistant message that call returned), then at least
    one new message; None when they are not (the harness rewrote its history) or the template rewrites
    earlier messages when one is appended."""
    k = len(previous)
    messages = current.messages
    if len(messages) <= k + 1 or tuple(messages[:k]) != tuple(previous) or messages[k] != reply:
        return None
    tools = current.shown_tools
    with_reply = chat.render(messages[: k + 1], tools, False)
    full = chat.render(messages, tools, True)
    if not full.startswith(with_reply):
        return None
    closing = chat.closing.removeprefix(chat.end_of_turn) if ended_turn else chat.closing
    return closing + full[len(with_reply) :]


@dataclass(frozen=True)
class Reply:
    """A completion as the harness sees it: `message` (canonical, what a continuation must echo back), the
    wire `content` and `tool_calls`, the OpenAI finish reason, and the parsed `action` (for the record)."""

    message: Message
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    action: Action


def make_reply(text: str, length_cut: bool, request: ChatRequest, call_ids: Sequence[str]) -> Reply:
    """The reply to `request` for a completion's `text`: cut at the first of the request's stop strings (as
    OpenAI does; the sampled tokens are kept whole), tool calls parsed when tools are shown. `call_ids`
    gives ids to the tool calls in order (at least as many as there may be calls)."""
    for stop in request.stop:
        text = text.split(stop, 1)[0]
    action = parse_turn(text)
    calls = action.tool_calls if request.shown_tools else ()
    if calls:
        content = _BLOCK.sub("", text).strip()
        wire = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
            for call, call_id in zip(calls, call_ids, strict=False)
        ]
        message = Message("assistant", content, calls)
        finish = "length" if length_cut else "tool_calls"
        return Reply(message, content or None, wire, finish, action)
    return Reply(Message("assistant", text), text, [], "length" if length_cut else "stop", action)
