"""Benchmark: the viewer's page times on a large generated store; writes ONE JSON object.

    .venv/bin/python bench/viewer.py            # 100,000 episodes, 1,000,000 turns (a few minutes to build)
    .venv/bin/python bench/viewer.py --quick    # 2,000 episodes (a smoke run: seconds), viewer_quick.json
    .venv/bin/python bench/viewer.py --store /tmp/viewer.db   # keep (or reuse) the generated store

The store: one SQLite file made by `open_store` (so at the newest migration, with its indexes), filled
with SQLAlchemy core `executemany` inserts: one large run (steps of 16 task groups x 8 episodes, a held-out
evaluation of 64 episodes every 25 steps, 10 turns per episode, 20 metrics per step) and 9 small runs with
metrics only (so the runs list has rows to summarise). Turn text and observations are synthetic with a
realistic size (an assistant turn of about 300-700 characters with a tool call, an observation of about
100-600, a first observation of about 300). `ANALYZE` is not run: the app meets the store as training
left it.

The measurement: the real app (`agentrl.ui.app.create_app`) in-process through Starlette's TestClient,
`--repeats` rounds each requesting every page once (round-robin, so a change of machine load hits all
pages alike; the step and episode change from round to round), after one warm-up round. Pages: the runs
list, the large run, a training step, an evaluation step, an episode, a task-id search and a text search
(the last two not part of the target). Keys: `episodes`, `turns`, `db_mb`, `build_s`, `pages` ({page:
{"p50_ms", "p95_ms", "max_ms", "bytes"}}, nearest-rank percentiles), `target_p95_ms` (300, issue 45) and
`met` (every target page's p95 at or under it), `cpu_flags`, `load_avg_start` / `load_avg_end`, `command`.

What this is not: a browser measurement (no rendering, no network): it times the server's answer only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness
from fastapi.testclient import TestClient
from sqlalchemy import insert

from agentrl.cpu import speed_flags
from agentrl.store.models import EpisodeRow, MetricRow, Run, TurnRow
from agentrl.store.repository import Store, close_store, count_rows, open_store
from agentrl.ui.app import create_app

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TARGET_P95_MS = 300.0
TARGET_PAGES = ("runs_list", "run", "train_step", "eval_step", "episode")
GROUPS, GROUP_SIZE, EVAL_EPISODES, EVAL_EVERY, TURNS = 16, 8, 64, 25, 10
METRICS = (
    "reward_mean", "success_rate", "infra_failures", "invalid_turn_rate", "kl", "entropy", "loss",
    "grad_norm", "clip_fraction", "learning_rate", "tokens_per_s", "episodes_per_s", "step_s",
    "credit/anchor_hit_rate", "credit/advantage_std", "credit/zero_advantage_rate", "eval/success_rate",
    "eval/mean_reward", "rollout_s", "update_s",
)  # fmt: skip
CHUNK = 20_000  # rows per executemany


@dataclass(frozen=True)
class Shape:
    """How many episodes the large run has and where its steps fall."""

    episodes: int

    def steps(self) -> Iterator[tuple[int, str, int]]:
        """(step, split, episodes) in recording order until `episodes` are placed."""
        left, step = self.episodes, 0
        while left > 0:
            if step % EVAL_EVERY == 0:
                count = min(left, EVAL_EPISODES)
                yield step, "eval", count
                left -= count
            if step > 0 and left > 0:
                count = min(left, GROUPS * GROUP_SIZE)
                yield step, "train", count
                left -= count
            step += 1


# --- synthetic text ----------------------------------------------------------------------------------

REASONING = (
    "Let me look at the numbers again before I answer. ",
    "The previous output shows the intermediate value, so I will check it with a second computation. ",
    "I should not guess: running the code is cheaper than being wrong, and the tool prints exact values. ",
    "The error says the tool call was malformed; I will write the JSON arguments carefully this time. ",
)


def assistant_text(rng: random.Random, task: int, turn: int) -> str:
    thoughts = "".join(rng.choice(REASONING) for _ in range(rng.randint(1, 4)))
    values = ", ".join(str(rng.randint(1, 999)) for _ in range(rng.randint(4, 30)))
    code = f"values = [{values}]\nprint(sum(values) % {task + 7})"
    call = json.dumps({"name": "python", "arguments": {"code": code}})
    return f"{thoughts}Step {turn} for task {task}.\n<tool_call>\n{call}\n</tool_call>"


def observation(rng: random.Random, turn: int) -> str:
    lines = [f"{rng.randint(0, 10**6)} " * rng.randint(2, 12) for _ in range(rng.randint(1, 6))]
    return f"[exit 0 after turn {turn}]\n" + "\n".join(lines)


def first_observation(task: int) -> str:
    return (
        f"Task calc-{task}: compute the value the checker asks for, using the python tool to run code, then "
        "call submit with the answer as a plain number. You have ten turns; an invalid tool call costs a "
        "turn. The numbers are in the table below.\n" + " ".join(str(task * k % 997) for k in range(40))
    )


# --- building the store ------------------------------------------------------------------------------


def create_runs(store: Store, shape: Shape) -> str:
    """The large run and 9 small ones (metrics only); returns the large run's id."""
    now = datetime.now(UTC)
    config = {"model": {"name": "bench-model"}, "credit": {"estimator": "gigpo"}, "group_size": GROUP_SIZE}
    runs = [
        {"id": f"{index:032x}", "name": f"bench-{index}", "task": "calc", "config": config,
         "status": "finished", "created_at": now - timedelta(hours=index), "finished_at": now}
        for index in range(10)
    ]  # fmt: skip
    runs[0] |= {"name": "bench-large", "status": "running", "finished_at": None}
    last_step = max(step for step, _, _ in shape.steps())
    metrics = [
        {"run_id": run["id"], "step": step, "name": name, "value": (step % 97) / 97.0}
        for run in runs
        for step in range(last_step + 1 if run is runs[0] else 50)
        for name in METRICS
    ]
    with store.engine.begin() as connection:
        connection.execute(insert(Run), runs)
        for start in range(0, len(metrics), CHUNK):
            connection.execute(insert(MetricRow), metrics[start : start + CHUNK])
    return str(runs[0]["id"])


