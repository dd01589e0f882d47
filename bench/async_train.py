"""Async vs sync training on the calc task, same budget, both measured in this run; prints ONE JSON object and
writes it to bench/results/async_train.json (`--out`; a `--quick` run prints only unless given `--out`).

    .venv/bin/python bench/async_train.py            # 3 steps x 4 tasks x 4 episodes per mode
    .venv/bin/python bench/async_train.py --quick    # 3 steps x 2 tasks x 2 episodes, 2 turns (a few minutes)
    .venv/bin/python bench/async_train.py --quick --repeats 2   # sync, async, async, sync: drift cancels

Each mode is one real `agentrl train --task calc` run (a subprocess, so both start cold and free their
memory), with the same seed and overrides, `eval.before=false eval.after=false`, and only
`trainer.async_mode` changed. Keys per mode (`sync`, `async`):
- `loop_s`: seconds of the training loop: for sync the sum over steps of rollout_s + credit_s + update_s +
  sync_s (its bookkeeping between phases is left out, which favours sync); for async the `loop_s` logged
  with the last step (from the first rollout to the last update's weights in the engine);
- `steps_per_hour` = steps / loop_s x 3600; `wall_s`: the whole subprocess (model load and service start
  included, the same for both modes);
- `step_period_s`: what each step added to loop_s, and `steady_steps_per_hour` over steps 2..N: the
  pipeline's steady state, leaving out step 1, whose rollout async mode has nothing to overlap with;
- `train_success_per_step`, `reward_per_step`: over each step's trained groups (the results per step);
- `rollout_s`, `update_s`: per step; with async the rollout time is mostly hidden behind the update;
- `cpu_s`, `cores_busy`: the process's CPU seconds over the loop and the cores they kept busy on average
  (sync also `rollout_cores_busy` and `update_cores_busy`, the same during rollouts and during the rest);
- async only: `staleness_mean` and `staleness_max` per step, `dropped_stale_groups`, `carried_over_groups`,
  `sync_wait_s` (waiting for generations in flight before each weight load), `sync_s`, `ess`.
Top level: `async_speedup` = async steps_per_hour / sync steps_per_hour, `async_speedup_steady` (the
same over steps 2..N), `async_speedup_wall`, the overrides, and the load average before and after (other
work on the machine slows both modes alike only if it is steady; quote it). With `--repeats N` the modes
run in ABBA order (sync, async, async, sync, ...) so that a steady drift in the machine's load cancels;
`sync` and `async` are then lists of N runs and the speedups are ratios of summed steps and summed loop
(wall) seconds. `overlap_bound` = sync's loop seconds / (its CPU seconds / `cores`): the most that any
overlap of sync mode's work can gain on this machine, since the same work needs at least that many CPU
seconds spread over every core (the sandboxes' CPU, outside the process, is left out).

What this is not: a statistical comparison of learning (a few steps of GRPO on 135M parameters say little
about final success); it shows the throughput ratio and that the per-step results are of the same kind.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

FULL = ["train.steps=3", "train.tasks_per_step=4", "train.group_size=4"]
QUICK = ["train.steps=3", "train.tasks_per_step=2", "train.group_size=2", "rollout.max_turns=2"]
# one sample per forward/backward: the same gradient as calc.yaml's 4, a quarter of the peak memory (the
# [batch, length, vocab] logits dominate it: ~12 GB at 4 x 16 episodes, too much beside other work here)
# a tiny entropy bonus gives every episode a gradient, so every step of both modes runs a full update (else a
# step whose groups all succeeded or all failed skips it, and whichever mode draws more of those looks faster)
COMMON = ["eval.before=false", "eval.after=false", "train.seed=0", "update.micro_batch_size=1"]
COMMON += ["loss.entropy_coef=0.001"]
ASYNC = ["trainer.async_mode=true"]


def run_mode(name: str, overrides: list[str], work: Path) -> dict[str, Any]:
    """One `agentrl train` run; its per-step metrics and timings."""
    args = [sys.executable, "-m", "agentrl.cli.main", "train", "--task", "calc", f"name={name}"]
    args += [f"runs_dir={work / 'runs'}", f"store.url=sqlite:///{work / 'store.db'}", *overrides]
    started = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "AGENTRL_DB_URL": ""})
    wall_s = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{name} failed:\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in (work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    return summarise([row for row in rows if "rollout_s" in row], wall_s)


def step_periods(steps: list[dict[str, Any]]) -> list[float]:
    """Seconds each step added to the loop: sync, its phases; async, the gaps between the `loop_s` stamps
    of consecutive steps (each logged when that step's update has landed)."""
    if "loop_s" in steps[0]:
        stamps = [0.0] + [float(row["loop_s"]) for row in steps]
        return [after - before for before, after in zip(stamps, stamps[1:], strict=False)]
    return [row["rollout_s"] + row["credit_s"] + row["update_s"] + row["sync_s"] for row in steps]


def summarise(steps: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The per-mode keys of the module docstring from the steps' metrics rows (in step order)."""
    periods = step_periods(steps)
    loop_s = sum(periods)
    out: dict[str, Any] = {
        "steps": len(steps),
        "loop_s": round(loop_s, 2),
        "steps_per_hour": round(len(steps) / loop_s * 3600, 2),
        "step_period_s": [round(period, 2) for period in periods],
        "steady_steps_per_hour": round((len(steps) - 1) / sum(periods[1:]) * 3600, 2)
        if periods[1:]
        else None,
        "wall_s": round(wall_s, 2),
        "train_success_per_step": [row["success_rate"] for row in steps],
        "reward_per_step": [row["reward_mean"] for row in steps],
        "rollout_s": [round(row["rollout_s"], 2) for row in steps],
        "update_s": [round(row["update_s"], 2) for row in steps],
        "ess": [row.get("ess") for row in steps],
        **cpu_use(steps, loop_s),
    }
    for key in ("staleness_mean", "staleness_max", "dropped_stale_groups", "carried_over_groups"):
        if key in steps[0]:
            out[key] = [row[key] for row in steps]
    for key in ("sync_wait_s", "sync_s"):
        if "loop_s" in steps[-1]:
            out[key] = [round(row[key], 2) for row in steps]
    return out


def cpu_use(steps: list[dict[str, Any]], loop_s: float) -> dict[str, float]:
    """Process CPU seconds of the loop and the cores they kept busy on average; sync runs also the cores
    busy during rollouts and during the rest of each step (credit, update, sync)."""
    if "loop_cpu_s" in steps[-1]:
        cpu_s = float(steps[-1]["loop_cpu_s"])
        return {"cpu_s": round(cpu_s, 1), "cores_busy": round(cpu_s / loop_s, 2)}
    cpu_s = sum(float(row["step_cpu_s"]) for row in steps)
    rollout_cpu = sum(float(row["rollout_cpu_s"]) for row in steps)
    rollout_wall = sum(float(row["rollout_s"]) for row in steps)
    return {
        "cpu_s": round(cpu_s, 1),
        "cores_busy": round(cpu_s / loop_s, 2),
        "rollout_cores_busy": round(rollout_cpu / rollout_wall, 2),
        "update_cores_busy": round((cpu_s - rollout_cpu) / (loop_s - rollout_wall), 2),
    }


def overlap_bound(sync_runs: list[dict[str, Any]]) -> float:
    """The most any overlap of sync mode's work can gain on this machine: its loop seconds over the seconds
    its CPU seconds need when every core is busy (work outside this process, e.g. the sandboxes, aside)."""
    loop_s = sum(run["loop_s"] for run in sync_runs)
    cpu_s = sum(run["cpu_s"] for run in sync_runs)
    return loop_s / (cpu_s / (os.cpu_count() or 1))


def rate(runs: list[dict[str, Any]], seconds: str) -> float:
    """Steps per second over several runs: summed steps over summed `seconds`."""
    return sum(run["steps"] for run in runs) / sum(run[seconds] for run in runs)


def steady(runs: list[dict[str, Any]]) -> float:
    """Steps per second over steps 2..N of several runs."""
    return sum(run["steps"] - 1 for run in runs) / sum(sum(run["step_period_s"][1:]) for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 steps x 2 tasks x 2 episodes, 2 turns")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode, in ABBA order")
    parser.add_argument("overrides", nargs="*", help="extra a.b=c overrides for both modes")
    harness.add_out_argument(parser, "async_train")
    options = parser.parse_args()
    overrides = [*(QUICK if options.quick else FULL), *COMMON, *options.overrides]
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory(prefix="agentrl-async-bench-") as folder:
        for index in range(options.repeats):
            order = ("sync", "async") if index % 2 == 0 else ("async", "sync")
            for mode in order:
                mode_overrides = [*overrides, *ASYNC] if mode == "async" else overrides
                runs[mode].append(run_mode(f"{mode}-{index}", mode_overrides, Path(folder)))
                # on stderr as each run ends, so the figures survive a later run being killed
                print(mode, json.dumps(runs[mode][-1]), file=sys.stderr, flush=True)
    one = options.repeats == 1
    figures = {
        "overrides": overrides,
        "sync": runs["sync"][0] if one else runs["sync"],
        "async": runs["async"][0] if one else runs["async"],
        "async_speedup": round(rate(runs["async"], "loop_s") / rate(runs["sync"], "loop_s"), 3),
        "async_speedup_steady": round(steady(runs["async"]) / steady(runs["sync"]), 3),
        "async_speedup_wall": round(rate(runs["async"], "wall_s") / rate(runs["sync"], "wall_s"), 3),
        "overlap_bound": round(overlap_bound(runs["sync"]), 3),
        "cores": os.cpu_count(),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }
    baseline = (
        "sync mode (trainer.async_mode=false), same overrides and seed, in this run (ABBA with --repeats)"
    )
    harness.emit("async_train", figures, baseline=baseline, out=harness.out_path(options, "async_train"))


if __name__ == "__main__":
    main()
