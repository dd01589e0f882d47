"""Per problem level, how often each training run of a calc-chain study got a part right, step by step.

    .venv/bin/python studies/scripts/calc_chain_levels.py --study calc-chain-s4m-compare \
        --page docs/credit_study.md
    # -> studies/calc-chain-s4m-compare/results/levels-train.json and the page's levels block

calc-chain-s4m mixes two sizes of question in one wording: level 3 ("had a * b, shipped c * d", two
products) and level 4 ("..., and lost e * f", three). A run can learn one and lose the other, and its mean
per-part success hides which. This script reads every training episode the study's store holds for each
planned (arm, seed) run (all of its resumed segments), splits each episode into parts (`info["part"]`) and
counts, per training step and level, the parts played, the parts right (`info["part_correct"]`), and the
parts whose first python call left a product out (`calc_chain_failures.first_call`'s `term_dropped`). The
steps are placed on the run's env-step axis by its `metrics.jsonl` (`env_steps_total`; the committed copy in
`results/metrics/` when the run folder is gone) and summed over the windows between the study's evaluation
points. The table also carries each run's final greedy held-out share per level when
`results/failures-<set>.json` (`calc_chain_failures.py --study`) holds it.

What this is not: an evaluation (training batches are sampled at the training temperature, from whichever
chains each step drew, so a window's counts differ in size and mix), or a statistic of the study: the
pre-named statistics are `agentrl study report`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.evidence import replace_block
from agentrl.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calc_chain_failures import first_call, stored_episode, turns_by_part  # noqa: E402
from credit_study import code_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def step_counts(
    episodes: Sequence[tuple[int, Any]], tasks: Mapping[str, Mapping[str, Any]], parts: int
) -> dict[int, dict[str, Counter[str]]]:
    """Per training step, per level (as a string): parts, right and term_dropped counts; pure. `episodes`
    are (step, stored episode) pairs; an infrastructure failure or an unknown task is left out."""
    counts: dict[int, dict[str, Counter[str]]] = {}
    for step, episode in episodes:
        task = tasks.get(episode.task_id)
        if task is None or episode.is_infra_failure:
            continue
        for part, turns in enumerate(turns_by_part(episode, parts)):
            level = str(task["levels"][part])
            counter = counts.setdefault(step, {}).setdefault(level, Counter())
            counter["parts"] += 1
            counter["right"] += any(turn.info.get("part_correct") is True for turn in turns)
            scored = first_call(turns, task["expressions"][part], task["answers"][part])
            counter["term_dropped"] += scored["expression"] == "term_dropped"
    return counts


def windows(
    counts: Mapping[int, Mapping[str, Counter[str]]], env_steps: Mapping[int, float], edges: Sequence[float]
) -> list[dict[str, Any]]:
    """The step counts summed over env-step windows (0, edges[0]], (edges[0], edges[1]], ...; a step past
    the last edge joins the last window); pure. Each window: its bounds, steps, and per level its counts
    with the share right."""
    out: list[dict[str, Any]] = []
    low = 0.0
    for index, high in enumerate(edges):
        last = index == len(edges) - 1
        chosen = [
            step
            for step in sorted(counts)
            if step in env_steps and env_steps[step] > low and (last or env_steps[step] <= high)
        ]
        levels: dict[str, Counter[str]] = {}
        for step in chosen:
            for level, counter in counts[step].items():
                levels.setdefault(level, Counter()).update(counter)
        out.append(
            {
                "env_steps": [low, high],
                "steps": chosen,
                "levels": {
                    level: {**dict(counter), "share_right": counter["right"] / counter["parts"]}
                    for level, counter in sorted(levels.items())
                },
            }
        )
        low = high
    return out


def metrics_env_steps(path: Path) -> dict[int, float]:
    """Step -> env steps played by its end, from a run's metrics.jsonl (a step logged twice: the last)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {int(row["step"]): float(row["env_steps_total"]) for row in rows if "env_steps_total" in row}


