"""The floor under a training step's memory: what one process holds before any rollout or activation.

    .venv/bin/python bench/memory_floor.py      # -> bench/results/memory_floor.json

What this is: one process, under the allocator `agentrl train` picks (`agentrl.memory.choose_allocator`),
reading its own resident size (`agentrl.trainer.peak_memory.resident_mb`) after each thing a calc-chain
training step keeps for its whole life: Python with torch; the trainer's imports (transformers, the engine,
the env client); SmolLM2-135M in fp32 (`agentrl.models.load_model`, the config of configs/calc-chain.yaml);
its gradients; AdamW's two moments after one optimiser step, in fp32 and, in a second process, in bf16
(`optim.state_dtype`); and the engine's bf16 compute copy of the weights. Each row is the growth over the row
before and the total. The same-run baseline is the first row (Python and torch alone). The training state the
issue names (weights, gradients and two fp32 moments: 16 bytes a parameter) is beside it, so the share of a
step's peak (bench/memory.py) that no knob of docs/memory.md can touch is plain.

What this is not: a measure of a whole step (bench/memory.py), or of activations and the KV cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parents[1]


def measure(state_dtype: str) -> dict[str, Any]:
    """The rows, in this process (which must be fresh)."""
    from agentrl.memory import choose_allocator
    from agentrl.trainer.peak_memory import resident_mb

    allocator = choose_allocator(reexec=False)
    import torch

    rows = [("python and torch", resident_mb())]
    import agentrl.agent.engines.cached  # noqa: F401  the engine
    import agentrl.client  # noqa: F401  the env service's client
    import agentrl.trainer.train  # noqa: F401  the trainer and transformers
    from agentrl.config import load_config
    from agentrl.models import load_model
    from agentrl.trainer.optim import make_optimizer

    rows.append(("the trainer's imports", resident_mb()))
    config = load_config("calc-chain", [f"optim.state_dtype={state_dtype}"])
    model, _ = load_model(config.model)
    rows.append(("the model in fp32", resident_mb()))
    parameters = [p for p in model.parameters() if p.requires_grad]
    for parameter in parameters:
        parameter.grad = torch.zeros_like(parameter)
    rows.append(("its gradients", resident_mb()))
    optimizer, _ = make_optimizer(model, config.optim)
    optimizer.step()
    rows.append((f"AdamW's moments ({state_dtype})", resident_mb()))
    copy = {name: tensor.detach().to(torch.bfloat16) for name, tensor in model.state_dict().items()}
    rows.append(("the engine's bf16 copy", resident_mb()))
    count = sum(p.numel() for p in model.parameters())
    del copy
    return {
        "allocator": allocator,
        "parameters": count,
        "training_state_mb": round(count * 16 / 1024 / 1024, 1),
        "rows": [
            {
                "after": name,
                "rss_mb": round(total, 1),
                "growth_mb": round(total - (rows[i - 1][1] if i else 0), 1),
            }
            for i, (name, total) in enumerate(rows)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=["float32", "bfloat16"], help=argparse.SUPPRESS)
    harness.add_out_argument(parser, "memory_floor")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child)))
        return 0
    from agentrl.memory import child_environment

    figures: dict[str, Any] = {}
    for dtype in ("float32", "bfloat16"):
        child = subprocess.run(
            [sys.executable, __file__, "--child", dtype],
            cwd=ROOT, env=child_environment(os.environ), capture_output=True, text=True, check=True,
        )  # fmt: skip
        figures[dtype] = json.loads(child.stdout.strip().splitlines()[-1])
    out = harness.out_path(args, "memory_floor")
    harness.emit("memory_floor", figures, baseline="Python and torch alone, same process", out=out, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
