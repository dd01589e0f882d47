"""Where a pooled sandbox fork's time goes, per env kind; writes bench/results/sandbox_fork.json, prints it.

    .venv/bin/python bench/sandbox_fork.py                          # calc-pooled, swebench-local-pooled
    .venv/bin/python bench/sandbox_fork.py --samples 50 --out -     # stdout only
    .venv/bin/python bench/sandbox_fork.py --baseline c778d4e       # also agentrl/ as of a commit, same run

Each kind is reset and stepped as in `bench/fork.py` (calc: a python call that wrote a file; swebench-local:
the inflection repository with its `.git`, after one bash call), with a warm pool of 4. Then `samples` times:
wait until the pool is full again (outside the timing), time `env.fork()` end to end, close the fork
(outside the timing). The parts of each fork are timed by wrapping, for this process only, the pool's
`acquire` and the exec channel's `download` (the parent streams its workdir out) and `upload` (the child
takes it in), so the figures come from the real fork, whatever its code:
- `acquire`: the pool's dequeue and health ping;
- `archive` / `restore`: the seconds the parent's / the child's in-container server reports for its side of
  the copy (walking and reading, or writing, the files; only where the server reports them);
- `transfer`: the rest of `download` and `upload` (the frames through the host and back in);
- `other`: the rest of `env.fork()` (copying the env's state, building the child objects).
Each part has a p50 and p99 (nearest rank) in ms, with `fork_p50_ms` / `fork_p99_ms` of the whole fork,
`bytes` of the stream and the load average (1 min) before and after each kind: the machine is shared, so
compare only figures measured in the same run.

`--baseline REF` exports `agentrl/` as of REF (`git archive`) into a temporary directory, runs this script
there first (same kinds and samples, in a child process whose `agentrl` is that copy; the envs are the
installed ones either way) and adds its figures under `baseline` with the p50 ratios baseline / current.

What this is not: a test of many forks at once, of unpooled forks (a container start, see `bench/fork.py`),
or of a fork over the service's HTTP endpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fork import EPISODES, percentile, wait_for_warm_pools  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "sandbox_fork.json"
KINDS = ("calc-pooled", "swebench-local-pooled")
PARTS = ("acquire", "archive", "transfer", "restore", "other")


def split_parts(total_s: float, calls: list[tuple[str, float, float | None]]) -> dict[str, float]:
    """One fork's parts in ms from its timed calls: (name, host seconds, server seconds or None) for
    `acquire`, `download` and `upload`; a side whose server reported nothing counts as transfer. Pure."""
    parts = dict.fromkeys(PARTS, 0.0)
    for name, host_s, server_s in calls:
        if name == "acquire":
            parts["acquire"] += host_s
            continue
        side = "archive" if name == "download" else "restore"
        inside = min(server_s or 0.0, host_s)
        parts[side] += inside
        parts["transfer"] += host_s - inside
    parts["other"] = max(0.0, total_s - sum(parts.values()))
    return {name: value * 1000 for name, value in parts.items()}


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


@contextmanager
def timed_calls() -> Iterator[list[tuple[str, float, float | None]]]:
    """Wraps `SandboxPool.acquire`, `ExecChannel.download` and `ExecChannel.upload` while open; yields the
    list each call appends (name, host seconds, the server's reported seconds or None) to."""
    from agentrl.sandbox.channel import ExecChannel
    from agentrl.sandbox.pool import SandboxPool

    calls: list[tuple[str, float, float | None]] = []
    originals = {
        (SandboxPool, "acquire"): SandboxPool.acquire,
        (ExecChannel, "download"): ExecChannel.download,
        (ExecChannel, "upload"): ExecChannel.upload,
    }

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = method(*args, **kwargs)
            status = result[0] if name == "download" else result
            server = status.get("seconds") if isinstance(status, dict) else None
            calls.append((name, time.perf_counter() - started, server))
            return result

        return timed

    for (owner, name), method in originals.items():
        setattr(owner, name, wrap(name, method))
    try:
        yield calls
    finally:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)


def measure(kind: str, samples: int) -> dict[str, Any]:
    load_before = round(os.getloadavg()[0], 2)
    env, actions, what = EPISODES[kind]()
    totals: list[float] = []
    parts: dict[str, list[float]] = defaultdict(list)
    try:
        for action in actions:
            env.step(action)
        for _ in range(samples):
            wait_for_warm_pools()
            with timed_calls() as calls:
                started = time.perf_counter()
                fork = env.fork()
                total_s = time.perf_counter() - started
            fork.close()
            totals.append(total_s * 1000)
            for name, value in split_parts(total_s, calls).items():
                parts[name].append(value)
        size = workdir_size(env)
    finally:
        env.close()
    return {
        "fork_p50_ms": round(percentile(totals, 50), 3),
        "fork_p99_ms": round(percentile(totals, 99), 3),
        "parts_ms": {name: summary(values) for name, values in parts.items()},
        "samples": samples,
        "workdir_bytes": size,
        "what": what,
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }


def workdir_size(env: Any) -> int | None:
    """The bytes in the parent's workdir (`du -sb`), or None where the env has no sandbox."""
    sandbox = getattr(env, "_sandbox", None)
    if sandbox is None:
        return None
    result = sandbox.exec(["du", "-sb", sandbox.config.workdir])
    return int(result.stdout.split()[0]) if result.exit_code == 0 else None


def run_baseline(ref: str, kinds: list[str], samples: int) -> dict[str, Any]:
    """This script's figures with `agentrl/` as of `ref`, from a child process."""
    with tempfile.TemporaryDirectory(prefix="sandbox-fork-baseline-") as directory:
        export = ["git", "archive", ref, "agentrl"]
        exported = subprocess.run(export, cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", directory], input=exported, check=True)
        command = [sys.executable, __file__, "--kinds", *kinds, "--samples", str(samples), "--out", "-"]
        environment = {**os.environ, "PYTHONPATH": directory}
        output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    result["ref"] = ref
    return result


def ratios(baseline: dict[str, Any], current: dict[str, Any]) -> dict[str, float]:
    """p50 baseline / current per kind measured by both; pure."""
    return {
        kind: round(baseline["kinds"][kind]["fork_p50_ms"] / figures["fork_p50_ms"], 2)
        for kind, figures in current["kinds"].items()
        if kind in baseline.get("kinds", {}) and figures["fork_p50_ms"] > 0
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(EPISODES))
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--baseline", default=None, help="a git ref whose agentrl/ is measured first")
    parser.add_argument("--out", default=str(RESULTS), help="the JSON file, or - for stdout only")
    args = parser.parse_args(argv)
    baseline = run_baseline(args.baseline, args.kinds, args.samples) if args.baseline else None
    results: dict[str, Any] = {"kinds": {kind: measure(kind, args.samples) for kind in args.kinds}}
    results["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    results["command"] = "python bench/sandbox_fork.py " + " ".join(argv or sys.argv[1:])
    if baseline is not None:
        results["baseline"] = baseline
        results["p50_ratio_baseline_over_current"] = ratios(baseline, results)
    text = json.dumps(results, indent=2)
    if args.out != "-":
        Path(args.out).write_text(text + "\n")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
