"""Where a training step's memory goes, and what each knob saves: GRPO steps of a task per setting.

    .venv/bin/python bench/memory.py --task calc-chain # plan 3b: bench/results/memory_calc-chain.json
    .venv/bin/python bench/memory.py --task calc         # make demo's step: bench/results/memory_calc.json
    .venv/bin/python bench/memory.py --task calc --quick # 1 task x 2 episodes per step: a smoke run

What this is: for each setting (`SETTINGS`: the defaults; the engine's caches kept through the update;
activation checkpointing; the fused output head; both; the optimiser's moments in bf16; all three; one
sample per micro batch; the engine's rows and prefix cache bounded; those with the fused head and bf16
moments and no recomputation; only the MLPs recomputed, alone and with the lean settings; the forward passes
under bf16 autocast, alone and with the lean settings; every layer recomputed at one sample per micro
batch; the allocator's free pages kept instead of given back to the system), two
`agentrl train` steps as a child process (so each starts from an empty process), reading back from its
metrics.jsonl the second step's per-phase peaks (`memory/rollout_peak_mb`,
`memory/update_peak_mb`, `memory/step_peak_mb`, and the update's own phases: its old log-probs pass, the
micro batches' forward and backward, the optimiser step, the engine's release and the weights' sync;
agentrl/trainer/peak_memory.py; the first step holds no optimiser state until its own
optimiser step, so it is not the steady state), its `update_s`, and the child's peak resident size over the
whole run (its `ru_maxrss`: the load phase included), and the second step's rollout seconds. The same-run
baseline is the defaults' row: each other
setting's memory and seconds are given as ratios to it. The training state of the model, weights + gradients
+ two Adam moments in fp32 (16 bytes a parameter), is the yardstick the issue names (a step at most twice
it). The allocator is named (`agentrl.memory.choose_allocator`).

Plan 3b's step is calc-chain with `env.kwargs.end_part_on_repeat=true`, training temperature 0.5
(studies/calc-chain-plan3b/study.yaml); `make demo`'s is configs/calc.yaml. Evaluation is off: it is not
part of a step.

What this is not: an allocation profiler (which tensor holds the memory), or a learning test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parents[1]
TASK_OVERRIDES = {
    "calc-chain": ["env.kwargs.end_part_on_repeat=true", "sampling.temperature=0.5", "eval.temperature=0.5"],
    "calc": [],
}
BOUNDED_ENGINE = ["engine.cached.max_batch=12", "engine.cached.max_cached_tokens=8192"]
# the lean settings' common part: the fused head, bf16 moments and the engine's rows and prefix cache bounded
LEAN = ["update.fused_head=true", "optim.state_dtype=bfloat16", *BOUNDED_ENGINE]
MLP, LAYERS, MB1 = (
    "update.recompute_mlp=true",
    "update.activation_checkpointing=true",
    "update.micro_batch_size=1",
)
AUTOCAST = "update.autocast_bf16=true"
SETTINGS = {
    "defaults": [],
    "engine_kept": ["engine.cached.release_for_update=false"],
    "activation_checkpointing": [LAYERS],
    "fused_head": ["update.fused_head=true"],
    "fused_head_checkpointing": ["update.fused_head=true", LAYERS],
    "bf16_optimizer_state": ["optim.state_dtype=bfloat16"],
    "lean": ["update.fused_head=true", LAYERS, "optim.state_dtype=bfloat16"],
    # without recomputing anything: one sample per forward/backward, and the engine's rows and prefix cache
    # bounded during the rollouts (fewer sequences decoded together)
    "micro_batch_1": [MB1],
    "bounded_engine": BOUNDED_ENGINE,
    "lean_no_recompute": [*LEAN, MB1],
    # only the MLPs recomputed: the shared-prefix update stays on (agentrl/trainer/recompute.py)
    "recompute_mlp": [MLP],
    "lean_mlp": [*LEAN, MLP],
    "lean_mlp_micro_batch_1": [*LEAN, MLP, MB1],
    # the pages the allocator keeps free not given back to the system (update.return_free_memory is on by
    # default since e78f57c's run: bench/results/memory_calc-chain_returned.json)
    "pages_kept": ["update.return_free_memory=false"],
    # every decoder layer recomputed, one sample per micro batch: one sample per micro batch already loses the
    # shared prefix that full checkpointing turns off, so the recomputation is the only cost left
    "lean_checkpointing_micro_batch_1": [*LEAN, LAYERS, MB1],
    # activations in bf16: the forward passes under CPU bf16 autocast (update.autocast_bf16; only where
    # the CPU multiplies bf16 natively), alone and with the lean settings at two and one samples a micro batch
    "autocast_bf16": [AUTOCAST],
    "lean_mlp_bf16": [AUTOCAST, *LEAN, MLP],
    "lean_mlp_micro_batch_1_bf16": [AUTOCAST, *LEAN, MLP, MB1],
}
QUICK = ["train.tasks_per_step=1", "train.group_size=2", "rollout.max_turns=4"]
PARAMETERS_135M = 134_515_008  # SmolLM2-135M-Instruct's parameter count (tied embeddings counted once)


def one_step(task: str, overrides: list[str], folder: Path) -> dict[str, Any]:
    """Two training steps of `task` under `overrides` in a child process; the second's memory and seconds
    (the first holds no optimiser state until its optimiser step, so it is not the steady state)."""
    name = f"memory-{len(list(folder.iterdir()))}"
    command = [
        sys.executable, "-m", "agentrl.cli.main", "train", "--task", task,
        f"name={name}", f"runs_dir={folder}", f"store.url=sqlite:///{folder / 'store.db'}",
        "train.steps=2", "eval.before=false", "eval.after=false", "rollout.seeded_sampling=true",
        "train.seed=0", *overrides,
    ]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest child's so far
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            raise SystemExit(f"agentrl train failed ({child.returncode}):\n{tail}")
    peak_kb = usage.ru_maxrss
    metrics = [json.loads(line) for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
    step = [row for row in metrics if "memory/step_peak_mb" in row][-1]  # the second: optimiser state held
    return {
        "overrides": overrides,
        "rollout_peak_mb": step["memory/rollout_peak_mb"],
        "update_peak_mb": step["memory/update_peak_mb"],
        "step_peak_mb": step["memory/step_peak_mb"],
        "process_peak_mb": round(peak_kb / 1024, 1),  # the child's ru_maxrss: load and set-up included
        "update_phases_peak_mb": {  # the update's own phases (agentrl/trainer/peak_memory.py's sub_phase)
            key.removeprefix("memory/").removesuffix("_peak_mb"): value
            for key, value in step.items()
            if key.startswith("memory/update_") and key.endswith("_peak_mb") and "_cuda_" not in key
        },
        "update_s": round(step["update_s"], 1),
        "rollout_s": round(step["rollout_s"], 1) if "rollout_s" in step else None,
        "episodes": step.get("episodes"),
        "trained_episodes": step.get("trained_episodes"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="calc-chain", choices=sorted(TASK_OVERRIDES))
    parser.add_argument("--quick", action="store_true", help="1 task x 2 episodes per step")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma-separated, of {list(SETTINGS)}"
    )
    harness.add_out_argument(parser, f"memory_{parser.parse_known_args(argv)[0].task}")
    args = parser.parse_args(argv)
    from agentrl.memory import find_tcmalloc, requested

    choice = requested(os.environ)  # what each `agentrl train` child picks (agentrl.memory.choose_allocator)
    allocator = "tcmalloc" if choice in ("auto", "tcmalloc") and find_tcmalloc() else "system"
    chosen = [name for name in args.settings.split(",") if name]
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-memory-") as scratch:
        for setting in chosen:
            overrides = [*TASK_OVERRIDES[args.task], *(QUICK if args.quick else []), *SETTINGS[setting]]
            rows[setting] = one_step(args.task, overrides, Path(scratch))
            print(json.dumps({setting: rows[setting]}), file=sys.stderr, flush=True)
    state_mb = PARAMETERS_135M * 16 / 1024 / 1024
    base = rows.get("defaults")
    for row in rows.values():
        row["step_over_training_state"] = round(row["step_peak_mb"] / state_mb, 2)
        if base is not None:
            row["memory_ratio_to_defaults"] = round(row["step_peak_mb"] / base["step_peak_mb"], 3)
            row["update_s_ratio_to_defaults"] = round(harness.ratio(row["update_s"], base["update_s"]), 3)
            if row["rollout_s"] is not None and base["rollout_s"]:
                row["rollout_s_ratio_to_defaults"] = round(row["rollout_s"] / base["rollout_s"], 3)
    figures = {
        "task": args.task,
        "quick": args.quick,
        "allocator": allocator,
        "training_state_mb": round(state_mb, 1),
        "settings": rows,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    out = harness.out_path(args, f"memory_{args.task}")
    harness.emit("memory", figures, baseline="the defaults' step, same run", out=out, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
