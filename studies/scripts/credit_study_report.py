"""Why a credit-study run learns or does not: per-update and per-evaluation measurements of one run.

    .venv/bin/python studies/scripts/credit_study_report.py runs/credit_study_warm/credit-grpo-seed0-... \
        --out studies/maze-credit/results/credit_study_warm_runs/grpo-seed0.steps.json
    .venv/bin/python studies/scripts/credit_study_report.py \
        --table studies/maze-credit/results/credit_study_warm_runs

What this is: the measurements docs/credit_study.md quotes, read back from a run's `metrics.jsonl` and the
run store (`--store`, else the URL the run's config.yaml names, else the default store; run it from the folder
the run ran in, since the default SQLite path is relative):
- per update: the run's own metrics (train success, invalid-turn rate, zero-variance groups, advantage
  spread, KL moved, entropy, grad norm) and, from the stored turns, the mean and the sum of the advantages
  of valid and of invalid turns (the sum over valid turns is the net push on the call template they share);
- per held-out evaluation, and for each update's train episodes: the direction shares of the valid moves,
  and **move quality**, the share of turns that bring `@` closer to `G` (BFS distance on the task's layout;
  an invalid turn or a wall bump is not progress). A policy that learns to navigate raises it before its
  success rate moves far enough to show on 60 mazes; one that only fixes its format does not.

`--table KEPT_DIR` prints one markdown row per kept run (`NAME.json` with its `NAME.steps.json` beside it):
held-out successes at each checkpoint, train-side means and the worst update's invalid rate, and the move
quality and the four moves' shares of its last held-out evaluation.

What this is not: the study's runner (`studies/scripts/credit_study.py`) or a general run viewer (`agentrl
runs`). Level-1 mazes only (no key or door: the distance ignores them).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from agentrl_maze.levels import DIRECTIONS, parse_layout, solve

from agentrl.store.repository import close_store, list_runs, load_episodes, open_store, resolve_url
from agentrl.tasks import load_tasks

MOVES = tuple(DIRECTIONS)  # up, down, left, right: the env's own order
STEP_KEYS = (
    "success_rate",
    "invalid_turn_rate",
    "completion_tokens_mean",
    "zero_variance_groups",
    "credit/advantage_std",
    "approx_kl",
    "kl",  # to the reference (the start) when loss.kl_coef > 0; absent otherwise
    "entropy",
    "grad_norm",
    "trained_episodes",
)


@dataclass(frozen=True)
class Turn:
    """One stored turn of one episode, with what the report needs."""

    episode: int
    split: str
    step: int
    task_id: str
    board_before: str
    board_after: str
    invalid: bool
    advantage: float | None
    direction: str | None = None  # the move the env read (None for an invalid turn)


def agent_cell(board: str, height: int) -> tuple[int, int] | None:
    """Where `@` is on the last `height` lines of an observation; None if it is not there."""
    rows = board.splitlines()[-height:]
    for row_index, row in enumerate(rows):
        if "@" in row:
            return row_index, row.index("@")
    return None


def distance_to_goal(layout: Sequence[str], cell: tuple[int, int]) -> int | None:
    """BFS moves from `cell` to the goal on `layout` (the start moved to `cell`); None if unreachable."""
    rows = [list(row.replace("@", ".")) for row in layout]
    row, column = cell
    if rows[row][column] == "G":
        return 0
    rows[row][column] = "@"
    path = solve(parse_layout(["".join(r) for r in rows]))
    return None if path is None else len(path)


def made_progress(turn: Turn, layout: Sequence[str]) -> bool:
    """Whether this turn brought `@` closer to `G`."""
    if turn.invalid:
        return False
    before = agent_cell(turn.board_before, len(layout))
    after = agent_cell(turn.board_after, len(layout))
    if before is None or after is None:
        return False
    far, near = distance_to_goal(layout, before), distance_to_goal(layout, after)
    return far is not None and near is not None and near < far


def move_quality(turns: Iterable[Turn], layouts: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Share of turns that made progress, over all turns and over the valid ones, and of episodes whose
    first turn did (every episode has one, on a fresh board, so failing episodes' many turns do not weigh
    more than winning ones')."""
    turns = list(turns)
    progress = {id(turn): made_progress(turn, layouts[turn.task_id]) for turn in turns}
    valid = [turn for turn in turns if not turn.invalid]
    firsts = {turn.episode: turn for turn in reversed(turns)}.values()
    return {
        "turns": float(len(turns)),
        "progress_rate": sum(progress.values()) / len(turns) if turns else 0.0,
        "progress_rate_valid": sum(progress[id(t)] for t in valid) / len(valid) if valid else 0.0,
        "first_turn_progress_rate": sum(progress[id(t)] for t in firsts) / len(firsts) if firsts else 0.0,
    }


