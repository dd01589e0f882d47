"""bench/tree_rollout.py's pure parts: a tree's copied prefix counted once in env steps and decoded tokens,
the ratios' directions, and docs/tree_rollouts.md quoting the committed JSON's table exactly."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from bench_scripts import load_bench

from agentrl.types import Action, Episode, Turn

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    return load_bench("tree_rollout")


def episode(
    uid: str, tokens: list[int], parent: str | None = None, branch_turn: int | None = None
) -> Episode:
    turns = tuple(
        Turn(t, (1,), tuple(range(n)), tuple([-0.1] * n), "", Action(""), "", 0.0, False, f"s{t}")
        for t, n in enumerate(tokens)
    )
    return Episode(uid, "maze", "m", "g", 0, turns, "terminated", parent_id=parent, branch_turn=branch_turn)


def test_copied_prefix_is_counted_once() -> None:
    root = episode("r", [3, 4, 5])
    branch = episode("b", [3, 4, 7], parent="r", branch_turn=2)  # turns 0-1 are r's
    assert bench().episode_costs([root, branch]) == (3 + 1, 12 + 7)


def test_ratios_favour_the_tree_above_one() -> None:
    flat = {
        "episodes_per_1000_env_steps": 100.0,
        "decoded_tokens_per_episode": 200.0,
        "update_s_per_episode": 2.0,
    }
    tree = {
        "episodes_per_1000_env_steps": 160.0,
        "decoded_tokens_per_episode": 100.0,
        "update_s_per_episode": 1.0,
    }
    assert bench().ratios(tree, flat) == {
        "episodes_per_env_step_ratio": 1.6,
        "decoded_tokens_per_episode_ratio": 2.0,
        "update_s_per_episode_ratio": 2.0,
    }


def test_doc_quotes_the_committed_figures() -> None:
    doc = (ROOT / "docs" / "tree_rollouts.md").read_text()
    for name in ("tree_rollout", "tree_rollout_swebench", "tree_rollout_4tasks"):
        result = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
        assert bench().report(result) in doc, f"docs/tree_rollouts.md does not quote {name}.json"


def test_each_task_writes_its_own_file() -> None:
    module = bench()
    assert module.default_out("maze").name == "tree_rollout.json"
    assert module.default_out("swebench").name == "tree_rollout_swebench.json"