def level_table(runs: Mapping[str, Mapping[str, Any]], edges: Sequence[float]) -> str:
    """The Markdown table: a row per run, per window the share right on level 3 and level 4 parts (parts
    played in brackets), then the final greedy held-out share per level where known."""
    bounds = [f"{int(low):,}-{int(high):,}" for low, high in zip([0.0, *edges[:-1]], edges, strict=True)]
    head = ["run", *(f"{b} L{lv}" for b in bounds for lv in (3, 4)), "held-out L3", "held-out L4"]
    lines = [
        "Training batches' parts right per level, by env-step window (L3: two products, L4: three; parts "
        "played in brackets), and the final greedy held-out share per level:",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name, run in runs.items():
        cells = []
        for window in run["windows"]:
            for level in ("3", "4"):
                found = window["levels"].get(level)
                cells.append(f"{found['share_right']:.2f} ({found['parts']})" if found else "")
        held = run.get("heldout") or {}
        cells += [f"{held[level]:.3f}" if level in held else "" for level in ("3", "4")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def heldout_levels(path: Path) -> dict[str, dict[str, float]]:
    """Run -> level -> share right, from a `calc_chain_failures.py --study` file's `by_level` (empty when
    the file or a run's labels are missing)."""
    if not path.is_file():
        return {}
    found = json.loads(path.read_text())
    return {
        name: {level: c.get("right", 0) / c["parts"] for level, c in (run.get("by_level") or {}).items()}
        for name, run in found["runs"].items()
        if run
    }


def study_levels(name: str, root: Path, held_out: str) -> dict[str, Any]:
    """Every planned training run of study `name`: its per-step level counts and their windows."""
    from agentrl.config import load_config
    from agentrl.store.repository import close_store, list_runs, load_episodes, open_store
    from agentrl.study.runner import Layout, checkpoint_points, planned_runs
    from agentrl.study.spec import STUDIES_DIR, load_spec

    layout = Layout(root / STUDIES_DIR / name)
    if not (layout.train_runs / "store.db").is_file():
        raise SystemExit(f"{layout.train_runs / 'store.db'} does not exist: run the study first")
    spec = load_spec(layout.spec)
    config = load_config(spec.task, list(spec.overrides))
    parts = int(config.env.kwargs.get("parts", 1))
    tasks = {task["id"]: task for task in load_tasks(config.tasks.root, config.tasks.suite, "train")}
    edges = [float(point) for point in checkpoint_points(spec.env_step_budget, spec.checkpoints)]
    heldout = heldout_levels(layout.results / f"failures-{held_out or 'main'}.json")
    store = open_store(f"sqlite:///{(layout.train_runs / 'store.db').resolve()}")
    runs: dict[str, Any] = {}
    try:
        stored = list_runs(store)
        for planned in planned_runs(spec):
            if planned.arm is None:
                continue
            full = f"{name}-{planned.name}"
            metrics = layout.train_runs / full / "metrics.jsonl"
            if not metrics.is_file():
                metrics = layout.results / "metrics" / f"{planned.name}.jsonl"
            if not metrics.is_file():
                continue  # not started
            episodes = [
                (int(row["step"]), stored_episode(row))
                for run in stored
                if run["name"] == full
                for row in load_episodes(store, run["id"])
                if row["split"] == "train"
            ]
            counts = step_counts(episodes, tasks, parts)
            runs[planned.name] = {
                "by_step": {
                    step: {lv: dict(c) for lv, c in levels.items()} for step, levels in counts.items()
                },
                "windows": windows(counts, metrics_env_steps(metrics), edges),
                "heldout": heldout.get(planned.name),
            }
    finally:
        close_store(store)
    return {"study": name, "heldout_set": held_out, "edges": edges, "runs": runs,
            "table": level_table(runs, edges)}  # fmt: skip


def markers(study: str) -> tuple[str, str]:
    return (
        f"<!-- levels:{study}:start (studies/scripts/calc_chain_levels.py --study {study} --page P) -->",
        f"<!-- levels:{study}:end -->",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", required=True)
    parser.add_argument("--set", default="heldout-256", help="the held-out set whose failures file to read")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout holding studies/")
    parser.add_argument("--page", type=Path, action="append", default=[], help="a page with the block")
    args = parser.parse_args(argv)
    found = study_levels(args.study, args.root, args.set)
    out = args.root / "studies" / args.study / "results" / "levels-train.json"
    out.write_text(json.dumps({"commit": code_version(), **found}, indent=1) + "\n")
    for page in args.page:
        start, end = markers(args.study)
        page.write_text(replace_block(page.read_text(), found["table"], start, end, where=str(page)))
    print(found["table"])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
