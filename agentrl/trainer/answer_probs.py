"""IGPO's measurement: the policy's probability of the task's known answer before each turn.

What this is: for an episode of T turns, p_0..p_{T-1} (docs/credit.md, IGPO), where p_t is measured on the
context the policy saw before turn t — for t = 0 the first prompt, for t > 0 everything up to and including
turn t-1's observation and turn t's assistant header, i.e. "after each non-final turn's observation" —
with the answer teacher-forced after it:

    p_t = exp(mean_j log pi(a_j | context_t, prefix, a_<j))      (a per-token geometric mean, not a product)

The answer is rendered into tokens by one function, `answer_tokens` (see `AnswerFormat`). Rows from all
episodes and turns are sorted by length and packed into right-padded batches under a padded-token budget,
run under `torch.inference_mode`; logits are projected only at the answer positions (transformers'
boolean `logits_to_keep`), so a long context costs no vocabulary-sized logits.

What this is not: the IGPO estimator (`agentrl/credit/igpo.py` turns these p_t into advantages), and not a
KV-cache reuse scheme: each row is a full forward pass of its context (turn t's context is a prefix of turn
t+1's, which a cache could share; at our context lengths the plain batch is simpler and fast enough).
Models must accept a 2D boolean `logits_to_keep` (transformers >= 5 causal LMs such as Llama and Qwen2).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.credit.answer import AnswerFormat, AnswerProbConfig
from agentrl.errors import ConfigError
from agentrl.types import Episode

__all__ = ["AnswerFormat", "AnswerProbConfig", "answer_probs", "answer_tokens", "attach_answer_probs"]


@dataclass(frozen=True)
class ForcedRow:
    """One measurement: `input_ids` = context + forced tokens; tokens from `score_from` on are scored."""

    input_ids: tuple[int, ...]
    score_from: int


def answer_tokens(
    tokenizer: PreTrainedTokenizerBase, answer: str, answer_format: AnswerFormat
) -> tuple[list[int], list[int]]:
    """(unscored prefix ids, scored answer ids) of `answer` rendered as `prefix + answer`.

    The two are tokenised together when the prefix's tokens survive as a prefix of the joint tokenisation
    (so the answer is tokenised as the model would write it after the prefix), else separately.
    """
    prefix_ids = _encode(tokenizer, answer_format.prefix)
    joint_ids = _encode(tokenizer, answer_format.prefix + answer)
    if joint_ids[: len(prefix_ids)] == prefix_ids:
        answer_ids = joint_ids[len(prefix_ids) :]
    else:
        answer_ids = _encode(tokenizer, answer)
    if not answer_ids:
        raise ConfigError(f"the answer {answer!r} tokenises to nothing; IGPO needs a non-empty answer")
    return prefix_ids, answer_ids


def turn_contexts(episode: Episode) -> list[list[int]]:
    """[T] the token context before each turn: all earlier prompt+completion tokens, then turn t's prompt."""
    contexts: list[list[int]] = []
    history: list[int] = []
    for turn in episode.turns:
        contexts.append(history + list(turn.prompt_ids))
        history = contexts[-1] + list(turn.completion_ids)
    return contexts


def forced_rows(episode: Episode, prefix_ids: Sequence[int], answer_ids: Sequence[int]) -> list[ForcedRow]:
    """[T] rows: each turn's context, then the prefix and answer; only the answer tokens are scored."""
    rows = []
    for context in turn_contexts(episode):
        start = len(context) + len(prefix_ids)
        rows.append(ForcedRow(tuple(context) + tuple(prefix_ids) + tuple(answer_ids), start))
    return rows


def measure_rows(
    model: PreTrainedModel, rows: Sequence[ForcedRow], max_batch_tokens: int = 8192
) -> list[float]:
    """[R] exp(mean log-probability of each row's scored tokens), in the order of `rows`, batched."""
    for row in rows:
        if not 1 <= row.score_from < len(row.input_ids):
            raise ConfigError(f"a row needs context and scored tokens; got score_from={row.score_from}")
    probs = [0.0] * len(rows)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for indices in _batches(rows, max_batch_tokens):
                values = _measure_batch(model, [rows[i] for i in indices])
                for index, value in zip(indices, values, strict=True):
                    probs[index] = value
    finally:
        model.train(was_training)
    return probs


def answer_probs(
    episodes: Sequence[Episode],
    answers: Sequence[str],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: AnswerProbConfig | None = None,
) -> list[list[float]]:
    """Per episode, p_0..p_{T-1} of its answer (an empty list for an episode with no turns)."""
    config = config or AnswerProbConfig()
    if len(episodes) != len(answers):
        raise ConfigError(f"got {len(episodes)} episodes but {len(answers)} answers")
    rows: list[ForcedRow] = []
    counts: list[int] = []
    for episode, answer in zip(episodes, answers, strict=True):
        prefix_ids, answer_ids = answer_tokens(tokenizer, answer, config.answer_format)
        episode_rows = forced_rows(episode, prefix_ids, answer_ids)
        rows.extend(episode_rows)
        counts.append(len(episode_rows))
    flat = measure_rows(model, rows, config.max_batch_tokens)
    out, start = [], 0
    for count in counts:
        out.append(flat[start : start + count])
        start += count
    return out


def attach_answer_probs(
    episodes: Sequence[Episode],
    answers: Mapping[str, str],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: AnswerProbConfig | None = None,
) -> list[Episode]:
    """Copies of `episodes` whose turns carry `answer_prob` (p_t); `answers` maps task id -> answer text."""
    missing = sorted({episode.task_id for episode in episodes} - set(answers))
    if missing:
        raise ConfigError(f"IGPO needs each task's answer; no answer for task ids {missing[:5]}")
    probs = answer_probs(episodes, [answers[e.task_id] for e in episodes], model, tokenizer, config)
    return [
        replace(
            episode,
            turns=tuple(replace(turn, answer_prob=p) for turn, p in zip(episode.turns, ps, strict=True)),
        )
        for episode, ps in zip(episodes, probs, strict=True)
    ]


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _batches(rows: Sequence[ForcedRow], max_batch_tokens: int) -> Iterator[list[int]]:
    """Row indices, longest first, grouped so that rows x longest row <= max_batch_tokens (>= 1 row)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].input_ids))
    batch: list[int] = []
    for index in order:
        width = len(rows[batch[0]].input_ids) if batch else len(rows[index].input_ids)
        if batch and (len(batch) + 1) * width > max_batch_tokens:
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def _measure_batch(model: PreTrainedModel, rows: Sequence[ForcedRow]) -> list[float]:
    """One right-padded forward pass; logits only where a scored token is predicted."""
    width = max(len(row.input_ids) for row in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    predicts = torch.zeros(len(rows), width, dtype=torch.bool)  # position k predicts token k + 1
    for b, row in enumerate(rows):
        input_ids[b, : len(row.input_ids)] = torch.tensor(row.input_ids)
        attention[b, : len(row.input_ids)] = 1
        predicts[b, row.score_from - 1 : len(row.input_ids) - 1] = True
    device = next(model.parameters()).device
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        logits_to_keep=predicts.to(device),
    ).logits
    logits = logits.reshape(-1, logits.shape[-1])  # [N, V], rows in (batch, position) order
    targets = input_ids[:, 1:][predicts[:, :-1]].to(device)  # [N] the token each kept position predicts
    logprobs = torch.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)
    counts = predicts.sum(dim=1).tolist()
    return [float(torch.exp(chunk.mean())) for chunk in torch.split(logprobs.cpu(), counts)]
