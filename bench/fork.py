"""Latency of `Env.fork()` per env kind, mid-episode; writes bench/results/fork.json and prints it.

    .venv/bin/python bench/fork.py                 # maze, calc, swebench-local, web-shop (what is installed)
    .venv/bin/python bench/fork.py --kinds maze calc --samples 10

Each kind is reset on one task and stepped a few turns, then forked `samples` times (each fork is closed
right after it is timed, outside the timing). Keys per kind: `fork_p50_ms`, `fork_p99_ms` (nearest rank),
`samples`, `capability` (how it forks), `turns_before_fork`, and `what` (what one fork copies). Also
`load_avg_1m` at the start: the machine is shared, so read every figure next to it.
- maze: "copy" (a deep copy of the board state);
- calc: "sandbox" after a python call, so a fork includes `DockerSandbox.fork` of its /work (pool_size 0: a
  cold container per fork, the default pool_size 8 would dequeue a warm one);
- swebench-local: "sandbox" (the inflection repository with its `.git`), pool_size 0 likewise;
- calc-pooled, swebench-local-pooled: the same with a warm pool of 4 (each fork's target is dequeued warm;
  the pool is refilled between samples, outside the timing): the fork proper, a copy of the workdir;
- web-shop: "replay" (a fresh browser sandbox, the shop opened, every turn replayed).

What this is not: a throughput test of many forks at once, or of the fork endpoint's wire (a fork over HTTP
adds a request, like a step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness

from agentrl.env import Env, make
from agentrl.types import Action, ToolCall

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLES = {
    "maze": 200,
    "calc": 10,
    "calc-pooled": 10,
    "swebench-local": 10,
    "swebench-local-pooled": 10,
    "web-shop": 5,
}
POOL_SIZE = 4


def call(name: str, **arguments: Any) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def maze_episode() -> tuple[Env, list[Action], str]:
    from agentrl_maze.levels import make_task

    task = next(t for t in (make_task(4, 1, index) for index in range(100)) if t is not None)
    env = make("agentrl/Maze-v0")
    env.reset(seed=0, options={"task": task})
    return env, [call("move", direction=d) for d in ("down", "right")], "the board state (deep copy)"


def calc_episode(pool_size: int = 0) -> tuple[Env, list[Action], str]:
    env = make("agentrl/Calc-v0", pool_size=pool_size)
    env.reset(options={"task": {"id": "calc-bench", "question": "What is 6 * 7?", "answer": "42"}})
    actions = [call("python", code="open('/work/note', 'w').write('x' * 1000); print(6 * 7)")]
    target = "a warm pooled container" if pool_size else "a cold container"
    return env, actions, f"the episode state and the sandbox ({target} plus a copy of /work)"


def swebench_episode(pool_size: int = 0) -> tuple[Env, list[Action], str]:
    records = [json.loads(line) for line in (REPO / "tasks/swebench-local/train.jsonl").open()]
    record = next(r for r in records if r["repo"] == "pypi/inflection")
    env = make("agentrl/SWEBench-v0", pool_size=pool_size)
    env.reset(options={"task": record})
    actions = [call("bash", command="echo note > NOTE && ls")]
    target = "a warm pooled container" if pool_size else "a cold container"
    return env, actions, f"the episode state and the sandbox ({target} plus the repository and .git)"


def web_episode() -> tuple[Env, list[Action], str]:
    env = make("agentrl/WebShop-v0")
    observation, _ = env.reset(options={"task": {"id": "shop-bench", "seed": 3}})
    first_id = int(observation.split("[", 2)[1].split("]")[0])
    actions = [call("scroll", direction="down"), call("click", element_id=first_id)]
    return env, actions, "a fresh browser sandbox with the reset and every action replayed"


EPISODES: dict[str, Callable[[], tuple[Env, list[Action], str]]] = {
    "maze": maze_episode,
    "calc": calc_episode,
    "calc-pooled": lambda: calc_episode(POOL_SIZE),
    "swebench-local": swebench_episode,
    "swebench-local-pooled": lambda: swebench_episode(POOL_SIZE),
    "web-shop": web_episode,
}


def measure(kind: str, samples: int) -> dict[str, Any]:
    env, actions, what = EPISODES[kind]()
    try:
        for action in actions:
            env.step(action)
        timings = []
        for _ in range(samples):
            wait_for_warm_pools()
            started = time.perf_counter()
            fork = env.fork()
            timings.append((time.perf_counter() - started) * 1000)
            fork.close()
    finally:
        env.close()
    return {
        "fork_p50_ms": round(percentile(timings, 50), 3),
        "fork_p99_ms": round(percentile(timings, 99), 3),
        "samples": samples,
        "capability": env.fork_capability,
        "turns_before_fork": len(actions),
        "what": what,
    }


def wait_for_warm_pools() -> None:
    """Block until every shared sandbox pool is full again (outside the timing)."""
    from agentrl.sandbox import pool

    for shared in list(pool._shared.values()):
        shared.wait_ready(timeout_s=60.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=list(EPISODES), choices=list(EPISODES))
    parser.add_argument("--samples", type=int, default=None, help="forks per kind (default: per kind)")
    harness.add_out_argument(parser, "fork")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2), "kinds": {}}
    for kind in args.kinds:
        results["kinds"][kind] = measure(kind, args.samples or DEFAULT_SAMPLES[kind])
    baseline = "none: absolute fork latencies per env kind, with the load they ran under"
    harness.emit("fork", results, baseline=baseline, out=harness.out_path(args, "fork"), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
