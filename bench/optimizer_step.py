"""Seconds of one optimiser step of SmolLM2-135M: torch's AdamW against AdamW with bf16 moments.

    .venv/bin/python bench/optimizer_step.py      # -> bench/results/optimizer_step.json

What this is: the model of configs/calc-chain.yaml loaded in fp32, every parameter given a random gradient,
then `optimizer.step()` timed (`harness.timed`: a warm-up step, which also creates the moments, then timed
steps) for each optimiser `optim.make_optimizer` builds: torch's AdamW with fp32 moments (the default; the
same-run baseline), `BF16StateAdamW` (`optim.state_dtype=bfloat16`, agentrl/trainer/bf16_adamw.py), and
the same with its stochastic rounding as it was first written (the noisy bits truncated as fp32, then
`torch.where` over `torch.isfinite` for inf and nan, then a conversion to bf16: the same bits, in more
passes), so the cost of the rounding is plain. Threads as torch sets them.

What this is not: a measure of learning (bf16 moments are not a default: docs/memory.md), or of a whole
update (bench/memory.py gives the update's seconds per setting).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import harness
import torch

from agentrl.trainer import bf16_adamw


def first_rounding(out: torch.Tensor, values: torch.Tensor, generator: torch.Generator | None) -> None:
    """The stochastic rounding as first written: the same bits as `bf16_adamw.stochastic_bf16_into`."""
    noise = torch.randint(
        0, 1 << 16, values.shape, dtype=torch.int32, device=values.device, generator=generator
    )
    rounded = ((values.view(torch.int32) + noise) & -65536).view(torch.float32)
    out.copy_(torch.where(torch.isfinite(values), rounded, values).to(torch.bfloat16))


@contextmanager
def rounding(replacement: Any) -> Iterator[None]:
    """`bf16_adamw`'s rounding replaced by `replacement` inside the block (None: left as it is)."""
    kept = bf16_adamw.stochastic_bf16_into
    if replacement is not None:
        bf16_adamw.stochastic_bf16_into = replacement
    try:
        yield
    finally:
        bf16_adamw.stochastic_bf16_into = kept


def step_seconds(state_dtype: str, replacement: Any, rounds: int) -> dict[str, Any]:
    """One optimiser's step timed on a fresh model with random gradients."""
    from agentrl.config import load_config
    from agentrl.models import load_model
    from agentrl.trainer.optim import make_optimizer

    config = load_config("calc-chain", [f"optim.state_dtype={state_dtype}"])
    model, _ = load_model(config.model)
    generator = torch.Generator().manual_seed(0)
    for parameter in model.parameters():
        parameter.grad = torch.randn(parameter.shape, generator=generator) * 1e-3
    optimizer, _ = make_optimizer(model, config.optim)
    with rounding(replacement):
        timing = harness.timed(optimizer.step, warmup=1, rounds=rounds)
    return {
        "optimizer": type(optimizer).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        **timing,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    harness.add_out_argument(parser, "optimizer_step")
    args = parser.parse_args(argv)
    from agentrl.memory import choose_allocator

    allocator = choose_allocator(reexec=False)
    rows = {
        "adamw_fp32_moments": step_seconds("float32", None, args.rounds),
        "bf16_moments": step_seconds("bfloat16", None, args.rounds),
        "bf16_moments_first_rounding": step_seconds("bfloat16", first_rounding, args.rounds),
    }
    baseline = rows["adamw_fp32_moments"]["median_s"]
    for row in rows.values():
        row["seconds_over_fp32"] = round(row["median_s"] / baseline, 2)  # > 1: slower than the baseline
    figures = {"allocator": allocator, "threads": torch.get_num_threads(), "rows": rows}
    out = harness.out_path(args, "optimizer_step")
    harness.emit(
        "optimizer_step", figures, baseline="torch's AdamW with fp32 moments, same run", out=out, argv=argv
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