def episode_rows(
    run_id: str, shape: Shape, seed: int
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(episode row, its turn rows) for every episode of the large run, ids from 1."""
    rng = random.Random(seed)
    episode_id = 0
    for step, split, count in shape.steps():
        for member in range(count):
            episode_id += 1
            group = member // GROUP_SIZE if split == "train" else member
            task = (step * 31 + group) % 5000
            turns = [turn_row(rng, episode_id, task, t, split) for t in range(TURNS)]
            success = rng.random() < 0.4
            episode = {
                "id": episode_id, "uid": f"{split}-{step}-{member}", "run_id": run_id, "step": step,
                "split": split, "env_id": "agentrl/Calc-v0", "task_id": f"calc-{task}",
                "group_id": f"{split}-{step}-g{group}", "seed": member, "reward": float(success),
                "success": success, "stop_reason": "infra_error" if rng.random() < 0.01 else "terminated",
                "error": None, "num_turns": TURNS, "invalid_turns": sum(t["invalid"] for t in turns),
                "initial_state_key": f"calc-{task}:start", "first_observation": first_observation(task),
                "attempts": 1, "parent_uid": None, "branch_turn": None, "created_at": datetime.now(UTC),
            }  # fmt: skip
            yield episode, turns


def turn_row(rng: random.Random, episode_id: int, task: int, index: int, split: str) -> dict[str, Any]:
    invalid = rng.random() < 0.05
    return {
        "episode_id": episode_id, "index": index, "text": assistant_text(rng, task, index),
        "observation": observation(rng, index), "prompt_tokens": 400 if index == 0 else 60,
        "completion_tokens": rng.randint(60, 200), "reward": 1.0 if index == TURNS - 1 else 0.0,
        "advantage": None if split == "eval" else round(rng.gauss(0, 1), 4),
        "state_key": f"calc-{task}:{index}:{rng.randint(0, 2)}", "invalid": invalid,
        "tool_name": None if invalid else "python",
        "info": {"exit_code": 0, "timed_out": False, "duration_s": round(rng.random() / 10, 3)},
    }  # fmt: skip


def build_store(store: Store, shape: Shape, seed: int = 0) -> str:
    """Fill an empty store; returns the large run's id."""
    run_id = create_runs(store, shape)
    episodes: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    with store.engine.begin() as connection:
        for episode, rows in episode_rows(run_id, shape, seed):
            episodes.append(episode)
            turns += rows
            if len(turns) >= CHUNK:
                flush(connection, episodes, turns)
        flush(connection, episodes, turns)
    return run_id


def flush(connection: Any, episodes: list[dict[str, Any]], turns: list[dict[str, Any]]) -> None:
    if episodes:
        connection.execute(insert(EpisodeRow), episodes)
    if turns:
        connection.execute(insert(TurnRow), turns)
    episodes.clear()
    turns.clear()


# --- measuring ---------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def page_urls(run_id: str, shape: Shape, rng: random.Random) -> dict[str, str]:
    """One URL per page; the step, the episode and the searched task drawn anew each round."""
    steps = list(shape.steps())
    train = [step for step, split, _ in steps if split == "train"]
    evals = [step for step, split, _ in steps if split == "eval"]
    base = f"/runs/{run_id}"
    return {
        "runs_list": "/",
        "run": base,
        "train_step": f"{base}/steps/{rng.choice(train)}?split=train",
        "eval_step": f"{base}/steps/{rng.choice(evals)}?split=eval",
        "episode": f"{base}/episodes/{rng.randint(1, shape.episodes)}",
        "task_search": f"{base}/search?task=calc-{rng.randint(0, 4999)}",
        "text_search": f"{base}/search?q=print(sum",
    }


def measure(client: TestClient, run_id: str, shape: Shape, repeats: int) -> dict[str, dict[str, float]]:
    rng = random.Random(1)
    times: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for round_index in range(repeats + 1):  # round 0 warms up
        for page, url in page_urls(run_id, shape, rng).items():
            start = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - start) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
            if round_index:
                times.setdefault(page, []).append(elapsed)
                sizes[page] = len(response.content)
    return {
        page: {
            "p50_ms": round(percentile(values, 0.5), 1),
            "p95_ms": round(percentile(values, 0.95), 1),
            "max_ms": round(max(values), 1),
            "bytes": sizes[page],
        }
        for page, values in times.items()
    }