def direction_shares(turns: Iterable[Turn]) -> dict[str, float]:
    """Share of each move among the valid turns (a policy stuck on one direction shows here)."""
    moves = [turn.direction for turn in turns if turn.direction]
    if not moves:
        return {}
    return {d: round(moves.count(d) / len(moves), 4) for d in MOVES}


def mean_advantage(turns: Iterable[Turn], invalid: bool) -> float | None:
    values = [t.advantage for t in turns if t.invalid == invalid and t.advantage is not None]
    return sum(values) / len(values) if values else None


def advantage_sum(turns: Iterable[Turn], invalid: bool) -> float:
    """The summed advantage of the valid (or invalid) turns: with every turn's advantage on all its tokens
    and a token-mean loss, the net push on the tokens those turns share (the call template)."""
    return sum(t.advantage for t in turns if t.invalid == invalid and t.advantage is not None)


def load_turns(store_url: str, run_name: str) -> list[Turn]:
    """Every stored turn of the run named `run_name` (its newest run of that name), in order."""
    store = open_store(store_url)
    try:
        run = next((run for run in list_runs(store) if run["name"] == run_name), None)
        if run is None:
            raise SystemExit(f"no run named {run_name!r} in {store_url}; pass the store with --store")
        episodes = load_episodes(store, run["id"])
    finally:
        close_store(store)
    turns = []
    for episode in episodes:
        board = episode["first_observation"] or ""
        for turn in episode["turns"]:
            direction = (turn["info"] or {}).get("direction")
            turns.append(
                Turn(
                    episode["id"], episode["split"], episode["step"], episode["task_id"], board,
                    turn["observation"], bool(turn["invalid"]), turn["advantage"], direction,
                )
            )  # fmt: skip
            if not turn["invalid"]:  # an invalid turn's observation is the note and the unchanged board
                board = turn["observation"]
    return turns


