"""The trainer's update under each memory allocator of agentrl/memory.py; prints ONE JSON object and writes
it to bench/results/allocator.json (`--out`; a `--quick` run prints only unless given `--out`).

    .venv/bin/python bench/allocator.py            # 4 episodes x 700 tokens, micro batch 1, 3 timed updates
    .venv/bin/python bench/allocator.py --quick    # 2 x 400 tokens, 2 timed updates

Each allocator runs in its own process (`AGENTRL_ALLOCATOR` = system, glibc, tcmalloc), one after the other,
so each starts cold and its peak memory is its own. A process loads SmolLM2-135M and runs `ppo_update`
(forward, log-probs, PPO loss, backward, AdamW) in a worker thread, as `agentrl train` does, over synthetic
samples the size of a calc step's, first with the default loss, then with an entropy bonus. Keys per
allocator: `update_s` and `update_entropy_s` (each timed update, after one warm-up: `harness.timed` in one
worker thread), `user_s` and `sys_s` (the process's CPU seconds in user code and in the kernel: page faults
and zeroing show up in `sys_s`), `max_rss_mb` (peak resident size). Top level: `speedup_vs_glibc` and
`speedup_vs_system` (the best update of tcmalloc against each; `entropy_...` the same with the bonus),
and the load average before and after.

What this is not: a test, or a measure of an allocator's effect on rollouts (bench/engine.py measures those).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
from functools import partial
from typing import Any

import harness

ALLOCATORS = ("system", "glibc", "tcmalloc")
ENTROPY_COEF = 0.001  # a bonus: the entropies' gradient is computed too


def child(batch: int, seq_len: int, repeats: int) -> dict[str, Any]:
    """In the child process: the allocator in use and the timed updates."""
    from agentrl.memory import choose_allocator

    allocator = choose_allocator()  # may re-execute this process under tcmalloc
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from trainer import synthetic_samples

    from agentrl.model_config import ModelConfig
    from agentrl.models import load_model
    from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
    from agentrl.trainer.optim import make_optimizer
    from agentrl.trainer.update import ppo_update

    model, _ = load_model(ModelConfig(name="smollm2-135m-instruct"))
    samples = synthetic_samples(batch, seq_len, model.config.vocab_size)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-7))
    update = UpdateConfig(micro_batch_size=1, autocast_bf16=True)

    async def updates(loss: LossConfig) -> list[float]:
        work = partial(ppo_update, model, optimizer, scheduler, samples, 0, loss, update)
        timing = await asyncio.to_thread(harness.timed, work, warmup=1, rounds=repeats)
        return [round(seconds, 3) for seconds in timing["rounds_s"]]

    seconds = asyncio.run(updates(LossConfig()))
    entropy_seconds = asyncio.run(updates(LossConfig(entropy_coef=ENTROPY_COEF)))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "allocator": allocator,
        "update_s": seconds,
        "update_entropy_s": entropy_seconds,
        "user_s": round(usage.ru_utime, 1),
        "sys_s": round(usage.ru_stime, 1),
        "max_rss_mb": round(usage.ru_maxrss / 1024),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 x 400 tokens, 2 timed updates")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    harness.add_out_argument(parser, "allocator")
    options = parser.parse_args()
    batch, seq_len, repeats = (2, 400, 2) if options.quick else (4, 700, 3)
    if options.child:
        print(json.dumps(child(batch, seq_len, repeats)))
        return 0
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for name in ALLOCATORS:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            *(["--quick"] if options.quick else []),
        ]
        env = {**os.environ, "AGENTRL_ALLOCATOR": name}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    best = {name: min(result["update_s"]) for name, result in results.items()}
    best_entropy = {name: min(result["update_entropy_s"]) for name, result in results.items()}
    figures = {
        "batch": batch,
        "seq_len": seq_len,
        **results,
        "speedup_vs_glibc": round(harness.ratio(best["glibc"], best["tcmalloc"]), 3),
        "speedup_vs_system": round(harness.ratio(best["system"], best["tcmalloc"]), 3),
        "entropy_speedup_vs_glibc": round(harness.ratio(best_entropy["glibc"], best_entropy["tcmalloc"]), 3),
        "entropy_speedup_vs_system": round(
            harness.ratio(best_entropy["system"], best_entropy["tcmalloc"]), 3
        ),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }
    baseline = "the same updates under glibc and the system allocator, each in its own process of this run"
    harness.emit("allocator", figures, baseline=baseline, out=harness.out_path(options, "allocator"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
