"""Benchmark of the trainer's compute on SmolLM2-135M; prints ONE JSON object.

    .venv/bin/python bench/trainer.py                       # 4 x 1024-token sequences, 3 timed updates
    .venv/bin/python bench/trainer.py --quick               # 2 x 512 tokens, 2 timed updates
    .venv/bin/python bench/trainer.py --fp32                # train (and measure the peak) in fp32
    .venv/bin/python bench/trainer.py --threads 1           # one intra-op thread (see mfu_ratio_cpu_time)
    .venv/bin/python bench/trainer.py --rl-step RUN_DIR     # also the time split of a run's RL steps

The JSON goes to bench/results/trainer.json too (`--out`; '-': print only; a `--quick` run prints only
unless given `--out`).

Keys:
- `allocator`: the memory allocator in use, as `agentrl` picks it (agentrl/memory.py; `AGENTRL_ALLOCATOR`);
- `precision`: what the update runs in: "bf16-autocast" where the CPU multiplies bf16 natively (the same
  test the update itself makes), else "fp32"; `--fp32` forces fp32;
- `matmul_gflops`: `torch.matmul` on [2048 x 2048] x [2048 x 2048] in that precision, the best of a few,
  measured right before the timed update it is compared with (this machine's cores are shared: both
  figures then see the same load); `matmul_gflops_by_shape`: the same peak in fp32 and bf16 at 2048^3 and
  at the model's own GEMM shapes ([tokens x 576] x [576 x 1536], the MLP; [tokens x 576] x [576 x 49152],
  the output projection), measured once at the start (`harness.timed`: one warm-up, the fastest round);
- `train_tokens_per_s`: tokens per second of one `agentrl.trainer.update.ppo_update` (the function the
  trainer runs: forward, per-token log-probs, PPO loss, backward, gradient clipping, AdamW step) over
  `batch` x `seq_len` tokens in one micro batch;
- `train_gflops`: the model FLOPs that represents: 6 x matmul parameters x tokens (the tied output
  projection counted once) plus the attention score/value matmuls, 12 x layers x hidden x seq_len per token;
- `mfu_ratio` = `train_gflops` / `matmul_gflops` of the timed update with the best ratio and the matmul
  measured just before it; `update_s` is that update's wall time; `load_avg_1m` at the start and the end;
- `mfu_ratio_cpu_time`: the same ratio with both sides timed in this process's CPU seconds. With
  `--threads 1` it does not depend on what else runs on the machine (time-slicing stretches wall time,
  not CPU time); with more threads it counts threads' spin-waits too. `timed_updates` lists every pair;
- with `--rl-step RUN_DIR`: `rl_step_split` — the mean seconds per training step of that run's
  `metrics.jsonl` for rollout, credit, update and sync (0 for the hf engine: it shares the module the
  optimiser updates), plus each as a fraction of their sum.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import torch

from agentrl.cpu import native_cpu_bf16
from agentrl.memory import choose_allocator
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import ppo_update


def matmul_gflops(
    dtype: torch.dtype, shape: tuple[int, int, int] = (2048, 2048, 2048), repeats: int = 5
) -> float:
    """Best GFLOP/s of one [m, k] x [k, n] matmul in `dtype`."""
    m, k, n = shape
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    best = harness.timed(lambda: torch.matmul(a, b), warmup=1, rounds=repeats)["min_s"]  # oneDNN warms up
    return 2 * m * k * n / best / 1e9


def matmul_by_shape(tokens: int, hidden: int, intermediate: int, vocab: int) -> dict[str, dict[str, float]]:
    """The matmul peak in fp32 and bf16 at 2048^3 and at the model's MLP and output-projection shapes."""
    shapes = {
        "2048x2048x2048": (2048, 2048, 2048),
        f"{tokens}x{hidden}x{intermediate}": (tokens, hidden, intermediate),
        f"{tokens}x{hidden}x{vocab}": (tokens, hidden, vocab),
    }
    return {
        label: {name: round(matmul_gflops(dtype, shape, repeats=3), 1) for name, shape in shapes.items()}
        for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }


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


@dataclass(frozen=True)
class Timing:
    """One timed update and the matmul peak measured just before it, in wall and process CPU seconds."""

    matmul_gflops: float
    matmul_cpu_gflops: float
    update_s: float
    update_cpu_s: float


