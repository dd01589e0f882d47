"""Does a model's first maze move follow the goal? Exact first-move probabilities on the held-out mazes.

    .venv/bin/python studies/scripts/maze_goal_probe.py \
        --models smollm2-135m-instruct,runs/credit_study_warm/warm-start-dfcd158e-sft/final
    # -> studies/maze-credit/results/maze_goal_probe.json

What this is: for each held-out level-1 maze, the first prompt exactly as the runner renders it (the env
with the credit study's run config, `configs/maze.yaml` with `credit_study.StudyConfig.overrides`: the
coordinate line and the strict parser; `render_first_prompt` with the env's tools and few-shot examples
and the config's instructions), then the teacher-forced log-probability, at the sampling temperature, of
each of the four `move` calls written as the scripted demonstrations write them (`demos.turn_text`;
sampling stops at `</tool_call>`). Normalised over the four calls, that is the model's exact first-move
distribution given a valid call, with no sampling noise. Reported per model:
- `closer_mass`: the mean over mazes of the probability on the moves that shorten the BFS path to G (what
  the study's sampled "first moves closer to G" estimates); `random_closer` is the same for uniform moves;
- `goal_response`: for each direction d, the mean P(d) over mazes where d is a closer move minus the mean
  P(d) over mazes where it is not, averaged over the four directions. A policy that ignores the goal has 0
  whatever its lean; one that reads the goal has up to 1. With a 95% bootstrap band over mazes;
- `direction_mass`: the mean P(d) per direction (the lean), and `call_mass`: the mean total probability of
  the four calls at temperature 1 (how much of the model's first turn these four calls are).

What this is not: a success measurement (that is the study's evaluation) or a look at later turns.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from agentrl_maze.env import MazeEnv
from agentrl_maze.levels import DIRECTIONS as MOVES
from agentrl_maze.levels import initial_state, move, parse_layout

from agentrl.agent.prompting import render_first_prompt
from agentrl.config import RunConfig, load_config
from agentrl.cpu import speed_flags
from agentrl.demos import turn_text
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.tasks import load_tasks
from agentrl.trainer.shared_prefix import shared_prefix_logits
from agentrl.types import Action, ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit_study import StudyConfig  # noqa: E402
from credit_study_report import distance_to_goal  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DIRECTIONS = tuple(MOVES)  # up, down, left, right


@dataclass(frozen=True)
class ProbeConfig:
    """Everything the probe runs; every default lives here."""

    models: tuple[str, ...] = ("smollm2-135m-instruct",)
    suite: str = "maze/level1"
    split: str = "heldout"
    overrides: tuple[str, ...] = StudyConfig().overrides  # the credit study's run config (its env kwargs)
    temperature: float = 0.8  # the study's sampling temperature
    bootstrap: int = 2000
    limit: int | None = None  # the first N mazes only (a smoke test); None: all
    out: Path = ROOT / "studies" / "maze-credit" / "results" / "maze_goal_probe.json"


def closer_moves(layout: Sequence[str]) -> frozenset[str]:
    """The first moves that shorten the BFS path from the start to G (a wall bump does not)."""
    board = parse_layout(layout)
    start = initial_state(board)
    here = distance_to_goal(layout, start.position)
    found = set()
    for direction in DIRECTIONS:
        state, _ = move(board, start, direction)
        there = distance_to_goal(layout, state.position)
        if here is not None and there is not None and there < here:
            found.add(direction)
    return frozenset(found)


def normalised(logprobs: Mapping[str, float]) -> dict[str, float]:
    """The four calls' log-probabilities as a distribution over directions."""
    top = max(logprobs.values())
    weights = {d: math.exp(value - top) for d, value in logprobs.items()}
    total = sum(weights.values())
    return {d: weight / total for d, weight in weights.items()}


def goal_response(rows: Sequence[tuple[Mapping[str, float], frozenset[str]]]) -> float | None:
    """Mean over directions of E[P(d) | d closer] - E[P(d) | d not closer] (directions seen both ways)."""
    gaps = []
    for d in DIRECTIONS:
        inside = [probs[d] for probs, closer in rows if d in closer]
        outside = [probs[d] for probs, closer in rows if d not in closer]
        if inside and outside:
            gaps.append(sum(inside) / len(inside) - sum(outside) / len(outside))
    return sum(gaps) / len(gaps) if gaps else None


def closer_mass(rows: Sequence[tuple[Mapping[str, float], frozenset[str]]]) -> float:
    return sum(sum(probs[d] for d in closer) for probs, closer in rows) / len(rows)


