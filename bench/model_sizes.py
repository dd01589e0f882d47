"""Bigger shapes on this machine: GRPO steps of a random SmolLM2-360M (full fine-tuning) and of a random
1.7B-shaped Llama (LoRA) on calc-chain, through `agentrl train`, with their peak memory.

    .venv/bin/python bench/model_sizes.py            # bench/results/model_sizes.json (about 15 minutes)
    .venv/bin/python bench/model_sizes.py --quick    # the 135M row only: a smoke run

What this is: for each row of `ROWS`, two `agentrl train --task calc-chain` steps in a child process
(`memory.one_step`: the second step's per-phase peaks from metrics.jsonl, its `update_s`, and its whole-run
resident peak) with `model.random_shape` (agentrl/model_shapes.py: the published configs, random weights,
seed 0), beside the parameter count, the training state (`model_shapes.training_bytes`) and the fit check's
estimate (`check_fits`: the state times `ACTIVATION_MARGIN`), so the estimate can be read against the
measurement. The same-run baseline is the pretrained 135M's step under the same overrides, which turn on the
fused head and activation checkpointing (`MEMORY_KNOBS`: what a bigger model on this machine runs with).
Episodes are kept short (one task, two episodes, two turns of at most 64 new tokens): a random model writes
no answer, so this measures memory and seconds of a step, not learning. A small entropy bonus
(`loss.entropy_coef`) makes every episode a training sample: a random model's group scores all 0, which has
no PPO signal and would be left out, with no update at all.

What this is not: a learning test, or a GPU measurement (`make test-gpu` has the GPU's rows).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness
from memory import one_step

SHORT = [
    "train.tasks_per_step=1",
    "train.group_size=2",
    "rollout.max_turns=2",
    "sampling.max_new_tokens=64",
    "update.micro_batch_size=2",
    "loss.entropy_coef=0.001",  # every episode trained: a random model's groups all score 0 (no PPO signal)
]
MEMORY_KNOBS = ["update.fused_head=true", "update.activation_checkpointing=true"]
ROWS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {"shape": "smollm2-135m", "lora_rank": 0, "overrides": []},
    "smollm2-360m full": {
        "shape": "smollm2-360m",
        "lora_rank": 0,
        "overrides": ["model.random_shape=smollm2-360m"],
    },
    "smollm2-1.7b lora": {
        "shape": "smollm2-1.7b",
        "lora_rank": 16,
        "overrides": ["model.random_shape=smollm2-1.7b", "model.lora.rank=16"],
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 135M row only")
    harness.add_out_argument(parser, "model_sizes")
    args = parser.parse_args(argv)
    from agentrl.model_shapes import ACTIVATION_MARGIN, SHAPES, parameters, training_bytes

    mib = 1024 * 1024
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-sizes-") as scratch:
        for name, row in ROWS.items():
            if args.quick and name != "smollm2-135m":
                continue
            shape = SHAPES[row["shape"]]
            state = training_bytes(shape, "float32", row["lora_rank"])
            overrides = [*SHORT, *MEMORY_KNOBS, *row["overrides"]]
            measured = one_step("calc-chain", overrides, Path(scratch))
            rows[name] = {
                "parameters": parameters(shape),
                "lora_rank": row["lora_rank"],
                "training_state_mb": round(state / mib, 1),
                "estimate_mb": round(state * ACTIVATION_MARGIN / mib, 1),
                **measured,
                "step_over_training_state": round(measured["step_peak_mb"] / (state / mib), 2),
            }
            print({name: rows[name]}, file=sys.stderr, flush=True)
    base = rows["smollm2-135m"]
    for row in rows.values():
        row["update_s_ratio_to_135m"] = round(harness.ratio(row["update_s"], base["update_s"]), 2)
    figures = {"quick": args.quick, "rows": rows, "load_avg_1m": round(os.getloadavg()[0], 2)}
    out = harness.out_path(args, "model_sizes")
    harness.emit("model_sizes", figures, baseline="the pretrained 135M's step, same run", out=out, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
