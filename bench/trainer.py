"""Benchmark of the trainer's compute on SmolLM2-135M; prints ONE JSON object.

    .venv/bin/python bench/trainer.py                       # 4 x 1024-token sequences, 3 timed updates
    .venv/bin/python bench/trainer.py --quick               # 2 x 512 tokens, 2 timed updates (~1 min)
    .venv/bin/python bench/trainer.py --rl-step RUN_DIR     # also the time split of a run's RL steps

Keys:
- `matmul_gflops`: the best of `torch.matmul` on square matrices (2048, in the update's precision: bf16
  under autocast, else fp32), measured in this run — the machine's practical peak for this work;
- `train_tokens_per_s`: tokens per second of a full training micro step (forward, per-token log-probs,
  PPO loss, backward) on `batch` x `seq_len` tokens, through `agentrl.trainer.update.policy_update`, the
  function the trainer runs (optimizer step included);
- `train_gflops`: the model FLOPs that represents — 6 x non-embedding parameters x tokens (the usual
  dense-transformer count; the tied output projection is counted once as a matmul) plus the attention
  score/value matmuls 12 x layers x hidden x seq_len per token;
- `mfu_ratio` = `train_gflops` / `matmul_gflops`;
- `precision`: "bf16-autocast" or "fp32" (`--fp32` forces fp32);
- with `--rl-step RUN_DIR`: `rl_step_split` — the mean seconds per training step of that run's
  `metrics.jsonl` for rollout, credit and update, and sync (0 for the hf engine: it shares the module
  the optimiser updates, so there is nothing to copy), plus each as a fraction of their sum.

What this is not: a test (tests/integration/test_trainer_bench.py runs --quick and checks the keys) or
the engine benchmark (bench/engine.py measures sampling).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.models import ModelConfig, load_model
from agentrl.trainer.losses import LossConfig
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import OptimConfig, UpdateConfig, make_optimizer, policy_update


def matmul_gflops(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """Best GFLOP/s of one [size, size] x [size, size] matmul in `dtype`."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.matmul(a, b)  # warm-up (oneDNN picks its kernel)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def synthetic_samples(batch: int, seq_len: int, vocab: int, prompt: int = 64) -> list[TrainSample]:
    """`batch` sequences of `seq_len` random tokens, all but the first `prompt` sampled (mask 1)."""
    generator = torch.Generator().manual_seed(0)
    mask = torch.cat([torch.zeros(prompt), torch.ones(seq_len - prompt)])
    return [
        TrainSample(
            input_ids=torch.randint(0, vocab, (seq_len,), generator=generator),
            loss_mask=mask,
            old_logprobs=-2.0 * mask,
            advantages=(1.0 if index % 2 else -1.0) * mask,
            turn_id=torch.zeros(seq_len, dtype=torch.long),
        )
        for index in range(batch)
    ]


def model_flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    """Training FLOPs per token: 6 x matmul parameters + 12 x layers x hidden x seq_len (attention)."""
    config = model.config
    # every parameter is a matmul weight except the norms; a tied embedding is counted once, as the output
    # projection (the input lookup is not a matmul)
    params = sum(p.numel() for p in model.parameters())
    norms = sum(p.numel() for name, p in model.named_parameters() if "norm" in name)
    return 6.0 * (params - norms) + 12.0 * config.num_hidden_layers * config.hidden_size * seq_len


def time_updates(model: torch.nn.Module, samples: list[TrainSample], bf16: bool, repeats: int) -> float:
    """Best seconds of one `policy_update` over `samples` (one micro batch, one optimiser step)."""
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-7))
    update = UpdateConfig(micro_batch_size=len(samples), autocast_bf16=bf16)
    pad = int(model.config.eos_token_id or 0)
    policy_update(model, optimizer, scheduler, samples, pad, LossConfig(), update)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        policy_update(model, optimizer, scheduler, samples, pad, LossConfig(), update)
        best = min(best, time.perf_counter() - started)
    return best


def rl_step_split(run_dir: Path) -> dict[str, Any]:
    """Mean seconds per training step of a run's rollout / credit / update / sync, and their fractions."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps = [row for row in rows if "rollout_s" in row]
    if not steps:
        raise SystemExit(f"{run_dir}/metrics.jsonl has no training steps (no rollout_s)")
    split = {
        phase: sum(float(row.get(f"{phase}_s", 0.0)) for row in steps) / len(steps)
        for phase in ("rollout", "credit", "update", "sync")
    }
    total = sum(split.values()) or 1.0
    return {
        "steps": len(steps),
        **{f"{phase}_s": round(value, 3) for phase, value in split.items()},
        **{f"{phase}_fraction": round(value / total, 4) for phase, value in split.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 x 512 tokens, 2 timed updates")
    parser.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16 autocast")
    parser.add_argument("--rl-step", type=Path, metavar="RUN_DIR", help="a run folder with metrics.jsonl")
    args = parser.parse_args(argv)
    batch, seq_len, repeats = (2, 512, 2) if args.quick else (4, 1024, 3)
    bf16 = not args.fp32 and torch.backends.mkldnn.is_available()
    result: dict[str, Any] = {"mode": "quick" if args.quick else "full", "load_avg_1m": os.getloadavg()[0]}
    result["precision"] = "bf16-autocast" if bf16 else "fp32"
    result["matmul_gflops"] = round(matmul_gflops(torch.bfloat16 if bf16 else torch.float32), 1)
    model, _ = load_model(ModelConfig())
    samples = synthetic_samples(batch, seq_len, int(model.config.vocab_size))
    with contextlib.redirect_stdout(sys.stderr):
        seconds = time_updates(model, samples, bf16, repeats)
    tokens = batch * seq_len
    result.update(batch=batch, seq_len=seq_len, update_s=round(seconds, 3))
    result["train_tokens_per_s"] = round(tokens / seconds, 1)
    result["train_gflops"] = round(model_flops_per_token(model, seq_len) * tokens / seconds / 1e9, 1)
    result["mfu_ratio"] = round(result["train_gflops"] / result["matmul_gflops"], 3)
    if args.rl_step is not None:
        result["rl_step_split"] = rl_step_split(args.rl_step)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
