"""The one harness every benchmark in bench/ uses: timed rounds after a warm-up, the ratio to a baseline
measured in the same run, the machine it ran on, the commit, and one schema for `bench/results/<bench>.json`.

    import harness                      # bench/ is on sys.path when a benchmark runs as a script
    timing = harness.timed(work, warmup=1, rounds=5)          # {"median_s", "min_s", "rounds_s", ...}
    figures = {..., "speedup": harness.ratio(baseline_s, mine_s)}
    harness.emit("trainer", figures, baseline="the eager update, same run", out=harness.out_path(args))

The schema: the benchmark's own figures at the top level, as its docs and tests read them, beside one
reserved key, `harness`:

    {"harness": {"bench": "trainer", "schema": 1, "command": "bench/trainer.py --quick",
                 "commit": "<sha>[+dirty]", "written": "<UTC time>", "baseline": "<what ratios are against>",
                 "machine": {"cores": 2, "cpu_flags": [...], "load_before": [1, 5, 15 min],
                             "load_after": [...], "cpu_model": "..."}},
     ...the benchmark's figures...}

`load_before` is the load average when the benchmark imported this module, `load_after` when it emitted:
a figure taken while the machine was busy says so in its own file. Speeds are quoted only as ratios to a
baseline from the same run (the machine changes between sessions); the CPU flags say which kernels ran.

What this is not: a statistics package (a benchmark reports medians of its rounds; bands over seeds belong
to `agentrl study`), or a place for experiments: bench/ holds benchmarks only (bench/README.md lists them;
studies live under studies/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SCHEMA = 1
RESERVED = "harness"
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages ([] where the OS has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


LOAD_AT_START = load_average()


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's model name and which of the speed-relevant `FLAGS` it has (from /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown", []
    model = next(
        (line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("model name")), ""
    )
    flags = set(
        next((line for line in text.splitlines() if line.startswith("flags")), "").partition(":")[2].split()
    )
    return model or "unknown", [flag for flag in FLAGS if flag in flags]


def machine() -> dict[str, Any]:
    """What a figure was measured on: cores, the CPU and its flags, the load at the start and now."""
    model, flags = cpu_info()
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "cpu_flags": flags,
        "load_before": LOAD_AT_START,
        "load_after": load_average(),
    }


def commit(checkout: Path = ROOT) -> str:
    """The commit of a checkout (this one by default), "+dirty" when tracked files differ."""
    sys.path.insert(0, str(ROOT))
    from agentrl.evidence import commit_of

    return commit_of(checkout)


def timed(work: Callable[[], object], warmup: int = 1, rounds: int = 5) -> dict[str, Any]:
    """Seconds per call of `work`: `warmup` untimed calls, then `rounds` timed ones (median, min, each)."""
    if rounds < 1 or warmup < 0:
        raise ValueError(f"timed needs rounds >= 1 and warmup >= 0, got rounds={rounds}, warmup={warmup}")
    for _ in range(warmup):
        work()
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "rounds_s": seconds,
        "warmup": warmup,
        "rounds": rounds,
    }


def ratio(baseline: float, measured: float) -> float:
    """`baseline / measured`: how many times faster `measured` is than the same run's baseline."""
    if measured <= 0:
        raise ValueError(f"a ratio needs a positive measurement, got {measured}")
    return baseline / measured


def default_out(bench: str) -> Path:
    return RESULTS / f"{bench}.json"


def add_out_argument(parser: argparse.ArgumentParser, bench: str) -> None:
    """`--out PATH` (default bench/results/<bench>.json; `-` prints only). A `--quick` run prints only unless
    it is given `--out`, so a test never overwrites a committed result."""
    parser.add_argument(
        "--out",
        default=None,
        help=f"where the JSON goes (default {default_out(bench).relative_to(ROOT)}; '-' prints only; a "
        "--quick run prints only unless given --out)",
    )


def out_path(args: argparse.Namespace, bench: str) -> Path | None:
    """Where `emit` writes for these arguments (module docstring); None: print only."""
    chosen = getattr(args, "out", None)
    if chosen == "-":
        return None
    if chosen:
        return Path(chosen)
    return None if getattr(args, "quick", False) else default_out(bench)


def envelope(bench: str, baseline: str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The `harness` block of a result (module docstring)."""
    command = " ".join(["bench/" + Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)])
    return {
        "bench": bench,
        "schema": SCHEMA,
        "command": command,
        "commit": commit(),
        "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "baseline": baseline,
        "machine": machine(),
    }


def emit(
    bench: str,
    figures: Mapping[str, Any],
    *,
    baseline: str,
    out: Path | None,
    argv: Sequence[str] | None = None,
    echo: bool = True,
) -> dict[str, Any]:
    """The result in the harness schema: written to `out` unless None, and printed as ONE JSON line unless
    `echo` is false (a benchmark that rewrites its file after each part echoes only at its end)."""
    if RESERVED in figures:
        raise ValueError(f"a benchmark's figures may not use the reserved key {RESERVED!r}")
    result = {RESERVED: envelope(bench, baseline, argv), **figures}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    if echo:
        print(json.dumps(result))
    return result
