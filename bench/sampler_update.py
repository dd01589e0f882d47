"""Does the sampler see an update? `sampler_update_ratio` per engine weight copy, and its cost (JSON).

    .venv/bin/python bench/sampler_update.py            # 16 held-out calc turns, one update at calc's lr
    .venv/bin/python bench/sampler_update.py --quick    # 4 turns of 24 tokens, printed only unless --out

The trainer updates fp32 weights; the cached engine samples from a compute copy rebuilt after each update:
fp32, or bf16 by round-to-nearest ("nearest") or by stochastic rounding against fixed per-weight
thresholds ("dither", `llama_kernels.round_bf16`). This measures, for one real PPO update (`ppo_update`, the
run config's loss, optimiser and lr) on a fixed batch of held-out calc turns (first prompts rendered as the
runner renders them, completions sampled by the base model at the training temperature, advantages +1 and
-1 alternately), the change of every completion token's log-probability:
    under the trainer (the HF module, fp32: the change the update made), d_trainer
    under each engine copy (the cached engine's own forward over its copy), d_engine
and reports per copy
    sampler_update_ratio = mean |d_engine| / mean |d_trainer|        (the issue's definition; target >= 0.9)
    projection = <d_engine, d_trainer> / <d_trainer, d_trainer>   (1: the engine moved as the trainer did)
    correlation of d_engine with d_trainer
and the copy's sampling speed, `engine_tokens_per_s` (the same prompts, the same sampled lengths, back to
back, after a warm-up), with the CPU flags it ran on. Written to bench/results/sampler_update.json (`--out`;
'-': print only).

What this is not: a learning curve; `tests/integration/test_learning_direction.py` checks the direction of
an update end to end.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import harness
import torch

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.engines.cached import CachedEngine
from agentrl.agent.engines.configs import CachedEngineConfig
from agentrl.agent.prompting import render_first_prompt
from agentrl.config import load_config
from agentrl.cpu import native_cpu_bf16, speed_flags
from agentrl.memory import choose_allocator
from agentrl.models import load_model
from agentrl.tasks import load_tasks
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import ppo_update

COPIES: dict[str, tuple[torch.dtype, str]] = {
    "bf16_nearest": (torch.bfloat16, "nearest"),
    "bf16_dither": (torch.bfloat16, "dither"),
    "fp32": (torch.float32, "nearest"),
}


def held_out_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    from agentrl_calc.env import CalcEnv, question_observation

    tasks = load_tasks("tasks", "calc", "heldout")[:count]
    return [
        render_first_prompt(
            tokenizer, CalcEnv.tools, CalcEnv.examples, question_observation(str(t["question"]))
        )
        for t in tasks
    ]


def engine_logprobs(
    weights: kernels.LlamaWeights, prompts: list[list[int]], completions: list[list[int]], temperature: float
) -> torch.Tensor:
    """[N] log-probs of every completion token (rows in order) under the engine's own forward."""
    rows = kernels.teacher_forced_logprobs(weights, prompts, completions, temperature)
    return torch.tensor([value for row in rows for value in row], dtype=torch.float64)


def trainer_logprobs(
    model: Any, prompts: list[list[int]], completions: list[list[int]], temperature: float
) -> torch.Tensor:
    """[N] the same tokens' log-probs under the HF module in fp32 (what the update changed)."""
    values: list[float] = []
    with torch.inference_mode():
        for prompt, completion in zip(prompts, completions, strict=True):
            ids = torch.tensor([prompt + completion])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            values += logprobs[torch.arange(len(completion)), torch.tensor(completion)].tolist()
    return torch.tensor(values, dtype=torch.float64)


def sample_of(
    prompt: list[int], completion: list[int], logprobs: list[float], advantage: float
) -> TrainSample:
    sampled = [0.0] * len(prompt) + [1.0] * len(completion)
    return TrainSample(
        input_ids=torch.tensor(prompt + completion),
        loss_mask=torch.tensor(sampled),
        old_logprobs=torch.tensor([0.0] * len(prompt) + logprobs),
        advantages=torch.tensor([advantage * s for s in sampled]),
    )


