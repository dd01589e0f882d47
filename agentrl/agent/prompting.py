"""Prompt rendering: the first prompt of an episode, and the tokens appended after each completion.

What this is: pure functions over a Hugging Face tokenizer and its chat template. When the template knows
about tools (it renders `tools=` differently, e.g. Qwen2.5) we hand it the tool specs and OpenAI-style tool
messages. When it does not (SmolLM2's plain ChatML), we describe the tools and the exact Hermes
`<tool_call>` format in the system message and send tool results back as messages with the role `tool`
(a generic ChatML template renders any role name). Measured on SmolLM2-135M-Instruct with the calc env's
few-shot exchange: results sent as `user` messages wrapped in `<tool_response>` tags made the model answer
every new question by imitating a tool response (0 of 8 greedy turns held a tool call); as `tool` messages,
8 of 8 did.

Token-in/token-out: after turn 0 we never re-render the history. `render_observation_delta` renders a
dummy history with and without one more tool message and tokenises only the difference (the end-of-turn
marker the completion may lack, the tool message, the next assistant header). This works for any
append-only template, ChatML-like or not; a template that rewrites earlier turns is refused with a clear
error.

What this is not: a chat client. It builds token ids; it neither samples nor parses (see `parsing.py`).
Known simplification: observation text is tokenised like any text, so an env that echoes a special-token
string (e.g. "<|im_end|>") gets it tokenised as that special token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrl.agent.parsing import CLOSE_TAG, OPEN_TAG, format_tool_call
from agentrl.errors import ModelError
from agentrl.types import ToolCall

if TYPE_CHECKING:  # annotations only: rendering needs no transformers import
    from transformers import PreTrainedTokenizerBase

DEFAULT_INSTRUCTIONS = "You are an agent that solves the user's task by calling tools, one step at a time."

ChatMessage = dict[str, Any]

_PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "probe", "parameters": {}}}
_PROBE_USER = "Probe question."
_PROBE_REPLY = "Probe answer."


def supports_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True when the chat template renders `tools=` (and so, by convention, tool roles and tool calls)."""
    probe = [{"role": "user", "content": _PROBE_USER}]
    return _render(tokenizer, probe, [_PROBE_TOOL], False) != _render(tokenizer, probe, None, False)


def system_prompt(tools: Sequence[Mapping[str, Any]], instructions: str | None) -> str:
    """A system message that teaches a template without tool support the tools and the call format."""
    specs = "\n".join(json.dumps(spec, ensure_ascii=False) for spec in tools)
    example = format_tool_call(ToolCall(name="<tool name>", arguments={"<argument>": "<value>"}))
    return (
        f"{instructions or DEFAULT_INSTRUCTIONS}\n\n"
        f"You can call these tools, described as JSON schemas:\n<tools>\n{specs}\n</tools>\n\n"
        f"To call a tool, write a JSON object with its name and arguments inside {OPEN_TAG}{CLOSE_TAG} "
        f"tags, exactly like this:\n{example}\n"
        f"Each tool's result comes back in a message from the tool."
    )


def render_first_prompt(
    tokenizer: PreTrainedTokenizerBase,
    tools: Sequence[Mapping[str, Any]],
    examples: Sequence[Mapping[str, Any]],
    observation: str,
    instructions: str | None = None,
) -> list[int]:
    """[P] ids of system message, few-shot examples, the first observation and the assistant header."""
    native = supports_tools(tokenizer)
    system = (instructions or DEFAULT_INSTRUCTIONS) if native else system_prompt(tools, instructions)
    messages = [
        {"role": "system", "content": system},
        *(_example_message(example, native) for example in examples),
        {"role": "user", "content": observation},
    ]
    text = _render(tokenizer, messages, list(tools) if native else None, True)
    return _encode(tokenizer, text)


@dataclass(frozen=True)
class EpisodeRenderer:
    """The renderings a context policy needs (`agentrl.agent.context.Renderer`), for one episode's
    tokenizer, tools, few-shot examples and instructions."""

    tokenizer: Any
    tools: Sequence[Mapping[str, Any]]
    examples: Sequence[Mapping[str, Any]]
    instructions: str | None = None

    def first(self, observation: str) -> list[int]:
        return render_first_prompt(self.tokenizer, self.tools, self.examples, observation, self.instructions)

    def delta(self, observation: str, completion_ended: bool) -> list[int]:
        return render_observation_delta(self.tokenizer, observation, completion_ended)

    def request(self, observation: str, instruction: str, completion_ended: bool) -> list[int]:
        """The ids appended after a completion to show its observation, then ask `instruction` as the
        user (a summary request, `agentrl.agent.context`)."""
        messages = [_tool_message(observation, True), {"role": "user", "content": instruction}]
        return _encode(self.tokenizer, messages_delta_text(self.tokenizer, messages, completion_ended))