def report(run_dir: Path, store_url: str | None = None) -> dict[str, Any]:
    """The per-update and per-evaluation measurements of the run in `run_dir`."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    url = resolve_url(store_url or (config.get("store") or {}).get("url"))  # relative to the cwd
    tasks = config["tasks"]
    layouts = {
        task["id"]: task["layout"]
        for split in (tasks["train_split"], tasks["eval_split"])
        for task in load_tasks(tasks.get("root") or "tasks", tasks["suite"], split)
    }
    turns = load_turns(url, run_dir.name)
    by_step: dict[tuple[str, int], list[Turn]] = defaultdict(list)
    for turn in turns:
        by_step[(turn.split, turn.step)].append(turn)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = []
    for row in metrics:
        if "eval/success_rate" in row or "success_rate" not in row:
            continue
        step_turns = by_step.get(("train", row["step"]), [])
        updates.append(
            {
                "step": row["step"],
                **{key: row[key] for key in STEP_KEYS if key in row},
                "mean_advantage_valid_turns": mean_advantage(step_turns, invalid=False),
                "mean_advantage_invalid_turns": mean_advantage(step_turns, invalid=True),
                "advantage_sum_valid_turns": advantage_sum(step_turns, invalid=False),
                "advantage_sum_invalid_turns": advantage_sum(step_turns, invalid=True),
                **move_quality(step_turns, layouts),
                "directions": direction_shares(step_turns),
            }
        )
    evaluations = [
        {"step": step, **move_quality(step_turns, layouts), "directions": direction_shares(step_turns)}
        for (split, step), step_turns in sorted(by_step.items())
        if split != "train"
    ]
    return {"run": run_dir.name, "store": url, "updates": updates, "evaluations": evaluations}


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [value for value in values if value is not None]
    return sum(kept) / len(kept) if kept else None


def last_evaluation(steps: Mapping[str, Any]) -> Mapping[str, Any]:
    """The last held-out evaluation of a `report` output ({} when it has none)."""
    evaluations = steps.get("evaluations") or [{}]
    return evaluations[-1]  # type: ignore[no-any-return]


def run_row(name: str, summary: Mapping[str, Any], steps: Mapping[str, Any]) -> dict[str, Any]:
    """One kept run's line of the study's table, from its summary and its `report` output."""
    result = summary["result"]
    updates, last_eval = steps["updates"], last_evaluation(steps)
    invalid = [row.get("invalid_turn_rate") for row in updates]
    return {
        "run": name,
        "held_out": [round(point["success_rate"] * point["episodes"]) for point in result["curve"]],
        "eval_tasks": result["curve"][-1]["episodes"] if result["curve"] else 0,
        "train_success": _mean(row.get("success_rate") for row in updates),
        "invalid_turns": _mean(invalid),
        "worst_invalid": max((value for value in invalid if value is not None), default=None),
        "zero_variance_groups": _mean(row.get("zero_variance_groups") for row in updates),
        "max_kl": max((row["kl"] for row in updates if row.get("kl") is not None), default=None),
        "progress": last_eval.get("progress_rate"),
        "first_move_progress": last_eval.get("first_turn_progress_rate"),
        "directions": last_eval.get("directions", {}),
    }


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


TABLE_HEADER = (
    "run",
    "held out (of N) per checkpoint",
    "train success",
    "invalid turns",
    "worst update",
    "zero-variance groups",
    "max KL to the start",
    "last eval: turns closer to G",
    "first moves closer",
    "up / down / left / right",
)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of `run_row` as a markdown table."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    for row in rows:
        directions = row["directions"]
        cells = [
            row["run"],
            f"{' / '.join(map(str, row['held_out']))} (of {row['eval_tasks']})",
            *(
                _cell(row[key])
                for key in (
                    "train_success",
                    "invalid_turns",
                    "worst_invalid",
                    "zero_variance_groups",
                    "max_kl",
                    "progress",
                    "first_move_progress",
                )
            ),
            " / ".join(_cell(directions.get(move)) for move in MOVES),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def kept_rows(kept_dir: Path) -> list[dict[str, Any]]:
    """`run_row` of every kept run in `kept_dir` that has its steps file, by name."""
    rows = []
    for steps_path in sorted(kept_dir.glob("*.steps.json")):
        name = steps_path.name.removesuffix(".steps.json")
        summary_path = kept_dir / f"{name}.json"
        if summary_path.is_file():
            summary, steps = json.loads(summary_path.read_text()), json.loads(steps_path.read_text())
            rows.append(run_row(name, summary, steps))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?", help="the run's folder (runs_dir/NAME)")
    parser.add_argument("--table", type=Path, metavar="KEPT_DIR", help="print the kept runs' markdown table")
    parser.add_argument("--store", help="the store URL, when the run's config.yaml does not name it")
    parser.add_argument("--out", type=Path, help="write the JSON here (else print it)")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(kept_rows(args.table)))
        return 0
    if args.run_dir is None:
        parser.error("give a run folder, or --table KEPT_DIR")
    result = json.dumps(report(args.run_dir, args.store), indent=1) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(result)
    else:
        print(result, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
