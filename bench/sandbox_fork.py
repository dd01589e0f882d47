"""Where a pooled sandbox fork's time goes, per env kind; writes bench/results/sandbox_fork.json, prints it.

    .venv/bin/python bench/sandbox_fork.py                          # calc-pooled, swebench-local-pooled
    .venv/bin/python bench/sandbox_fork.py --samples 50 --out -     # stdout only
    .venv/bin/python bench/sandbox_fork.py --baseline 2357d18 --rounds 2   # and agentrl/ as of a commit

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
`workdir_bytes` (the parent's workdir, `du -sb`) and the load average (1 min) before and after each kind
and round: the machine is shared, so compare only figures measured in the same run.

`--baseline REF` exports `agentrl/` as of REF (`git archive`) into a temporary directory and, in each of
`--rounds` rounds, plays every kind there first (a child process whose `agentrl` is that copy; the envs
are the installed ones either way), then here; samples are pooled over the rounds, so load that drifts
during the run falls on both sides. Its figures go under `baseline`, with the p50 ratios baseline / current.

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
import harness  # noqa: E402
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


def play(kind: str, samples: int) -> dict[str, Any]:
    """One kind's raw figures: per fork, the total and each part in ms; the load before and after."""
    load = [round(os.getloadavg()[0], 2)]
    env, actions, what = EPISODES[kind]()
    raw: dict[str, Any] = {"fork": [], **{name: [] for name in PARTS}, "what": what}
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
            raw["fork"].append(round(total_s * 1000, 3))
            for name, value in split_parts(total_s, calls).items():
                raw[name].append(round(value, 3))
        raw["workdir_bytes"] = workdir_size(env)
    finally:
        env.close()
    raw["load_avg_1m"] = [*load, round(os.getloadavg()[0], 2)]
    return raw


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One kind's figures over every round's raw figures (samples pooled); pure."""
    totals = [value for raw in rounds for value in raw["fork"]]
    return {
        "fork_p50_ms": round(percentile(totals, 50), 3),
        "fork_p99_ms": round(percentile(totals, 99), 3),
        "parts_ms": {name: summary([value for raw in rounds for value in raw[name]]) for name in PARTS},
        "samples": len(totals),
        "workdir_bytes": rounds[-1]["workdir_bytes"],
        "what": rounds[-1]["what"],
        "load_avg_1m": [load for raw in rounds for load in raw["load_avg_1m"]],
    }


def workdir_size(env: Any) -> int | None:
    """The bytes in the parent's workdir (`du -sb`), or None where the env has no sandbox."""
    sandbox = getattr(env, "_sandbox", None)
    if sandbox is None:
        return None
    result = sandbox.exec(["du", "-sb", sandbox.config.workdir])
    return int(result.stdout.split()[0]) if result.exit_code == 0 else None


def play_baseline(ref: str, kinds: list[str], samples: int) -> dict[str, dict[str, Any]]:
    """`play` of each kind with `agentrl/` as of `ref`, in a child process (this script with `--raw`)."""
    with tempfile.TemporaryDirectory(prefix="sandbox-fork-baseline-") as directory:
        export = ["git", "archive", ref, "agentrl"]
        exported = subprocess.run(export, cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", directory], input=exported, check=True)
        command = [sys.executable, __file__, "--raw", "--kinds", *kinds, "--samples", str(samples)]
        environment = {**os.environ, "PYTHONPATH": directory}
        output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def ratios(baseline: dict[str, Any], current: dict[str, Any]) -> dict[str, float]:
    """p50 baseline / current per kind measured by both; pure."""
    return {
        kind: round(baseline[kind]["fork_p50_ms"] / figures["fork_p50_ms"], 2)
        for kind, figures in current.items()
        if kind in baseline and figures["fork_p50_ms"] > 0
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(EPISODES))
    parser.add_argument("--samples", type=int, default=30, help="forks per kind and round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (baseline, then current, each)")
    parser.add_argument("--baseline", default=None, help="a git ref whose agentrl/ is measured too")
    parser.add_argument("--raw", action="store_true", help="one round's raw figures on stdout (internal)")
    parser.add_argument("--out", default=str(RESULTS), help="the JSON file, or - for stdout only")
    args = parser.parse_args(argv)
    if args.raw:
        print(json.dumps({kind: play(kind, args.samples) for kind in args.kinds}))
        return 0
    current: dict[str, list[dict[str, Any]]] = defaultdict(list)
    baseline: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(args.rounds):
        if args.baseline:
            for kind, raw in play_baseline(args.baseline, args.kinds, args.samples).items():
                baseline[kind].append(raw)
        for kind in args.kinds:
            current[kind].append(play(kind, args.samples))
    results: dict[str, Any] = {"kinds": {kind: summarise(rounds) for kind, rounds in current.items()}}
    if args.baseline:
        results["baseline"] = {
            "ref": args.baseline,
            "kinds": {kind: summarise(rounds) for kind, rounds in baseline.items()},
        }
        results["p50_ratio_baseline_over_current"] = ratios(results["baseline"]["kinds"], results["kinds"])
    baseline = f"agentrl/ at {args.baseline}, same run" if args.baseline else "none (no --baseline given)"
    out = None if args.out == "-" else Path(args.out)
    harness.emit("sandbox_fork", results, baseline=baseline, out=out, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