def render_observation_delta(
    tokenizer: PreTrainedTokenizerBase, observation: str, completion_ended: bool
) -> list[int]:
    """[D] ids to append after a completion: end of turn (unless sampled), the tool message, the header."""
    return _encode(tokenizer, observation_delta_text(tokenizer, observation, completion_ended))


def observation_delta_text(
    tokenizer: PreTrainedTokenizerBase, observation: str, completion_ended: bool
) -> str:
    return messages_delta_text(tokenizer, [_tool_message(observation, True)], completion_ended)


def messages_delta_text(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[ChatMessage], completion_ended: bool
) -> str:
    """The text to append after a completion so that `messages` follow it, then the next assistant header:
    the template's end of turn (unless the completion sampled it), the messages as the template renders
    them after an assistant message, the header."""
    native = supports_tools(tokenizer)
    tools = [_PROBE_TOOL] if native else None
    history: list[ChatMessage] = [{"role": "user", "content": _PROBE_USER}]
    reply = {"role": "assistant", "content": _PROBE_REPLY}
    closing = _closing_text(tokenizer, history, reply, tools)
    with_reply = _render(tokenizer, [*history, reply], tools, False)
    with_messages = _render(tokenizer, [*history, reply, *messages], tools, True)
    if not with_messages.startswith(with_reply):
        raise ModelError(_NOT_APPEND_ONLY)
    if completion_ended:
        closing = closing.removeprefix(end_of_turn_text(tokenizer))
    return closing + with_messages[len(with_reply) :]


def end_of_turn_text(tokenizer: PreTrainedTokenizerBase) -> str:
    """The special token the template puts right after an assistant message ("<|im_end|>" for ChatML)."""
    history: list[ChatMessage] = [{"role": "user", "content": _PROBE_USER}]
    closing = _closing_text(tokenizer, history, {"role": "assistant", "content": _PROBE_REPLY}, None)
    ids = _encode(tokenizer, closing)
    if not ids or ids[0] not in set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder):
        raise ModelError(
            "the chat template closes assistant turns without a special token; "
            "use a chat model whose template ends turns with one (e.g. ChatML's <|im_end|>)"
        )
    return str(tokenizer.convert_ids_to_tokens(ids[0]))


def end_of_turn_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Ids that end an assistant turn: the template's end-of-turn token and the tokenizer's eos."""
    ids = {_token_id(tokenizer, end_of_turn_text(tokenizer))}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(found, int)
    return found


def _closing_text(
    tokenizer: PreTrainedTokenizerBase, history: list[ChatMessage], reply: ChatMessage, tools: Any
) -> str:
    """What the template writes after an assistant message's content (e.g. "<|im_end|>\\n")."""
    header = _render(tokenizer, history, tools, True)
    full = _render(tokenizer, [*history, reply], tools, False)
    if not full.startswith(header + reply["content"]):
        raise ModelError(_NOT_APPEND_ONLY)
    return full[len(header) + len(reply["content"]) :]


def _example_message(example: Mapping[str, Any], native: bool) -> ChatMessage:
    """One few-shot message from an env, in the form this template understands."""
    role, content = example["role"], str(example.get("content") or "")
    if role == "tool":
        return _tool_message(content, native)
    calls = [_to_tool_call(raw) for raw in example.get("tool_calls") or ()]
    if role != "assistant" or not calls:
        return {"role": role, "content": content}
    if native:
        wire = [
            {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}} for c in calls
        ]
        return {"role": "assistant", "content": content, "tool_calls": wire}
    return {"role": "assistant", "content": "\n".join([content, *map(format_tool_call, calls)]).strip()}


def _to_tool_call(raw: Mapping[str, Any]) -> ToolCall:
    """A call given as {"name", "arguments"} or the OpenAI {"function": {"name", "arguments"}}."""
    body = raw.get("function", raw)
    arguments = body.get("arguments") or {}
    return ToolCall(
        name=body["name"], arguments=json.loads(arguments) if isinstance(arguments, str) else arguments
    )


def _tool_message(content: str, native: bool) -> ChatMessage:
    """A tool result; the same message whether or not the template knows tools (see the module doc)."""
    del native
    return {"role": "tool", "content": content}


def _render(
    tokenizer: PreTrainedTokenizerBase, messages: list[ChatMessage], tools: Any, generation: bool
) -> str:
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation
    )
    return str(text)


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    # The template already wrote any BOS it wants; adding special tokens again would duplicate it.
    return list(tokenizer.encode(text, add_special_tokens=False))


_NOT_APPEND_ONLY = (
    "the chat template rewrites earlier messages when one is appended, so turns cannot be appended "
    "token-in/token-out; use a model with an append-only template (ChatML, Llama 3, Qwen2.5)"
)
