"""Context policies (`rollout.context`, docs/context.md) through a real `agentrl train` run: a window that
slides every turn with tree rollouts and the shared-prefix update, and model-written summaries. Each case is
one training step on the maze (envs/maze: pure Python, forks by copy, served by the embedded env service)
with a tiny random Llama over the byte tokenizer (`tiny_model`) on the cached engine, a sqlite store.

What is checked: the run finishes; the step trained more samples than it had episodes (each window is its
own sample); the store keeps each turn's segment and prompt view (a branch's copied turns with its parent's);
the summary run stored summary turns that the env never played (`env_steps` counts only the others) and
every turn after a summary in a new segment. What it is not: a test of learning (every advantage is 0 with a
random model, so `loss.entropy_coef` keeps every episode in the update), or of the prompts' tokens (the
unit tests, tests/unit/test_context.py, check those token for token).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from stored_runs import train_maze

COMMON = (
    "engine.kind=cached",
    "model.dtype=float32",
    "update.autocast_bf16=false",
    "rollout.seeded_sampling=true",
    "rollout.max_context_tokens=4096",  # one byte per token
    "sampling.max_new_tokens=16",
    "rollout.max_turns=5",
    "train.steps=1",
    "train.tasks_per_step=2",
    "train.group_size=2",
    "train.seed=3",
    "eval.before=false",
    "eval.after=false",
    "loss.entropy_coef=0.01",  # every advantage is 0 with a random model: this keeps the episodes trained
)


def train(
    repo_root: Path, tmp_path: Path, model: Path, name: str, *overrides: str
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The stored training episodes and step 1's metrics of one `agentrl train --task maze` run."""
    program = [sys.executable, "-m", "agentrl.cli.main"]
    return train_maze(repo_root, tmp_path, name, program, f"model.name={model}", *COMMON, *overrides)


def test_a_sliding_window_with_trees_trains_each_window_as_a_sample(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    episodes, metrics = train(
        repo_root,
        tmp_path,
        tiny_model,
        "window-tree",
        "rollout.context.policy=window",
        "rollout.context.keep_turns=1",
        "rollout.tree.enabled=true",
        "rollout.tree.branch_turns=[2]",
    )
    assert len(episodes) == 4
    assert metrics["trained_episodes"] > len(episodes)  # one sample per window, not per episode
    # every step's metrics carry its phases' peak resident size (agentrl/trainer/peak_memory.py)
    assert 0 < metrics["memory/rollout_peak_mb"] <= metrics["memory/step_peak_mb"]
    assert metrics["memory/step_peak_mb"] == max(
        metrics["memory/rollout_peak_mb"], metrics["memory/update_peak_mb"]
    )
    for episode in episodes:
        turns = episode["turns"]
        assert [turn["segment"] for turn in turns[:3]] == [0, 0, 1]  # from turn 2 on, a turn drops out
        for turn in turns[1:]:
            view = turn["prompt_view"]
            assert view["policy"] == "window" and view["shown"] == [turn["index"] - 1]
    by_uid = {str(episode["uid"]): episode for episode in episodes}
    branches = [episode for episode in episodes if episode["parent_uid"] is not None]
    assert branches
    for branch in branches:
        parent = by_uid[str(branch["parent_uid"])]
        copied = int(branch["branch_turn"])
        for field in ("segment", "prompt_view", "text"):
            assert [t[field] for t in branch["turns"][:copied]] == [
                t[field] for t in parent["turns"][:copied]
            ]


def test_summaries_are_trained_turns_the_env_never_plays(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    episodes, metrics = train(
        repo_root,
        tmp_path,
        tiny_model,
        "summary",
        "rollout.context.policy=summary",
        "rollout.context.summary_at_tokens=900",
        "rollout.context.summary_max_tokens=24",
    )
    summaries = [t for e in episodes for t in e["turns"] if (t["info"] or {}).get("context_summary")]
    assert summaries, "the first prompt is over 900 byte tokens: a summary is due before the second turn"
    played = sum(1 for e in episodes for t in e["turns"] if not (t["info"] or {}).get("context_summary"))
    assert metrics["env_steps"] == played
    for episode in episodes:
        turns = episode["turns"]
        for before, after in zip(turns, turns[1:], strict=False):
            if (before["info"] or {}).get("context_summary"):
                assert after["segment"] == before["segment"] + 1
                assert after["prompt_view"]["summary_turn"] == before["index"]