def matmul_timed(dtype: torch.dtype, size: int = 2048, repeats: int = 3) -> tuple[float, float]:
    """(GFLOP/s by wall time, GFLOP/s by this process's CPU time) of the best square matmul."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    torch.matmul(a, b)
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        torch.matmul(a, b)
        wall, cpu = min(wall, time.perf_counter() - started), min(cpu, time.process_time() - started_cpu)
    return 2 * size**3 / wall / 1e9, 2 * size**3 / cpu / 1e9


def time_updates(
    model: torch.nn.Module, samples: list[TrainSample], bf16: bool, repeats: int
) -> list[Timing]:
    """`repeats` timed `ppo_update`s over `samples` (one micro batch, one optimiser step each), each right
    after a matmul peak measurement, following one warm-up update."""
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-7))
    update = UpdateConfig(micro_batch_size=len(samples), autocast_bf16=bf16)
    pad = int(model.config.eos_token_id or 0)
    ppo_update(model, optimizer, scheduler, samples, pad, LossConfig(), update)  # warm-up
    timings = []
    for _ in range(repeats):
        peak, peak_cpu = matmul_timed(torch.bfloat16 if bf16 else torch.float32)
        started, started_cpu = time.perf_counter(), time.process_time()
        ppo_update(model, optimizer, scheduler, samples, pad, LossConfig(), update)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        timings.append(Timing(peak, peak_cpu, seconds, cpu_seconds))
    return timings


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
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    harness.add_out_argument(parser, "trainer")
    args = parser.parse_args(argv)
    allocator = choose_allocator(reexec=argv is None)  # the allocator `agentrl` runs under
    if args.threads:
        torch.set_num_threads(args.threads)
    batch, seq_len, repeats = (2, 512, 2) if args.quick else (4, 1024, 3)
    bf16 = not args.fp32 and native_cpu_bf16()
    result: dict[str, Any] = {"mode": "quick" if args.quick else "full", "load_avg_1m": os.getloadavg()[0]}
    result["allocator"] = allocator
    result["precision"] = "bf16-autocast" if bf16 else "fp32"
    model, _ = load_model(ModelConfig())
    config = model.config
    result["matmul_gflops_by_shape"] = matmul_by_shape(
        batch * seq_len, config.hidden_size, config.intermediate_size, config.vocab_size
    )
    samples = synthetic_samples(batch, seq_len, int(config.vocab_size))
    with contextlib.redirect_stdout(sys.stderr):
        timings = time_updates(model, samples, bf16, repeats)
    tokens = batch * seq_len
    flops = model_flops_per_token(model, seq_len) * tokens
    best = max(timings, key=lambda t: flops / t.update_s / t.matmul_gflops)
    result.update(
        batch=batch, seq_len=seq_len, threads=torch.get_num_threads(), update_s=round(best.update_s, 3)
    )
    result["matmul_gflops"] = round(best.matmul_gflops, 1)
    result["train_tokens_per_s"] = round(tokens / best.update_s, 1)
    result["train_gflops"] = round(flops / best.update_s / 1e9, 1)
    result["mfu_ratio"] = round(result["train_gflops"] / result["matmul_gflops"], 3)
    best_cpu = max(timings, key=lambda t: flops / t.update_cpu_s / t.matmul_cpu_gflops)
    result["mfu_ratio_cpu_time"] = round(flops / best_cpu.update_cpu_s / 1e9 / best_cpu.matmul_cpu_gflops, 3)
    result["timed_updates"] = [
        {
            "matmul_gflops": round(t.matmul_gflops, 1),
            "update_s": round(t.update_s, 3),
            "mfu_ratio": round(flops / t.update_s / 1e9 / t.matmul_gflops, 3),
            "matmul_cpu_gflops": round(t.matmul_cpu_gflops, 1),
            "update_cpu_s": round(t.update_cpu_s, 3),
        }
        for t in timings
    ]
    result["load_avg_1m_end"] = os.getloadavg()[0]
    if args.rl_step is not None:
        result["rl_step_split"] = rl_step_split(args.rl_step)
    baseline = "the torch.matmul peak measured just before each timed update, in this run"
    harness.emit("trainer", result, baseline=baseline, out=harness.out_path(args, "trainer"), argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
