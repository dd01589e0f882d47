"""Prompt rendering on real tokenizers: a byte-level ChatML one built in memory, a template with native tool
support, and (when the model cache exists) SmolLM2's own tokenizer.

The byte-level tokenizer has no merges, so tokenising pieces separately equals tokenising the whole: that lets
the tests check that first prompt + completion + observation deltas is exactly a full re-render.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tiny_tokenizers import CHATML, byte_tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from agentrl.agent.parsing import format_tool_call
from agentrl.agent.prompting import (
    DEFAULT_INSTRUCTIONS,
    end_of_turn_ids,
    render_first_prompt,
    render_observation_delta,
    supports_tools,
    system_prompt,
)
from agentrl.env.core import tool_spec
from agentrl.errors import ModelError
from agentrl.models import alias_cache_path
from agentrl.types import ToolCall

# A much reduced Qwen2.5-style template: tools go in the system turn; it renders tool calls and results.
NATIVE_TOOLS = (
    "{% if tools %}<|im_start|>system\n{{ messages[0]['content'] }}\n<tools>{% for t in tools %}"
    "{{ t | tojson }}{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'system' and tools %}"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "<|im_end|>\n"
    "{% elif m['role'] == 'assistant' and m.get('tool_calls') %}<|im_start|>assistant\n{{ m['content'] }}"
    "{% for c in m['tool_calls'] %}<tool_call>{{ c['function'] | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOOLS = [tool_spec("python", "Run Python code.", {"code": {"type": "string"}})]
EXAMPLES: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "python", "arguments": {"code": "print(2+2)"}}],
    },
    {"role": "tool", "content": "4"},
]


@pytest.fixture(scope="module")
def chatml() -> PreTrainedTokenizerFast:
    return byte_tokenizer(CHATML)


@pytest.fixture(scope="module")
def native() -> PreTrainedTokenizerFast:
    return byte_tokenizer(NATIVE_TOOLS)


@pytest.fixture(scope="module")
def smollm2() -> PreTrainedTokenizerBase:
    folder = alias_cache_path("smollm2-135m-instruct")
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"no model cache at {folder}; run `make setup` (or any slow test) to build it")
    return AutoTokenizer.from_pretrained(folder)


def test_system_prompt_lists_tools_and_the_exact_call_format() -> None:
    text = system_prompt(TOOLS, None)
    assert text.startswith(DEFAULT_INSTRUCTIONS)
    assert json.dumps(TOOLS[0]) in text
    assert format_tool_call(ToolCall("<tool name>", {"<argument>": "<value>"})) in text
    assert system_prompt(TOOLS, "Solve it.").startswith("Solve it.\n")


def test_supports_tools_tells_plain_chatml_from_a_tool_template(chatml, native) -> None:
    assert not supports_tools(chatml)
    assert supports_tools(native)


def test_end_of_turn_is_im_end(chatml) -> None:
    assert end_of_turn_ids(chatml) == frozenset({chatml.convert_tokens_to_ids("<|im_end|>")})


def test_first_prompt_on_plain_chatml_teaches_tools_and_renders_examples_hermes_style(chatml) -> None:
    text = chatml.decode(render_first_prompt(chatml, TOOLS, EXAMPLES, "What is 3+5?", "Be brief."))
    call = format_tool_call(ToolCall("python", {"code": "print(2+2)"}))
    expected = (
        f"<|im_start|>system\n{system_prompt(TOOLS, 'Be brief.')}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        f"<|im_start|>assistant\n{call}<|im_end|>\n"
        "<|im_start|>tool\n4<|im_end|>\n"
        "<|im_start|>user\nWhat is 3+5?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == expected


def test_first_prompt_on_a_tool_template_hands_it_tools_and_tool_messages(native) -> None:
    examples = [
        EXAMPLES[0],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "python", "arguments": "{}"}}],
        },
        EXAMPLES[2],
    ]
    text = native.decode(render_first_prompt(native, TOOLS, examples, "What is 3+5?"))
    assert text.startswith(f"<|im_start|>system\n{DEFAULT_INSTRUCTIONS}\n<tools>")
    assert '"name": "python"' in text and "<tool_response>\n4\n</tool_response>" in text
    assert '<tool_call>{"name": "python", "arguments": {}}</tool_call>' in text
    assert "You can call these tools" not in text


@pytest.mark.parametrize("ended", [True, False])
def test_delta_after_a_completion_depends_on_whether_it_sampled_im_end(chatml, ended: bool) -> None:
    text = chatml.decode(render_observation_delta(chatml, "result: 8", completion_ended=ended))
    tail = "\n<|im_start|>tool\nresult: 8<|im_end|>\n<|im_start|>assistant\n"
    assert text == (tail if ended else "<|im_end|>" + tail)


@pytest.mark.parametrize("tokenizer_name", ["chatml", "native"])
def test_first_prompt_plus_completions_plus_deltas_equals_a_full_render(request, tokenizer_name: str) -> None:
    tokenizer = request.getfixturevalue(tokenizer_name)
    tool_native = supports_tools(tokenizer)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = render_first_prompt(tokenizer, TOOLS, [], "Q")
    ids += tokenizer.encode("first", add_special_tokens=False) + [end]
    ids += render_observation_delta(tokenizer, "obs 1", completion_ended=True)
    ids += tokenizer.encode("second", add_special_tokens=False)  # ran out of tokens: no <|im_end|>
    ids += render_observation_delta(tokenizer, "obs 2", completion_ended=False)

    def tool(content: str) -> dict[str, str]:
        return {"role": "tool", "content": content}

    system = DEFAULT_INSTRUCTIONS if tool_native else system_prompt(TOOLS, None)
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "first"},
        tool("obs 1"),
        {"role": "assistant", "content": "second"},
        tool("obs 2"),
    ]
    full = tokenizer.apply_chat_template(
        messages, tools=TOOLS if tool_native else None, tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.decode(ids) == full


def test_a_template_that_rewrites_history_is_refused() -> None:
    counting = byte_tokenizer("{{ messages | length }}" + CHATML)
    with pytest.raises(ModelError, match="append-only"):
        render_observation_delta(counting, "obs", completion_ended=True)


def test_smollm2_delta_tokens(smollm2) -> None:
    im_end = smollm2.convert_tokens_to_ids("<|im_end|>")
    assert not supports_tools(smollm2)
    assert end_of_turn_ids(smollm2) == frozenset({im_end})
    ended = render_observation_delta(smollm2, "x = 8", completion_ended=True)
    cut = render_observation_delta(smollm2, "x = 8", completion_ended=False)
    assert cut == [im_end, *ended]
    assert smollm2.decode(ended) == "\n<|im_start|>tool\nx = 8<|im_end|>\n<|im_start|>assistant\n"


def test_smollm2_first_prompt_is_the_template_render(smollm2) -> None:
    ids = render_first_prompt(smollm2, TOOLS, EXAMPLES, "What is 3+5?")
    text = smollm2.decode(ids)
    assert text.startswith("<|im_start|>system\n" + DEFAULT_INSTRUCTIONS)
    assert text.endswith("<|im_start|>user\nWhat is 3+5?<|im_end|>\n<|im_start|>assistant\n")
    assert ids.count(smollm2.convert_tokens_to_ids("<|im_start|>")) == 6  # system, 4 messages, header
