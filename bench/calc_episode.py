"""The calc env's own cost per episode, fresh container vs warm pool; prints ONE JSON object.

    .venv/bin/python bench/calc_episode.py            # 24 episodes per mode, 6 at a time
    .venv/bin/python bench/calc_episode.py --quick    # 8 episodes per mode, 4 at a time

Each episode is what a demo episode does to the env, with a scripted policy instead of the model: reset,
two `python` tool calls, `submit`, close. No model runs, so the figures are the env's overhead only (what
the walking skeleton paid per episode before the pool). Keys: `fresh_episode_p50_ms` / `_p95_ms`
(`pool_size=0`: a container started on the first python call and removed at close, as before),
`pooled_episode_p50_ms` / `_p95_ms` (`pool_size` = 2 x concurrency: the first python call is a dequeue from
the process-wide warm pool; the pool is warmed before timing), `episode_speedup` = fresh p50 / pooled p50,
`python_call_p50_ms` (one `python` tool call on a live sandbox: channel exec of a Python process in the
container), `load_avg_1m` at the start.

What this is not: the sandbox benchmark (bench/sandbox.py measures the layer itself), nor a model benchmark.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import harness
from agentrl_calc.env import CalcEnv

from agentrl.sandbox.docker import OWNER_LABEL, owner, reap
from agentrl.sandbox.pool import close_shared_pools
from agentrl.types import Action, ToolCall

TASK = {"id": "bench-1", "question": "What is 347 * 29 + 18?", "answer": "10081"}


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def episode(pool_size: int, python_times: list[float]) -> float:
    """Seconds for one scripted episode: reset, python twice, submit, close."""
    started = time.perf_counter()
    env = CalcEnv(pool_size=pool_size)
    try:
        env.reset(options={"task": TASK})
        for code in ("print(347 * 29)", "print(10063 + 18)"):
            before = time.perf_counter()
            env.step(call("python", code=code))
            python_times.append(time.perf_counter() - before)
        result = env.step(call("submit", answer="10081"))
        assert result.reward == 1.0, result.observation
    finally:
        env.close()
    return time.perf_counter() - started


def run_mode(pool_size: int, episodes: int, concurrency: int, python_times: list[float]) -> list[float]:
    with ThreadPoolExecutor(concurrency) as workers:
        return list(workers.map(lambda _: episode(pool_size, python_times), range(episodes)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 episodes per mode, 4 at a time")
    harness.add_out_argument(parser, "calc_episode")
    args = parser.parse_args(argv)
    episodes, concurrency = (8, 4) if args.quick else (24, 6)
    result: dict[str, Any] = {"episodes": episodes, "concurrency": concurrency}
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    python_times: list[float] = []
    try:
        fresh = run_mode(0, episodes, concurrency, [])
        run_mode(2 * concurrency, concurrency, concurrency, [])  # warm the pool (not timed)
        time.sleep(2.0)  # let the refill threads replace what the warm-up took
        pooled = run_mode(2 * concurrency, episodes, concurrency, python_times)
    finally:
        close_shared_pools()
        reap({OWNER_LABEL: owner()})
    for name, times in (("fresh", fresh), ("pooled", pooled)):
        result[f"{name}_episode_p50_ms"] = percentile(times, 0.5)
        result[f"{name}_episode_p95_ms"] = percentile(times, 0.95)
    result["episode_speedup"] = round(result["fresh_episode_p50_ms"] / result["pooled_episode_p50_ms"], 1)
    result["python_call_p50_ms"] = percentile(python_times, 0.5)
    baseline = "a fresh container per episode, same run"
    harness.emit("calc_episode", result, baseline=baseline, out=harness.out_path(args, "calc_episode"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
