"""IGPO's answer-probability measurement on a tiny random Llama built in-process (no download).

Checks the context layout, that batching (padding, sorting, packing) does not change any p_t, that p_t is
the per-token geometric mean computed by a plain full-logits forward pass, and the wiring into a StepBatch.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.credit import episodes_to_batch, estimate
from agentrl.errors import ConfigError
from agentrl.trainer.answer_probs import (
    AnswerFormat,
    AnswerProbConfig,
    ForcedRow,
    answer_probs,
    answer_tokens,
    attach_answer_probs,
    measure_rows,
    turn_contexts,
)
from agentrl.types import Action, Episode, Turn

VOCAB = 64


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


class DigitTokenizer:
    """A stand-in tokenizer for pure logic: one token per character, id = 10 + ord(c) % 50."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [10 + ord(c) % 50 for c in text]}


def turn(index: int, prompt: tuple[int, ...], completion: tuple[int, ...]) -> Turn:
    return Turn(
        index, prompt, completion, (0.0,) * len(completion), "t", Action("t"), "obs", 0.0, False, None
    )


def episode(name: str, turns: tuple[Turn, ...], reward: float = 0.0) -> Episode:
    if turns:
        last = turns[-1]
        turns = (*turns[:-1], Turn(**{**vars(last), "reward": reward}))
    return Episode(name, "env", f"task-{name}", "g", 0, turns, "terminated")


def reference_prob(model: LlamaForCausalLM, row: ForcedRow) -> float:
    """Unbatched, full logits, no logits_to_keep: the definition written out."""
    with torch.no_grad():
        logits = model(torch.tensor([row.input_ids])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    picks = [float(logprobs[k - 1, row.input_ids[k]]) for k in range(row.score_from, len(row.input_ids))]
    return math.exp(sum(picks) / len(picks))


def test_turn_contexts_concatenate_history_then_the_turns_prompt() -> None:
    ep = episode("a", (turn(0, (1, 2), (3,)), turn(1, (4,), (5, 6)), turn(2, (7, 8), (9,))))
    assert turn_contexts(ep) == [[1, 2], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert turn_contexts(episode("b", ())) == []


def test_answer_tokens_split_prefix_and_answer() -> None:
    tokenizer: Any = DigitTokenizer()
    prefix, answer = answer_tokens(tokenizer, "42", AnswerFormat(prefix="<a>"))
    assert prefix == tokenizer("<a>")["input_ids"] and answer == tokenizer("42")["input_ids"]
    with pytest.raises(ConfigError, match="non-empty"):
        answer_tokens(tokenizer, "", AnswerFormat())


def test_batched_equals_unbatched_and_the_definition(model: LlamaForCausalLM) -> None:
    generator = torch.Generator().manual_seed(1)
    rows = []
    for length, scored in [(5, 1), (17, 3), (9, 2), (30, 4), (12, 1), (3, 2)]:
        ids = torch.randint(0, VOCAB, (length,), generator=generator).tolist()
        rows.append(ForcedRow(tuple(ids), length - scored))
    one_pass = measure_rows(model, rows, max_batch_tokens=10_000)
    one_by_one = measure_rows(model, rows, max_batch_tokens=1)
    packed = measure_rows(model, rows, max_batch_tokens=40)
    assert one_pass == pytest.approx(one_by_one, abs=1e-5) and packed == pytest.approx(one_by_one, abs=1e-5)
    assert one_pass == pytest.approx([reference_prob(model, row) for row in rows], abs=1e-5)
    assert all(0.0 < p < 1.0 for p in one_pass)


def test_measurement_restores_training_mode(model: LlamaForCausalLM) -> None:
    model.train()
    try:
        measure_rows(model, [ForcedRow((1, 2, 3), 2)])
        assert model.training
    finally:
        model.eval()


def test_rows_without_context_or_answer_are_refused(model: LlamaForCausalLM) -> None:
    for bad in (ForcedRow((1, 2), 0), ForcedRow((1, 2), 2)):
        with pytest.raises(ConfigError):
            measure_rows(model, [bad])


def test_answer_probs_shapes_and_empty_episode(model: LlamaForCausalLM) -> None:
    tokenizer: Any = DigitTokenizer()
    episodes = [
        episode("a", (turn(0, (1, 2), (3,)), turn(1, (4,), (5,)), turn(2, (6,), (7,)))),
        episode("b", ()),
        episode("c", (turn(0, (8, 9), (10,)),)),
    ]
    probs = answer_probs(episodes, ["12", "12", "345"], model, tokenizer)
    assert [len(p) for p in probs] == [3, 0, 1]
    assert answer_probs([], [], model, tokenizer) == []
    with pytest.raises(ConfigError, match="answers"):
        answer_probs(episodes, ["1"], model, tokenizer)


def test_attach_then_igpo_runs_on_the_batch(model: LlamaForCausalLM) -> None:
    tokenizer: Any = DigitTokenizer()
    episodes = [
        episode("a", (turn(0, (1, 2), (3,)), turn(1, (4,), (5,))), reward=1.0),
        episode("b", (turn(0, (1, 2), (6,)), turn(1, (7,), (8,)), turn(2, (9,), (5,))), reward=0.0),
    ]
    answers = {"task-a": "7", "task-b": "7"}
    config = AnswerProbConfig(answer_format=AnswerFormat(prefix="="), max_batch_tokens=16)
    attached = attach_answer_probs(episodes, answers, model, tokenizer, config)
    expected = answer_probs(episodes, ["7", "7"], model, tokenizer, config)
    assert [[t.answer_prob for t in e.turns] for e in attached] == expected
    batch = episodes_to_batch(attached)
    assert batch.answer_probs is not None and batch.answer_probs.tolist() == pytest.approx(sum(expected, []))
    assert episodes_to_batch(episodes).answer_probs is None
    assert estimate("igpo", batch).shape == (5,)
    with pytest.raises(ConfigError, match="task-a"):
        attach_answer_probs(episodes, {"task-b": "7"}, model, tokenizer)
