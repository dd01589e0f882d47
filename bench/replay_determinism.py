"""Whether an env reaches the same step results again when an episode's actions are replayed into a fresh
env reset the same way: what a tree rollout's re-played branch checks
(`agentrl/agent/tree_replay.py::reopen`); writes bench/results/replay_determinism.json and prints it.

    .venv/bin/python bench/replay_determinism.py                   # every kind that is installed
    .venv/bin/python bench/replay_determinism.py --kinds maze calc

Each case resets two fresh envs with the same task and seed (as the env service does), takes the same
scripted actions in both and compares every step's result the way `reopen` does: the observation, reward,
`terminated`, `truncated` and state key (the reset's observation and state key first). `repeats` pairs
are compared; `identical` counts the pairs that matched at every step, and `first_difference` names the
first field that differed in a pair that did not. Also `load_avg_1m` at the start.
- maze (copy): random moves on 20 level-2 held-out layouts;
- search (copy): BM25 searches on the pydoc corpus;
- calc (sandbox): python that computes and writes a file; python that prints the clock; unseeded random;
- swebench-local (sandbox): reads, an edit, `git log`, a pytest run (its summary prints the duration), the
  clock;
- web-shop, web-miniwob (replay): a scroll and three clicks.

What this is not: a proof that an env is deterministic (a case that matched may differ on other actions),
or a timing: a tree re-plays a branch only after checking every step of its own prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import harness

from agentrl.agent.prompting import format_tool_call
from agentrl.env import make
from agentrl.types import Action, ToolCall

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("observation", "reward", "terminated", "truncated", "state_key")


def act(name: str, **arguments: Any) -> Action:
    call = ToolCall(name, arguments)
    return Action(format_tool_call(call), (call,))


def first_task(path: str) -> dict[str, Any]:
    with (REPO / path).open() as lines:
        task: dict[str, Any] = json.loads(lines.readline())
    return task


def play(
    env_id: str, kwargs: dict[str, Any], task: dict[str, Any], seed: int, actions: Sequence[Action]
) -> list[tuple[Any, ...]]:
    """The reset's (observation, state key) and each step's `FIELDS`, until the episode ends."""
    env = make(env_id, **kwargs)
    try:
        observation, info = env.reset(seed=seed, options={"task": task})
        results: list[tuple[Any, ...]] = [(observation, info.get("state_key"))]
        for action in actions:
            step = env.step(action)
            results.append((*step[:4], step.info.get("state_key")))
            if step.terminated or step.truncated:
                break
        return results
    finally:
        env.close()


def difference(first: list[tuple[Any, ...]], second: list[tuple[Any, ...]]) -> str | None:
    """Where two plays first differ ("reset: FIELD", "step N: FIELD", "length"), or None."""
    for index, (a, b) in enumerate(zip(first, second, strict=False)):
        names = ("observation", "state_key") if index == 0 else FIELDS
        for name, x, y in zip(names, a, b, strict=True):
            if x != y:
                return f"{'reset' if index == 0 else f'step {index}'}: {name}"
    return None if len(first) == len(second) else "length"


def case(
    env_id: str, task: dict[str, Any], actions: Sequence[Action], repeats: int = 1, **kwargs: Any
) -> dict[str, Any]:
    """`repeats` pairs of plays of `actions`, compared."""
    differences = [
        difference(play(env_id, kwargs, task, 3, actions), play(env_id, kwargs, task, 3, actions))
        for _ in range(repeats)
    ]
    found = [d for d in differences if d is not None]
    return {
        "steps": len(actions),
        "repeats": repeats,
        "identical": repeats - len(found),
        "first_difference": found[0] if found else None,
    }


def maze() -> dict[str, Any]:
    rng = random.Random(0)
    moves = [
        [act("move", direction=rng.choice(["up", "down", "left", "right"])) for _ in range(12)]
        for _ in range(20)
    ]
    with (REPO / "envs/maze/agentrl_maze/data/tasks/maze/level2/heldout.jsonl").open() as lines:
        tasks = [json.loads(line) for line in lines][:20]
    cases = [case("agentrl/Maze-v0", task, steps) for task, steps in zip(tasks, moves, strict=False)]
    return {
        "random moves": {
            "steps": 12,
            "repeats": len(cases),
            "identical": sum(c["identical"] for c in cases),
            "first_difference": next((c["first_difference"] for c in cases if c["first_difference"]), None),
        }
    }


def search() -> dict[str, Any]:
    task = first_task("envs/search/agentrl_search/data/tasks/search-pydoc/heldout.jsonl")
    queries = ["list sort key", "dictionary get default", task["question"][:60]]
    return {
        "bm25 searches": case(
            "agentrl/Search-v0", task, [act("search", query=q) for q in queries], format="tools"
        )
    }


def calc() -> dict[str, Any]:
    task = first_task("envs/calc/agentrl_calc/data/tasks/calc/heldout.jsonl")
    codes = {
        "compute and write a file": [
            "print(610 * 30)",
            "open('a.txt', 'w').write('x'); print(open('a.txt').read())",
        ],
        "print the clock": ["import time; print(time.time())"],
        "unseeded random": ["import random; print(random.random())"],
    }
    return {
        name: case("agentrl/Calc-v0", task, [act("python", code=code) for code in steps], pool_size=0)
        for name, steps in codes.items()
    }


def swebench() -> dict[str, Any]:
    task = first_task("envs/swebench/agentrl_swebench/data/tasks/swebench-local/heldout.jsonl")
    commands = {
        "read": (["ls", "grep -n 'def singularize' -r . | head -3"], 1),
        "edit": (["sed -i 's/^/ /' README* && echo ok"], 1),
        "git log": (["git log -1 --format='%H %cd'"], 1),
        "pytest run": (["python3 -m pytest -q test_inflection.py 2>&1 | tail -1"], 4),
        "print the clock": (["date +%s%N"], 1),
    }
    return {
        name: case("agentrl/SWEBench-v0", task, [act("bash", command=c) for c in steps], repeats)
        for name, (steps, repeats) in commands.items()
    }


def web(env_id: str, path: str) -> dict[str, Any]:
    clicks = [act("scroll", direction="down"), *(act("click", element_id=i) for i in (3, 5, 8))]
    return {"scroll and clicks": case(env_id, first_task(path), clicks)}


KINDS = {
    "maze": maze,
    "search": search,
    "calc": calc,
    "swebench-local": swebench,
    "web-shop": lambda: web("agentrl/WebShop-v0", "envs/web/agentrl_web/data/tasks/web-shop/heldout.jsonl"),
    "web-miniwob": lambda: web(
        "agentrl/WebMiniWob-v0", "envs/web/agentrl_web/data/tasks/web-miniwob/heldout.jsonl"
    ),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    harness.add_out_argument(parser, "replay_determinism")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"load_avg_1m": os.getloadavg()[0], "kinds": {}}
    for kind in args.kinds:
        report["kinds"][kind] = KINDS[kind]()
        print(kind, json.dumps(report["kinds"][kind]), flush=True)
    baseline = "none: whether each env repeats its step results, not a speed"
    out = harness.out_path(args, "replay_determinism")
    harness.emit("replay_determinism", report, baseline=baseline, out=out, argv=argv)


if __name__ == "__main__":
    main()