def compare(engine_delta: torch.Tensor, trainer_delta: torch.Tensor) -> dict[str, float]:
    centred_e, centred_t = engine_delta - engine_delta.mean(), trainer_delta - trainer_delta.mean()
    correlation = float((centred_e @ centred_t) / (centred_e.norm() * centred_t.norm() + 1e-30))
    return {
        "sampler_update_ratio": float(engine_delta.abs().mean() / trainer_delta.abs().mean()),
        "projection": float((engine_delta @ trainer_delta) / (trainer_delta @ trainer_delta)),
        "correlation": correlation,
    }


def tokens_per_s(
    model: Any, tokenizer: Any, dtype: str, rounding: str, prompts: list[list[int]], params: SamplingParams
) -> float:
    config = CachedEngineConfig(precision=dtype, rounding=rounding)  # type: ignore[arg-type]
    engine = CachedEngine(model, tokenizer, config)
    engine.generate_batch(prompts[:2], params)  # warm-up: builds the copy and the kernels' caches
    started = time.perf_counter()
    completions = engine.generate_batch(prompts, params)
    return sum(len(c.token_ids) for c in completions) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="4 turns, 24 tokens each")
    harness.add_out_argument(parser, "sampler_update")
    args = parser.parse_args(argv)
    choose_allocator(reexec=argv is None)
    torch.manual_seed(0)
    config = load_config("calc")
    turns, new_tokens = (4, 24) if args.quick else (args.turns, 48)
    temperature = config.sampling.temperature
    model, tokenizer = load_model(config.model)
    prompts = held_out_prompts(tokenizer, turns)
    params = SamplingParams(temperature=temperature, max_new_tokens=new_tokens, stop=(), seed=0)
    sampler = CachedEngine(model, tokenizer, CachedEngineConfig(precision="float32"))
    sampled = [sampler.generate_batch([p], params)[0] for p in prompts]  # seeded: one at a time
    completions = [list(c.token_ids) for c in sampled]
    before_weights = {
        name: kernels.LlamaWeights.from_model(model, d, pack=False, rounding=r)
        for name, (d, r) in COPIES.items()
    }
    before = {
        name: engine_logprobs(w, prompts, completions, temperature) for name, w in before_weights.items()
    }
    del before_weights
    trainer_before = trainer_logprobs(model, prompts, completions, temperature)
    samples = [
        sample_of(p, c.copy(), list(s.logprobs), 1.0 if i % 2 == 0 else -1.0)
        for i, (p, c, s) in enumerate(zip(prompts, completions, sampled, strict=True))
    ]
    optimizer, scheduler = make_optimizer(model, config.optim)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    update = ppo_update(
        model,
        optimizer,
        scheduler,
        samples,
        pad,
        config.loss,
        config.update,
        optim_cfg=config.optim,
        temperature=temperature,
    )
    trainer_delta = trainer_logprobs(model, prompts, completions, temperature) - trainer_before
    copies: dict[str, dict[str, float]] = {}
    for name, (dtype, rounding) in COPIES.items():
        after = engine_logprobs(
            kernels.LlamaWeights.from_model(model, dtype, pack=False, rounding=rounding),
            prompts,
            completions,
            temperature,
        )
        copies[name] = compare(after - before[name], trainer_delta)
    for name, (dtype, rounding) in COPIES.items():
        precision = "bfloat16" if dtype == torch.bfloat16 else "float32"
        copies[name]["engine_tokens_per_s"] = tokens_per_s(
            model, tokenizer, precision, rounding, prompts, params
        )
    fp32_speed = copies["fp32"]["engine_tokens_per_s"]
    for stats in copies.values():
        stats["speed_vs_fp32"] = stats["engine_tokens_per_s"] / fp32_speed
    result = {
        "lr": config.optim.lr,
        "turns": turns,
        "completion_tokens": int(trainer_delta.numel()),
        "trainer_mean_abs_delta_logprob": float(trainer_delta.abs().mean()),
        "update_loss": update.get("loss"),
        "copies": copies,
        "cpu_flags": speed_flags(),
        "native_cpu_bf16": native_cpu_bf16(),
        "threads": torch.get_num_threads(),
        "command": "bench/sampler_update.py" + (" --quick" if args.quick else f" --turns {turns}"),
    }
    baseline = "the trainer's own fp32 log-prob change (ratios) and the fp32 engine copy (speed), same run"
    harness.emit(
        "sampler_update", result, baseline=baseline, out=harness.out_path(args, "sampler_update"), argv=argv
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
