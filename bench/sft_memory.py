"""Where an `agentrl sft` process's memory goes: its resident size sampled through each phase of a run.

    .venv/bin/python bench/sft_memory.py --demos runs/cold_start/cold-maze-demos/demos.jsonl \
        --out bench/results/sft_memory_maze.json -- --task maze sft.epochs=1 sft.batch_size=8 ...

What this is: the command `agentrl sft --demos FILE ARGS...` run as a child, its resident set size (the
process and any children, from /proc) sampled every `--every` seconds, and each sample labelled with the
phase the command's own output says it is in: `load` (the config and the demonstrations),
`eval_before` (from the "SFT on N demonstrations" line: the model, engine and service, then the
evaluation), `step K`, `publish` (the weights into the engine),
`eval_after`, `save`. The report gives each phase's peak and the resident size when it began, so the
growth of each phase is read off directly. The JSON (bench/harness.py's schema) is printed as one line after
the command's own output, and written to `--out` when given (the figures depend on the command's arguments,
so there is no default file).

What this is not: an allocation profiler (it does not say which tensor holds the memory), or a test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"^step (\d+)\s+(\S+)=")
STEPS_LINE = re.compile(r"\b(\d+) steps\s*$")


def tree_rss_mb(pid: int) -> float:
    """Resident MB of `pid` and its descendants (0 for a process that is gone)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total += int(match.group(1)) / 1024 if match else 0.0
        pending.extend(int(child) for child in children)
    return total


def next_phase(phase: str, line: str, steps: int) -> str:
    """The phase after `line` of the command's output, in a run of `steps` SFT steps."""
    found = STEP_LINE.match(line.strip())
    if "saved the final weights" in line:
        return "save"
    if not found:
        return phase
    step, key = int(found.group(1)), found.group(2)
    if key.startswith("eval/"):
        return "step 1" if step == 0 else "save"
    if key == "sync_s":
        return "eval_after"
    return "publish" if step >= steps else f"step {step + 1}"  # publish: the weights into the engine


def phase_report(samples: list[tuple[float, str, float]]) -> list[dict[str, Any]]:
    """Per phase, in order: seconds, resident MB at its first sample, and its peak."""
    phases: list[dict[str, Any]] = []
    for seconds, phase, rss in samples:
        if not phases or phases[-1]["phase"] != phase:
            phases.append({"phase": phase, "start_s": seconds, "start_mb": rss, "peak_mb": rss})
        phases[-1]["peak_mb"] = max(phases[-1]["peak_mb"], rss)
        phases[-1]["end_s"] = seconds
    return [{key: round(v, 1) if isinstance(v, float) else v for key, v in p.items()} for p in phases]


def trace(args: list[str], every: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "agentrl.cli.main", "sft", *args]
    started = time.perf_counter()
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as it is printed: the phase clock
    child = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=unbuffered
    )
    state = {"phase": "load"}
    samples: list[tuple[float, str, float]] = []

    def sample() -> None:
        while child.poll() is None:
            samples.append((time.perf_counter() - started, state["phase"], tree_rss_mb(child.pid)))
            time.sleep(every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert child.stdout is not None
    steps = 0
    for line in child.stdout:
        sys.stdout.write(line)
        counted = STEPS_LINE.search(line)  # "SFT on N demonstrations from FILE (...): K steps"
        if counted:
            steps, state["phase"] = int(counted.group(1)), "eval_before"
        state["phase"] = next_phase(state["phase"], line, steps)
    child.wait()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"agentrl sft failed ({child.returncode})")
    return {
        "command": "agentrl sft " + " ".join(args),
        "peak_mb": round(max(rss for _, _, rss in samples), 1),
        "phases": phase_report(samples),
        "wall_s": round(time.perf_counter() - started, 1),
        "allocator": os.environ.get("AGENTRL_ALLOCATOR", "auto"),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", required=True, help="the demonstrations file (agentrl demos)")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--out", type=Path, help="also write the JSON here (it is always printed)")
    parser.add_argument("sft_args", nargs=argparse.REMAINDER, help="-- then agentrl sft's other arguments")
    args = parser.parse_args(argv)
    rest = args.sft_args[1:] if args.sft_args[:1] == ["--"] else args.sft_args
    result = trace(["--demos", args.demos, *rest], args.every)
    out = None if args.out is None or str(args.out) == "-" else args.out
    baseline = "the resident size at the start of each phase of the same command"
    harness.emit("sft_memory", result, baseline=baseline, out=out, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