def bootstrap_band(
    rows: Sequence[tuple[Mapping[str, float], frozenset[str]]], statistic: Any, draws: int, seed: int = 0
) -> tuple[float, float]:
    """A 95% percentile band of `statistic` over mazes resampled with replacement ((nan, nan) when no
    resample has a value)."""
    rng = random.Random(seed)
    values = sorted(
        value
        for value in (statistic([rng.choice(rows) for _ in rows]) for _ in range(draws))
        if value is not None
    )
    if not values:
        return math.nan, math.nan
    return values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]


@torch.no_grad()
def call_logprobs(
    model: Any, prompt: Sequence[int], calls: Mapping[str, Sequence[int]], temperatures: Sequence[float]
) -> dict[float, dict[str, float]]:
    """{T: {direction: log P_T(call | prompt)}}, from one shared-prefix forward (the trainer's): the prompt
    but its last token runs once; each row is that token and one call, right-padded."""
    names = list(calls)
    longest = max(len(ids) for ids in calls.values())
    rows = torch.zeros(len(names), longest + 1, dtype=torch.long)
    mask = torch.zeros_like(rows)
    for index, name in enumerate(names):
        row = [prompt[-1], *calls[name]]
        rows[index, : len(row)] = torch.tensor(row)
        mask[index, : len(row)] = 1
    logits = shared_prefix_logits(model, torch.tensor([list(prompt[:-1])]), rows, mask).float()
    result: dict[float, dict[str, float]] = {t: {} for t in temperatures}
    for index, name in enumerate(names):
        count = len(calls[name])
        target = rows[index, 1 : count + 1]
        for t in temperatures:
            logp = torch.log_softmax(logits[index, :count] / t, dim=-1).gather(1, target[:, None]).sum()
            result[t][name] = float(logp)
    return result


def probe_model(config: ProbeConfig, run: RunConfig, name: str) -> dict[str, Any]:
    """The probe's measurements of one model on every maze of the split, with `run`'s env and prompt."""
    model, tokenizer = load_model(ModelConfig(name=name))
    model.eval()
    env = MazeEnv(**run.env.kwargs)
    tools = [dict(spec) for spec in env.tools]  # as the env service sends them
    calls = {
        d: tokenizer.encode(
            turn_text(Action(text="", tool_calls=(ToolCall("move", {"direction": d}),))),
            add_special_tokens=False,
        )
        for d in DIRECTIONS
    }
    rows, mass = [], []
    started = time.perf_counter()
    for task in load_tasks(ROOT / "tasks", config.suite, config.split)[: config.limit]:
        observation, _ = env.reset(options={"task": task})
        prompt = render_first_prompt(tokenizer, tools, env.examples, observation, run.rollout.instructions)
        scores = call_logprobs(model, prompt, calls, (config.temperature, 1.0))
        rows.append((normalised(scores[config.temperature]), closer_moves(task["layout"])))
        mass.append(sum(math.exp(value) for value in scores[1.0].values()))
    seconds = time.perf_counter() - started
    return {
        "model": name,
        "mazes": len(rows),
        "closer_mass": closer_mass(rows),
        "closer_mass_band": bootstrap_band(rows, closer_mass, config.bootstrap),
        "random_closer": sum(len(closer) / 4 for _, closer in rows) / len(rows),
        "goal_response": goal_response(rows),
        "goal_response_band": bootstrap_band(rows, goal_response, config.bootstrap),
        "direction_mass": {d: sum(probs[d] for probs, _ in rows) / len(rows) for d in DIRECTIONS},
        "call_mass": sum(mass) / len(mass),
        "seconds": round(seconds, 1),
    }


def parse_args(argv: Sequence[str] | None) -> ProbeConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", help="comma-separated model aliases, hub ids or folders")
    parser.add_argument("--out", type=Path, help="the JSON to write")
    parser.add_argument("--limit", type=int, help="the first N mazes only (a smoke test)")
    args = parser.parse_args(argv)
    models = tuple(m for m in (args.models or "").split(",") if m) or None
    changes = {"models": models, "out": args.out, "limit": args.limit}
    return replace(ProbeConfig(), **{key: value for key, value in changes.items() if value is not None})


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    run = load_config("maze", config.overrides)
    results = []
    for name in config.models:
        results.append(probe_model(config, run, name))
        print(json.dumps(results[-1]), file=sys.stderr)
    report = {
        "command": "studies/scripts/maze_goal_probe.py --models "
        + ",".join(config.models)
        + (f" --limit {config.limit}" if config.limit else ""),
        "env_kwargs": dict(run.env.kwargs),
        "temperature": config.temperature,
        "cpu_flags": speed_flags(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "results": results,
    }
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {config.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
