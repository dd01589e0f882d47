"""A real one-step training run (`agentrl train`, the HF engine, the pure-Python `test/ByteSum-v0` env; see
dp_runs.py) stores, for each turn the update trained, the trainer's log-probs of its sampled tokens: one
per sampled token, and, since the update starts from the weights that sampled them, close to the
sampler's (the importance ratio ~1), far closer than the same values misaligned by one token would be.
Evaluation episodes and episodes the update left out (every advantage 0) store none. On a tiny random
Llama over the byte tokenizer in fp32 (about 40 s on CPU), and on SmolLM2-135M in fp32 and under bf16
autocast (about 100 s each): the measured tolerances are the constants below."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from dp_runs import byte_sum_service, run_train, tiny_run_config, train_args

from agentrl.cpu import native_cpu_bf16
from agentrl.store.repository import unpack_logprobs

Turn = tuple[str, float | None, int, list[float], list[float] | None, bool]
"""A stored turn: split, advantage, completion tokens, the sampler's log-probs, the trainer's (or None),
and whether its episode carries a signal (a non-zero advantage)."""

FP32_LOG_RATIO = 1e-5
"""The largest |trainer - sampler| the tiny model's fp32 run may show (measured: 9.5e-7 over 80 tokens;
misaligned by one token, the same tokens differ by 0.14 on average)."""
SMOLLM2_FP32_LOG_RATIO = 1e-4
"""SmolLM2-135M in fp32 (measured on CPU: mean 7.9e-6, max 2.4e-5 over 116 tokens; misaligned: 4.0). The
engine samples one sequence with a KV cache, the update runs packed, padded batches: same weights and
temperature, other orders of summation."""
SMOLLM2_BF16_LOG_RATIO = (0.1, 0.5)
"""(mean, max) of |trainer - sampler| for SmolLM2-135M with the engine and the update both under CPU bf16
autocast (measured: mean 0.035, p99 0.15, max 0.245, every ratio inside [0.8, 1.28], over 116 tokens):
bf16's 8-bit mantissa in the logits of two different kernels."""


def stored_turns(db: Path, name: str) -> list[Turn]:
    """Every turn of run `name` that sampled tokens (`Turn`)."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs where name = ?", (name,)).fetchone()
        rows = conn.execute(
            "select e.id, e.split, t.advantage, t.completion_tokens, t.token_logprobs, t.trainer_logprobs "
            'from turns t join episodes e on e.id = t.episode_id where e.run_id = ? order by e.id, t."index"',
            (run_id,),
        ).fetchall()
    signal = {episode for episode, _, advantage, *_ in rows if advantage}
    return [
        (
            split,
            advantage,
            count,
            unpack_logprobs(sampler),
            None if trainer is None else unpack_logprobs(trainer),
            episode in signal,
        )
        for episode, split, advantage, count, sampler, trainer in rows
        if sampler is not None
    ]


def one_step(tmp_path: Path, name: str, *overrides: str) -> list[Turn]:
    runs, db = tmp_path / "runs", tmp_path / "store.db"
    with byte_sum_service(tmp_path / "service.log") as service:
        config = tiny_run_config(
            tmp_path, service.url, train={"steps": 1}, eval={"num_tasks": 1, "before": True, "after": False}
        )
        run_train(train_args(config, runs, db, name, "trainer.nproc=1", *overrides), tmp_path)
    return stored_turns(db, name)


def log_ratios(turns: list[Turn]) -> list[float]:
    """Checks what every run must show; returns trainer - sampler of every token the update kept."""
    trained = [turn for turn in turns if turn[4] is not None]
    assert trained, "the update recorded no trainer log-probs"
    for split, _, count, sampler, trainer, signal in turns:
        if split == "eval" or not signal:
            assert trainer is None  # no update ran on it, or the update left it out
        else:
            assert trainer is not None and len(trainer) == len(sampler) == count
    return [t - s for *_, sampler, trainer, _ in trained for s, t in zip(sampler, trainer, strict=True)]


def shifted(turns: list[Turn]) -> float:
    """The mean |trainer - sampler| were the trainer's log-probs misaligned by one token: what a mapping
    bug would show (the real difference must be far below it)."""
    pairs = [
        (s, t)
        for *_, sampler, trainer, _ in turns
        if trainer
        for s, t in zip(sampler[1:], trainer[:-1], strict=True)
    ]
    return sum(abs(t - s) for s, t in pairs) / len(pairs)


def summary(name: str, ratios: list[float], turns: list[Turn]) -> str:
    ordered = sorted(abs(r) for r in ratios)
    outside = sum(1 for r in ratios if not 0.8 <= math.exp(r) <= 1.28)
    return (
        f"{name}: {len(ratios)} tokens, |log ratio| mean {sum(ordered) / len(ordered):.2e}, "
        f"p99 {ordered[int(0.99 * (len(ordered) - 1))]:.2e}, max {ordered[-1]:.2e}, "
        f"{outside} outside [0.8, 1.28]; misaligned by one token: mean {shifted(turns):.2e}"
    )


@pytest.mark.slow
def test_a_training_step_stores_trainer_log_probs_beside_the_samplers(tmp_path: Path) -> None:
    turns = one_step(tmp_path, "fp32")
    ratios = log_ratios(turns)
    print(summary("tiny fp32", ratios, turns))
    assert max(map(abs, ratios)) < FP32_LOG_RATIO
    assert shifted(turns) > 100 * FP32_LOG_RATIO  # the check above would catch a shifted mapping


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True])
def test_on_smollm2_the_ratio_stays_near_one(tmp_path: Path, bf16: bool) -> None:
    if bf16 and not native_cpu_bf16():
        pytest.skip("no native CPU bf16 here: the engine and the update would both run in fp32")
    autocast = ("engine.hf.autocast_bf16=true", "update.autocast_bf16=true") if bf16 else ()
    turns = one_step(tmp_path, "smollm2", "model.name=smollm2-135m-instruct", *autocast)
    ratios = log_ratios(turns)
    print(summary("smollm2 bf16" if bf16 else "smollm2 fp32", ratios, turns))
    sizes = [abs(ratio) for ratio in ratios]
    if bf16:
        mean_bound, max_bound = SMOLLM2_BF16_LOG_RATIO
        assert sum(sizes) / len(sizes) < mean_bound and max(sizes) < max_bound
    else:
        assert max(sizes) < SMOLLM2_FP32_LOG_RATIO
    assert shifted(turns) > 2 * max(sizes)  # a shifted mapping would not pass
