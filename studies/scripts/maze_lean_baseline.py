"""How much of a maze run's held-out success a blind lean explains: a mover with the run's move shares.

    .venv/bin/python studies/scripts/maze_lean_baseline.py \
        studies/maze-credit/results/credit_study_warm_runs/*.steps.json \
        studies/maze-credit/results/credit_study_warm_seqmean_runs/grpo-seed0.steps.json
    # -> a markdown table on stdout, and studies/maze-credit/results/maze_lean_baseline.json

What this is: for each `*.steps.json` (from `studies/scripts/credit_study_report.py`), the direction shares of
the run's last held-out evaluation (the moves its valid turns made) and, for a mover that draws every move
independently from those shares and never looks at the board, its success on the 60 held-out level-1
mazes through the env's own dynamics (`agentrl_maze.levels.move`, walls included, `max_steps` moves), over
`plays` plays per maze. A run whose success is near its lean's has not shown that it reads the board; one
far above it has. Uniform shares give the random mover the study quotes.

What this is not: a policy the study trains, or an account of invalid turns (the mover makes none, so it is
an upper bound for a run that lost turns to them).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl_maze.levels import DIRECTIONS as MOVES
from agentrl_maze.levels import initial_state, move, parse_layout

from agentrl.config import load_config
from agentrl.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit_study import StudyConfig  # noqa: E402
from credit_study_report import last_evaluation  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DIRECTIONS = tuple(MOVES)  # up, down, left, right
UNIFORM = {d: 0.25 for d in DIRECTIONS}


def lean_success(
    layouts: Sequence[Sequence[str]], shares: Mapping[str, float], plays: int, max_steps: int, seed: int = 0
) -> float:
    """The success rate of an i.i.d. mover with `shares` over `plays` plays of each layout."""
    rng = random.Random(seed)
    weights = [shares.get(d, 0.0) for d in DIRECTIONS]
    won = 0
    for layout in layouts:
        board = parse_layout(layout)
        for _ in range(plays):
            state = initial_state(board)
            for direction in rng.choices(DIRECTIONS, weights, k=max_steps):
                state, event = move(board, state, direction)
                if event == "goal":
                    won += 1
                    break
    return won / (plays * len(layouts))


def last_shares(steps: Mapping[str, Any]) -> dict[str, float]:
    """The move shares of a run's last held-out evaluation ({} when it made no valid move)."""
    shares = last_evaluation(steps).get("directions") or {}
    return dict(shares) if sum(shares.values()) > 0 else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("steps", type=Path, nargs="+", help="*.steps.json files of credit_study_report")
    parser.add_argument("--plays", type=int, default=200, help="plays per maze (default 200)")
    parser.add_argument("--max-steps", type=int, help="moves per play (default: the study's env's max_steps)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "studies" / "maze-credit" / "results" / "maze_lean_baseline.json"
    )
    args = parser.parse_args(argv)
    if args.max_steps is None:
        args.max_steps = int(load_config("maze", StudyConfig().overrides).env.kwargs["max_steps"])
    layouts = [task["layout"] for task in load_tasks(ROOT / "tasks", "maze/level1", "heldout")]
    named: list[tuple[str, dict[str, float]]] = [("uniformly random moves", dict(UNIFORM))]
    for path in args.steps:
        name = f"{path.parent.name}/{path.name.removesuffix('.steps.json')}"
        named.append((name, last_shares(json.loads(path.read_text()))))
    print("| run | move shares up / down / left / right | lean mover's held-out success |")
    print("|---|---|---|")
    rows: list[dict[str, Any]] = []
    for name, shares in named:
        success = lean_success(layouts, shares, args.plays, args.max_steps) if shares else None
        rows.append({"run": name, "shares": shares, "lean_success": success})
        cells = " / ".join(f"{shares.get(d, 0.0):.2f}" for d in DIRECTIONS) if shares else "(no valid move)"
        print(f"| {name} | {cells} | {'' if success is None else f'{success:.3f}'} |")
    report = {"plays": args.plays, "max_steps": args.max_steps, "mazes": len(layouts), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
