"""Learning points the right way: one real update through the whole path moves the sampler as credit says.

On a fixed seeded batch (a tiny random Llama over the byte tokenizer; the cached engine sampling from a bf16
copy with dithered rounding, the default sampler fix), the episodes go through the trainer's own functions:
credit (`step.compute_advantages`, grpo and gigpo) -> samples (`step.training_samples`) -> PPO loss and
AdamW (`Learner.update`) -> the engine's weights (`step.publish_weights`). Then the engine's own
log-probability of every turn (teacher-forced through its compute copy) must rise for turns with a positive
advantage and fall for turns with a negative one.

The check must fail when the pipeline is broken; each injected fault shows it does: a flipped advantage
sign, a loss mask on the prompt instead of the sampled tokens, engine weights left stale after the update,
and a zero learning rate.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import pytest
import torch
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.engines.cached import CachedEngine
from agentrl.agent.engines.configs import CachedEngineConfig
from agentrl.config import RunConfig, load_config
from agentrl.trainer.parallel import SINGLE_PROCESS
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.step import compute_advantages, make_learner, publish_weights, training_samples
from agentrl.types import Action, Episode, Turn

TEMPERATURE = 1.0
GROUPS, MEMBERS = 2, 4
PROMPTS = ("<|im_start|>user\nWhat is 12*7?<|im_end|>\n", "<|im_start|>user\nName a colour.<|im_end|>\n")
OBSERVATION = "<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n"
Fault = Callable[[list[TrainSample]], list[TrainSample]] | None


def run_config(estimator: str, lr: float) -> RunConfig:
    config = load_config("calc", [f"credit.estimator={estimator}", f"optim.lr={lr}", "optim.warmup_steps=0"])
    return dataclasses.replace(config, sampling=dataclasses.replace(config.sampling, temperature=TEMPERATURE))


def play_batch(engine: CachedEngine) -> list[Episode]:
    """GROUPS x MEMBERS two-turn episodes sampled by the engine (seeded); members 0 and 1 of each group are
    rewarded. Every member is in state "mid" after its first turn, so GiGPO has a step-level anchor."""
    tokenizer = engine.tokenizer
    observation = tuple(tokenizer.encode(OBSERVATION, add_special_tokens=False))
    episodes = []
    for group, text in enumerate(PROMPTS):
        first = tuple(tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False))
        for member in range(MEMBERS):
            turns, context = [], list(first)
            for index, prompt in enumerate((first, observation)):
                if index:
                    context += prompt
                params = SamplingParams(
                    temperature=TEMPERATURE, max_new_tokens=6, stop=(), seed=100 * group + 10 * member + index
                )
                completion = engine.generate_batch([context], params)[0]
                context += completion.token_ids
                last = index == 1
                reward = float(member < 2) if last else 0.0
                turns.append(
                    Turn(
                        index=index, prompt_ids=prompt, completion_ids=completion.token_ids,
                        completion_logprobs=completion.logprobs, text=completion.text,
                        action=Action(text="t"), observation="ok", reward=reward, invalid=False,
                        state_key="end" if last else "mid", terminated=last,
                    )
                )  # fmt: skip
            episodes.append(
                Episode(
                    episode_id=f"g{group}m{member}", env_id="test", task_id=f"t{group}",
                    group_id=f"g{group}", seed=group, turns=tuple(turns), stop_reason="terminated",
                    initial_state_key=f"start{group}", success=member < 2,
                )
            )  # fmt: skip
    return episodes


def turn_logprobs(engine: CachedEngine, episodes: list[Episode]) -> list[float]:
    """The engine's summed log-probability of each turn's completion, given everything before it."""
    contexts, completions = [], []
    for episode in episodes:
        context: list[int] = []
        for turn in episode.turns:
            context += turn.prompt_ids
            contexts.append(list(context))
            completions.append(list(turn.completion_ids))
            context += turn.completion_ids
    rows = kernels.teacher_forced_logprobs(engine.scheduler.weights, contexts, completions, TEMPERATURE)
    return [sum(row) for row in rows]


def flip_sign(samples: list[TrainSample]) -> list[TrainSample]:
    return [dataclasses.replace(s, advantages=-s.advantages) for s in samples]


def mask_the_prompt(samples: list[TrainSample]) -> list[TrainSample]:
    return [dataclasses.replace(s, loss_mask=1.0 - s.loss_mask) for s in samples]


def update_and_measure(
    estimator: str, fault: Fault = None, lr: float = 3e-3, stale: bool = False
) -> tuple[list[float], list[float]]:
    """(per-turn advantage, per-turn change of the engine's log-probability) after one update."""
    tokenizer = byte_tokenizer()
    model = tiny_llama(seed=0)
    engine = CachedEngine(model, tokenizer, CachedEngineConfig(precision="bfloat16", rounding="dither"))
    config = run_config(estimator, lr)
    torch.manual_seed(0)
    episodes = play_batch(engine)
    before = turn_logprobs(engine, episodes)
    advantages, _ = compute_advantages(episodes, config)
    samples = training_samples(episodes, advantages, config.rollout.max_context_tokens)
    samples = fault(samples) if fault is not None else samples
    trained = copy.deepcopy(model) if stale else model  # stale: the update lands in a copy never published
    learner = make_learner(config, SINGLE_PROCESS, trained, int(tokenizer.pad_token_id))
    learner.update(samples)
    if not stale:
        publish_weights(engine, learner)
    after = turn_logprobs(engine, episodes)
    flat = [value for episode in advantages for value in episode]
    return flat, [b - a for a, b in zip(before, after, strict=True)]


def moves_with_credit(advantages: list[float], deltas: list[float]) -> bool:
    """Every turn with a nonzero advantage moved in its advantage's direction."""
    signed = [(a, d) for a, d in zip(advantages, deltas, strict=True) if abs(a) > 1e-9]
    return bool(signed) and all(a * d > 0 for a, d in signed)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_one_update_moves_the_samplers_log_probs_the_way_credit_says(estimator: str) -> None:
    advantages, deltas = update_and_measure(estimator)
    assert any(a > 0 for a in advantages) and any(a < 0 for a in advantages)
    assert moves_with_credit(advantages, deltas), list(zip(advantages, deltas, strict=True))


@pytest.mark.parametrize(
    ("fault", "lr", "stale"),
    [(flip_sign, 3e-3, False), (mask_the_prompt, 3e-3, False), (None, 3e-3, True), (None, 0.0, False)],
    ids=["flipped sign", "loss mask on the prompt", "stale engine weights", "zero learning rate"],
)
def test_the_check_fails_on_a_broken_pipeline(fault: Fault, lr: float, stale: bool) -> None:
    advantages, deltas = update_and_measure("grpo", fault, lr=lr, stale=stale)
    assert not moves_with_credit(advantages, deltas)
