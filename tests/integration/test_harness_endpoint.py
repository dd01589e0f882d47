"""A harness over the plain `openai` client, with tool calls, against the endpoint backed by a real engine and
a real env service (in-process, the GuessNumber test env), played by `collect_rollouts` through
`rollout.harness.target` as the trainer plays it: every call recorded token-in/token-out (the engine's own
prompts, its sampled ids, log-probs that match a forward pass), a history rewrite recorded as a new segment,
the episodes stored, and one PPO update of the trainer on their samples.

The tiny random Llama (byte tokenizer) runs in seconds; the same test on SmolLM2-135M-Instruct through the
cached engine is marked slow. The last test trains one step of mini-swe-agent on SWE-bench-local in Docker
with `agentrl train` (slow).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fixtures_envs import GUESS_NUMBER_ID
from openai import OpenAI
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.rollout import collect_rollouts
from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig
from agentrl.client import EnvClient
from agentrl.config import RunConfig
from agentrl.harness.runner import HarnessContext, choose_player
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.service import ServiceSettings, create_app
from agentrl.store.repository import create_run, list_runs, load_episodes, open_store, record_episodes
from agentrl.trainer.parallel import SINGLE_PROCESS
from agentrl.trainer.run import pad_id
from agentrl.trainer.step import compute_advantages, make_learner, training_samples
from agentrl.types import Episode

TARGET = 7
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12)
_MEMBERS = itertools.count()


MAX_TURNS = 2  # the mini-swe-agent run's turn cap (rollout.max_turns)


def guessing_harness(ctx: HarnessContext) -> None:
    """A hand-written agent over the plain `openai` client. Each turn the model is asked (with the env's
    tools); its guess tool call is played when it made one, else the harness guesses for it (3, 5, then the
    target for every other episode it plays, 9 for the rest, so a group's rewards differ). After the first
    answer it rewrites its history into one summary message (a new token segment); later answers go back
    as tool messages (or user messages when the model called no tool)."""
    winner = next(_MEMBERS) % 2 == 0
    client = OpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0)
    system = {"role": "system", "content": "Find the hidden number with the guess tool."}
    messages: list[dict[str, Any]] = [system, {"role": "user", "content": ctx.observation}]
    for turn, fallback in enumerate([3, 5, TARGET if winner else 9]):
        response = client.chat.completions.create(
            model=ctx.model,
            messages=messages,
            tools=ctx.tools,
            logprobs=True,  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        calls = [c for c in message.tool_calls or [] if c.function.name == "guess"]  # type: ignore[union-attr]
        proposed = json.loads(calls[0].function.arguments).get("number") if calls else None  # type: ignore[union-attr]
        number = proposed if isinstance(proposed, int) and turn < 2 else fallback
        result = ctx.call_tool("guess", {"number": number})
        if result.terminated or result.truncated:
            return
        if calls:
            messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": result.observation})
        else:
            messages.append({"role": "user", "content": f"{number} was {result.observation}."})
        if turn == 0:
            summary = f"{ctx.observation} Your first guess, {number}, was {result.observation}."
            messages = [system, {"role": "user", "content": summary}]


class SpyEngine:
    """The engine, with every prompt it was fed and every completion it returned kept."""

    def __init__(self, engine: CachedEngine) -> None:
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.prompts: list[tuple[int, ...]] = []
        self.completions: list[Completion] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        completion = await self.engine.generate(prompt_ids, params)
        self.prompts.append(tuple(prompt_ids))
        self.completions.append(completion)
        return completion


@contextlib.asynccontextmanager
async def env_service() -> AsyncIterator[EnvClient]:
    app = create_app(ServiceSettings())
    async with app.router.lifespan_context(app):
        async with EnvClient("http://service", transport=httpx.ASGITransport(app=app)) as client:
            yield client


def play_group(engine: SpyEngine) -> list[Episode]:
    rollout = RolloutConfig(
        max_turns=4,
        max_context_tokens=4096,
        harness=HarnessConfig(target="test_harness_endpoint:guessing_harness"),
    )
    tasks = [{"id": "seven", "target": TARGET}]

    async def main() -> list[Episode]:
        async with env_service() as client:
            return await collect_rollouts(
                client, engine, GUESS_NUMBER_ID, tasks, 2, SAMPLING, rollout, 0, False,
                player=choose_player(rollout),
            )  # fmt: skip

    return asyncio.run(main())


def forward_logprobs(model: PreTrainedModel, prompt: Sequence[int], completion: Completion) -> torch.Tensor:
    """[C] fp32 log-probs (temperature 1) of the completion from one forward pass over prompt + completion."""
    ids = torch.tensor([[*prompt, *completion.token_ids]])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)


def check_and_train(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    engine = SpyEngine(CachedEngine(model, tokenizer, CachedEngineConfig(precision="float32")))
    episodes = play_group(engine)

    assert [e.stop_reason for e in episodes].count("terminated") == 1, [
        (e.stop_reason, e.error) for e in episodes
    ]
    assert sorted(e.reward for e in episodes) == [0.0, 1.0]
    assert len(engine.prompts) == sum(len(e.turns) for e in episodes) == 6
    by_completion = {c.token_ids: (p, c) for p, c in zip(engine.prompts, engine.completions, strict=True)}
    for episode in episodes:
        assert [turn.segment for turn in episode.turns] == [0, 1, 1]  # the summary started segment 1
        assert [turn.info["continued"] for turn in episode.turns] == [False, False, True]
        assert episode.turns[0].state_key == "4-100" and episode.initial_state_key == "1-100"
        for segment in (0, 1):
            turns = [turn for turn in episode.turns if turn.segment == segment]
            ids = [token for turn in turns for token in (*turn.prompt_ids, *turn.completion_ids)]
            prompt, completion = by_completion[turns[-1].completion_ids]
            # the segment's tokens are exactly the engine's last prompt in it and what it sampled
            assert ids == [*prompt, *completion.token_ids]
        for turn in episode.turns:
            prompt, completion = by_completion[turn.completion_ids]
            assert turn.completion_logprobs == completion.logprobs
            expected = forward_logprobs(model, prompt, completion)
            assert torch.allclose(torch.tensor(turn.completion_logprobs), expected, atol=2e-3)

    # the store keeps the episodes (token counts, not ids)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id = create_run(store, "harness", "guess", {})
    config = RunConfig()
    advantages, _ = compute_advantages(episodes, config)
    record_episodes(store, run_id, 1, "train", episodes, advantages)
    stored = load_episodes(store, run_id)
    assert sorted(len(e["turns"]) for e in stored) == [3, 3]
    assert sum(t["prompt_tokens"] for e in stored for t in e["turns"]) == sum(
        len(t.prompt_ids) for e in episodes for t in e.turns
    )

    # one update of the trainer on the samples: one per segment, the episode's advantage on each
    samples = training_samples(episodes, advantages, config.rollout.max_context_tokens)
    assert len(samples) == 4
    before = [p.detach().clone() for p in model.parameters()]
    learner = make_learner(config, SINGLE_PROCESS, model, pad_id(tokenizer))
    metrics = learner.update(samples).metrics
    assert metrics["tokens"] > 0 and abs(metrics["sampler_abs_log_ratio"]) < 0.01
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())  # dropped: they would sit beside the rollouts


def test_openai_client_harness_on_a_tiny_engine_records_segments_and_trains(tmp_path: Path) -> None:
    check_and_train(tiny_llama(), byte_tokenizer(), tmp_path)


@pytest.mark.slow
def test_openai_client_harness_on_smollm2_records_segments_and_trains(tmp_path: Path) -> None:
    model, tokenizer = load_model(ModelConfig())
    check_and_train(model, tokenizer, tmp_path)


@pytest.mark.docker
@pytest.mark.slow
def test_mini_swe_agent_trains_one_step_on_swebench_local(tmp_path: Path) -> None:
    """`agentrl train --task swebench` with mini-swe-agent as the harness: SmolLM2 behind the endpoint, its
    commands run as the env's bash tool in the SWE-bench-local sandbox, the workspace graded on submit, the
    episodes stored with their token counts, and one update (an entropy term keeps the step's samples even
    when the group's rewards are equal, as they are for a 135M model)."""
    pytest.importorskip("minisweagent")
    repo = Path(__file__).resolve().parents[2]
    built = subprocess.run(
        ["bash", "scripts/build_swebench_images.sh"], cwd=repo, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    overrides = [
        "name=harness-mini-swe-agent",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url={store_url}",
        "train.steps=1",
        "train.tasks_per_step=1",
        "train.group_size=2",
        "eval.before=false",
        "eval.after=false",
        "sampling.max_new_tokens=48",
        f"rollout.max_turns={MAX_TURNS}",
        "rollout.max_context_tokens=4096",
        "rollout.harness.target=agentrl.harness.minisweagent:run",
        "rollout.harness.finish_tool=submit",
        "env.kwargs.max_steps=10",
        "loss.entropy_coef=0.001",
    ]
    command = [sys.executable, "-m", "agentrl.cli.main", "train", "--task", "swebench", *overrides]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=3000, env=env)
    assert result.returncode == 0, result.stderr[-3000:]

    metrics = [
        json.loads(line) for line in (tmp_path / "runs" / "harness-mini-swe-agent" / "metrics.jsonl").open()
    ]
    step = next(m for m in metrics if "reward_mean" in m)
    assert step["episodes"] == 2 and step["infra_failures"] == 0 and step["trained_episodes"] >= 2
    assert step["tokens"] > 0 and "loss" in step
    store = open_store(store_url)
    (run,) = list_runs(store)
    episodes = load_episodes(store, run["id"])
    assert len(episodes) == 2
    for episode in episodes:
        assert episode["stop_reason"] == "terminated"  # graded: mini-swe-agent's submit, or the finish tool
        assert 0 < len(episode["turns"]) <= MAX_TURNS  # at least the submit; never past the cap
        assert all(t["prompt_tokens"] > 0 and t["completion_tokens"] > 0 for t in episode["turns"])
