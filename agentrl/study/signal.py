"""What a batch of episodes offers an estimator, and how a model does per part: the measures a go/no-go reads.

What this is: pure functions over played episodes (numpy and the credit registry only):
- `per_task` and `success_summary`: per-task, per-part outcomes of a held-out evaluation of a multi-part
  task (calc-chain's `part` and `part_correct` infos; a one-part task is one part), summarised overall, by
  part index and by wording (`forms`);
- `advantage_comparison`: GRPO's and GiGPO's per-turn advantages on one batch, with each estimator's
  defaults, compared by cosine, Pearson correlation and sign flips, and GiGPO against its own episode term
  alone (`step_weight=0`), so the step term's own contribution shows;
- `part_start_rows`: which turns of a batch start a part (the turn that chooses a calc part's operands),
  where `advantage_comparison` counts the turns whose GiGPO step term is not 0;
- `part_start_signal`: at the first turn of each later part every member of a group is in one state (the
  env's state key is the part index); of those anchor groups, how many have unequal returns to go (the
  part's and later parts' rewards): where step-level credit has something per part to compare.

What this is not: a player of episodes (`agentrl.study.gonogo` plays them through the trainer's run) or a
verdict (a go/no-go's criteria, named in its study file, make that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentrl.credit import episodes_to_batch, estimate, make_config
from agentrl.types import Episode


def part_outcomes(episode: Episode, parts: int) -> list[bool]:
    """Per part: whether its submit was right (a part never submitted, or never reached, is wrong). A task of
    one part without `part_correct` infos counts the episode's success."""
    right = [False] * parts
    marked = False
    for turn in episode.turns:
        if "part_correct" in turn.info:
            marked = True
            if turn.info["part_correct"] is True:
                right[int(turn.info.get("part", 0))] = True
    if not marked and parts == 1:
        right[0] = bool(episode.success)
    return right


def per_task(
    episodes: Sequence[Episode], tasks: Sequence[Mapping[str, Any]], parts: int
) -> list[dict[str, Any]]:
    """One record per task: its id, wordings (`forms`), per-part outcomes, turns and invalid turns."""
    by_id = {episode.task_id: episode for episode in episodes}
    return [
        {
            "task_id": task["id"],
            "forms": task.get("forms"),
            "parts_correct": part_outcomes(by_id[task["id"]], parts),
            "turns": len(by_id[task["id"]].turns),
            "invalid_turns": sum(turn.invalid for turn in by_id[task["id"]].turns),
            "infra_failure": by_id[task["id"]].is_infra_failure,
        }
        for task in tasks
    ]


def success_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-part success overall, by part index and by wording; all-parts success; the invalid-turn rate.
    Episodes that failed for infrastructure reasons are left out and counted."""
    usable = [row for row in rows if not row["infra_failure"]]
    outcomes = np.array([row["parts_correct"] for row in usable], dtype=float)
    by_form: dict[str, list[float]] = {}
    for row in usable:
        for form, right in zip(row["forms"] or [], row["parts_correct"], strict=False):
            by_form.setdefault(form, []).append(float(right))
    return {
        "tasks": len(usable),
        "infra_failures": len(rows) - len(usable),
        "per_part_success": float(outcomes.mean()) if outcomes.size else 0.0,
        "parts_right": int(outcomes.sum()),
        "parts_played": int(outcomes.size),
        "by_part_index": [float(value) for value in outcomes.mean(axis=0)] if outcomes.size else [],
        "by_form": {form: {"success": float(np.mean(v)), "n": len(v)} for form, v in sorted(by_form.items())},
        "all_parts_success": float(outcomes.all(axis=1).mean()) if outcomes.size else 0.0,
        "invalid_turn_rate": sum(row["invalid_turns"] for row in usable)
        / max(1, sum(row["turns"] for row in usable)),
    }


def compare_advantages(first: np.ndarray, second: np.ndarray) -> dict[str, float]:
    """Cosine, Pearson correlation and the share of sign disagreements of two per-turn advantage vectors."""
    norms = float(np.linalg.norm(first) * np.linalg.norm(second))
    either = (first != 0) | (second != 0)
    flipped = np.sign(first[either]) != np.sign(second[either])
    return {
        "cosine": float(first @ second / norms) if norms else float("nan"),
        "pearson": float(np.corrcoef(first, second)[0, 1]) if first.std() and second.std() else float("nan"),
        "sign_differs": float(flipped.mean()) if either.any() else 0.0,
        "turns_compared": int(either.sum()),
    }


def returns_to_go_at_part_starts(episode: Episode, parts: int) -> dict[int, float]:
    """Per later part k (1 .. parts-1) the episode reached: the sum of its env rewards from part k's first
    turn on, what GiGPO's step term compares at the state every group member shares there."""
    starts: dict[int, int] = {}
    for index, turn in enumerate(episode.turns):
        starts.setdefault(int(turn.info.get("part", 0)), index)
    return {
        part: float(sum(turn.reward for turn in episode.turns[index:]))
        for part, index in starts.items()
        if 0 < part < parts
    }


