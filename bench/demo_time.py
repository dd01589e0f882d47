"""Wall time of a shortened demo run with each engine, side by side; prints ONE JSON object.

    .venv/bin/python bench/demo_time.py                  # 1 training step, 16 held-out tasks before/after
    .venv/bin/python bench/demo_time.py --steps 4 --eval-tasks 48     # the whole `make demo`

The JSON goes to bench/results/demo_time.json too (`--out`; '-': print only).

Runs `agentrl train --task calc` (configs/calc.yaml, the demo) twice in a row, with `engine.kind=hf`
(transformers `generate`, batched, bf16 autocast: the engine the demo used before the cached engine) and
with `engine.kind=cached`, each in a fresh process with its own embedded env service and a throwaway store.
Keys: `hf_s`, `cached_s` (wall seconds of each whole command, model load and evaluations included),
`speedup` = hf_s / cached_s, the held-out success each run printed, `load_avg_1m` at the start.

What this is not: the engine benchmark (bench/engine.py isolates sampling); the two runs sample different
tokens (different kernels), so their success rates differ by noise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

REPO = Path(__file__).resolve().parents[1]


def run_demo(kind: str, steps: int, eval_tasks: int, workdir: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "agentrl.cli.main",
        "train",
        "--task",
        "calc",
        f"name=demo-{kind}",
        f"runs_dir={workdir / 'runs'}",
        f"store.url=sqlite:///{workdir / f'{kind}.db'}",
        f"engine.kind={kind}",
        f"train.steps={steps}",
        f"eval.num_tasks={eval_tasks}",
    ]
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "AGENTRL_DB_URL": ""}
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the {kind} run failed:\n{done.stderr[-3000:]}")
    rates = re.findall(r"held-out (?:before|after )\s*: success ([0-9.]+)", done.stdout)
    return {"seconds": round(seconds, 1), "held_out": [float(rate) for rate in rates]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--eval-tasks", type=int, default=16)
    harness.add_out_argument(parser, "demo_time")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"steps": args.steps, "eval_tasks": args.eval_tasks}
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("hf", "cached"):
            run = run_demo(kind, args.steps, args.eval_tasks, Path(scratch))
            result[f"{kind}_s"], result[f"{kind}_held_out"] = run["seconds"], run["held_out"]
    result["speedup"] = round(harness.ratio(result["hf_s"], result["cached_s"]), 2)
    baseline = "the same demo command with engine.kind=hf, run just before in the same run"
    harness.emit("demo_time", result, baseline=baseline, out=harness.out_path(args, "demo_time"), argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
