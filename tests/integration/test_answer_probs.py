"""IGPO's answer-probability measurement on the real SmolLM2-135M-Instruct (loaded from the local cache).

Two calc-style episodes share the same first prompt; in one the python tool prints the answer, in the other
it prints something unrelated. The answer's probability after the informative observation must rise above
both p_0 and the uninformative p_1. The measured values are printed (run with `-s` to see them).
Marked `slow` like the other tests that load the real model: the module takes ~30-45 s on the shared
2-core machine, no single test over ~16 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agentrl.agent.parsing import format_tool_call
from agentrl.agent.prompting import render_first_prompt, render_observation_delta
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.trainer.answer_probs import AnswerFormat, AnswerProbConfig, answer_probs, attach_answer_probs
from agentrl.types import Action, Episode, ToolCall, Turn

QUESTION = "What is 347 * 29 + 18?"
ANSWER = "10081"
pytestmark = pytest.mark.slow

SUBMIT_PREFIX = '<tool_call>{"name": "submit", "arguments": {"answer": "'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code and return its output",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the final answer",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
    },
]


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any]:
    return load_model(ModelConfig())


def encode(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def make_turn(index: int, prompt: Sequence[int], completion: Sequence[int], call: ToolCall) -> Turn:
    text = format_tool_call(call)
    zeros = (0.0,) * len(completion)
    return Turn(
        index, tuple(prompt), tuple(completion), zeros, text, Action(text, (call,)), "", 0.0, False, None
    )


def calc_episode(tokenizer: Any, name: str, code: str, output: str) -> Episode:
    """Turn 0 runs `code`, whose observation prints `output`; turn 1 submits."""
    first = render_first_prompt(tokenizer, TOOLS, [], QUESTION, "Solve the task with the tools.")
    end = "<|im_end|>"
    python = ToolCall("python", {"code": code})
    submit = ToolCall("submit", {"answer": ANSWER})
    turns = (
        make_turn(0, first, encode(tokenizer, format_tool_call(python) + end), python),
        make_turn(
            1,
            render_observation_delta(tokenizer, f"exit code 0\n{output}", completion_ended=True),
            encode(tokenizer, format_tool_call(submit) + end),
            submit,
        ),
    )
    return Episode(name, "calc", "t-1", "g", 0, turns, "terminated")


@pytest.fixture(scope="module")
def episodes(loaded: tuple[Any, Any]) -> list[Episode]:
    _, tokenizer = loaded
    return [
        calc_episode(tokenizer, "informative", "print(347 * 29 + 18)", ANSWER),
        calc_episode(tokenizer, "uninformative", "print('hello')", "hello"),
    ]


@pytest.fixture(scope="module")
def raw_probs(loaded: tuple[Any, Any], episodes: list[Episode]) -> list[list[float]]:
    """The default format (raw answer after the assistant header), all four rows in one forward pass."""
    model, tokenizer = loaded
    return answer_probs(episodes, [ANSWER] * 2, model, tokenizer, AnswerProbConfig(max_batch_tokens=100_000))


def check_rise(probs: list[list[float]], label: str) -> None:
    (informed_0, informed_1), (blind_0, blind_1) = probs
    print(f"\n{label}: p_0={informed_0:.6f}  p_1 informative={informed_1:.6f}  uninformative={blind_1:.6f}")
    assert informed_0 == pytest.approx(blind_0, abs=1e-5)
    assert informed_1 > informed_0 and informed_1 > blind_1
    assert informed_1 > 2 * blind_1


def test_answer_probability_rises_when_the_context_contains_it(raw_probs: list[list[float]]) -> None:
    check_rise(raw_probs, "raw answer")


def test_rise_holds_in_the_submit_call_format(loaded: tuple[Any, Any], episodes: list[Episode]) -> None:
    model, tokenizer = loaded
    config = AnswerProbConfig(answer_format=AnswerFormat(prefix=SUBMIT_PREFIX))
    check_rise(answer_probs(episodes, [ANSWER] * 2, model, tokenizer, config), "submit-call prefix")


def test_batched_equals_unbatched(
    loaded: tuple[Any, Any], episodes: list[Episode], raw_probs: list[list[float]]
) -> None:
    model, tokenizer = loaded
    # one episode, one row per pass (two rows of different lengths, padded in `raw_probs`' batch)
    single = answer_probs(episodes[:1], [ANSWER], model, tokenizer, AnswerProbConfig(max_batch_tokens=1))
    assert [len(p) for p in raw_probs] == [2, 2]
    assert raw_probs[0] == pytest.approx(single[0], abs=1e-4)
    print(f"\nbatched {raw_probs[0]} vs unbatched {single[0]}")


def test_empty_episode_and_attach(
    loaded: tuple[Any, Any], episodes: list[Episode], raw_probs: list[list[float]]
) -> None:
    model, tokenizer = loaded
    empty = Episode("empty", "calc", "t-1", "g", 0, (), "infra_error")
    attached = attach_answer_probs([empty, episodes[0]], {"t-1": ANSWER}, model, tokenizer)
    assert attached[0].turns == ()
    assert [turn.answer_prob for turn in attached[1].turns] == pytest.approx(raw_probs[0], abs=1e-4)