def part_start_rows(episodes: Sequence[Episode]) -> np.ndarray:
    """[S] bool over the episodes' turns in batch order: True on each part's first turn (an episode's first
    turn, and every turn whose `info["part"]` differs from the turn before)."""
    rows: list[bool] = []
    for episode in episodes:
        previous = None
        for index, turn in enumerate(episode.turns):
            part = turn.info.get("part")
            rows.append(index == 0 or part != previous)
            previous = part
    return np.array(rows, dtype=bool)


def part_start_signal(episodes: Sequence[Episode], parts: int) -> dict[str, Any]:
    """Of the (group, later part) anchor groups with at least two members, how many have unequal returns to
    go, per part and overall."""
    by_anchor: dict[tuple[str, int], list[float]] = {}
    for episode in episodes:
        for part, value in returns_to_go_at_part_starts(episode, parts).items():
            by_anchor.setdefault((episode.group_id, part), []).append(value)
    usable = {key: values for key, values in by_anchor.items() if len(values) > 1}
    per_part = {
        str(part): {
            "anchor_groups": sum(key[1] == part for key in usable),
            "with_signal": sum(key[1] == part and len(set(v)) > 1 for key, v in usable.items()),
        }
        for part in range(1, parts)
    }
    with_signal = sum(len(set(values)) > 1 for values in usable.values())
    return {
        "anchor_groups": len(usable),
        "with_signal": with_signal,
        "share_with_signal": with_signal / len(usable) if usable else 0.0,
        "by_part": per_part,
    }


def step_term_reach(step_term: np.ndarray, starts: np.ndarray) -> dict[str, Any]:
    """How many of the part-start turns (`starts`) have a step term (GiGPO minus its episode term) that is
    not 0, and the share; the same over all turns."""
    moved = np.abs(step_term) > 1e-9
    return {
        "turns": int(starts.sum()),
        "nonzero": int(moved[starts].sum()),
        "share": float(moved[starts].mean()) if starts.any() else 0.0,
        "share_of_all_turns": float(moved.mean()) if moved.size else 0.0,
    }


def advantage_comparison(
    episodes: Sequence[Episode], parts: int = 1, gigpo_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """GRPO's and GiGPO's per-turn advantages on one batch, compared (module docstring); GiGPO with its
    defaults, or with `gigpo_options` (e.g. {"gamma": 0.5}: the options a study's GiGPO arm runs with)."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    batch = episodes_to_batch(usable)
    options = dict(gigpo_options or {})
    grpo = estimate("grpo", batch, make_config("grpo"))
    gigpo = estimate("gigpo", batch, make_config("gigpo", **options))
    gigpo_episode_term = estimate("gigpo", batch, make_config("gigpo", **{**options, "step_weight": 0.0}))
    groups: dict[str, list[float]] = {}
    for episode in usable:
        groups.setdefault(episode.group_id, []).append(episode.reward)
    return {
        "episodes": len(usable),
        "turns": int(batch.num_steps),
        "groups": len(groups),
        "zero_variance_groups": sum(len(set(v)) == 1 for v in groups.values()) / max(1, len(groups)),
        "mean_return": float(np.mean([episode.reward for episode in usable])) if usable else 0.0,
        "grpo_vs_gigpo": compare_advantages(grpo, gigpo),
        "grpo_vs_gigpo_episode_term": compare_advantages(grpo, gigpo_episode_term),
        "gigpo_episode_term_vs_gigpo": compare_advantages(gigpo_episode_term, gigpo),
        "gigpo_options": options,
        "part_start_signal": part_start_signal(usable, parts),
        "part_start_step_term": step_term_reach(gigpo - gigpo_episode_term, part_start_rows(usable)),
        "advantages": {
            "grpo": [round(float(value), 4) for value in grpo],
            "gigpo": [round(float(value), 4) for value in gigpo],
        },
    }