def run_bench(path: Path, episodes: int, repeats: int) -> dict[str, Any]:
    shape = Shape(episodes)
    url = f"sqlite:///{path}"
    fresh = not path.exists()
    started = time.perf_counter()
    store = open_store(url)
    run_id = build_store(store, shape) if fresh else f"{0:032x}"
    build_s = time.perf_counter() - started
    counts = count_rows(store)
    close_store(store)
    if counts["episodes"] != episodes:
        raise SystemExit(
            f"{path} holds {counts['episodes']} episodes, not {episodes}: remove it or pass another"
        )
    result: dict[str, Any] = {
        "episodes": counts["episodes"],
        "turns": counts["turns"],
        "runs": counts["runs"],
        "metrics": counts["metrics"],
        "db_mb": round(path.stat().st_size / 2**20, 1),
        "build_s": round(build_s, 1) if fresh else None,
        "repeats": repeats,
        "load_avg_start": list(os.getloadavg()),
        "cpu_flags": speed_flags(),
    }
    with TestClient(create_app(url)) as client:
        result["pages"] = measure(client, run_id, shape, repeats)
    result["load_avg_end"] = list(os.getloadavg())
    result["target_p95_ms"] = TARGET_P95_MS
    result["met"] = all(result["pages"][page]["p95_ms"] <= TARGET_P95_MS for page in TARGET_PAGES)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 episodes and 5 rounds")
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=40, help="timed rounds (each requests every page)")
    parser.add_argument("--store", type=Path, help="SQLite file to build, or reuse when it exists")
    parser.add_argument("--out", type=Path, help="default: bench/results/viewer.json (or viewer_quick.json)")
    args = parser.parse_args()
    episodes, repeats = (2_000, 5) if args.quick else (args.episodes, args.repeats)
    with tempfile.TemporaryDirectory(prefix="viewer-bench-") as scratch:
        result = run_bench(args.store or Path(scratch) / "viewer.db", episodes, repeats)
    out = args.out or RESULTS / ("viewer_quick.json" if args.quick else "viewer.json")
    harness.emit("viewer", result, baseline="none: page times on a generated store, with its size", out=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
