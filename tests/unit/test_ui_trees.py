"""The viewer's drawing of a group of several trees (`rollout.tree.trees`): two roots, each with its own
branches, over a real SQLite store through FastAPI's test client (one tree: tests/unit/test_ui_tree.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from test_ui_tree import episode

from agentrl.store.repository import close_store, create_run, load_episodes, open_store, record_episodes
from agentrl.ui.app import create_app
from agentrl.ui.tree import group_tree


def two_trees(tmp_path: Path) -> tuple[str, str]:
    """Two trees of width 2 branching at turn 1 in one group: r1 forks b1, r2 forks b2."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = create_run(store, "trees", "maze", {})
    episodes = [
        episode("r1", 1.0),
        episode("b1", 1.0, "r1", 1),
        episode("r2", 0.0),
        episode("b2", 1.0, "r2", 1),
    ]
    advantages = [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [-0.5, -1.5, -1.5], [-0.5, 0.5, 0.5]]
    record_episodes(store, run_id, 1, "train", episodes, advantages)
    close_store(store)
    return url, run_id


def test_a_group_of_two_trees_has_two_roots_each_with_its_branch(tmp_path: Path) -> None:
    url, run_id = two_trees(tmp_path)
    store = open_store(url)
    rows = load_episodes(store, run_id)
    close_store(store)
    first, second = group_tree(rows)
    assert (first.episode["uid"], second.episode["uid"]) == ("r1", "r2")
    assert [s.episode["uid"] for s in first.branches[0].siblings] == ["r1", "b1"]
    assert [s.episode["uid"] for s in second.branches[0].siblings] == ["r2", "b2"]
    assert (first.leaf_returns, second.leaf_returns) == ([1.0, 1.0], [0.0, 1.0])
    assert (first.advantage, second.advantage) == (0.5, -0.5)  # the root prefixes, credited across trees


def test_the_step_page_draws_both_trees(tmp_path: Path) -> None:
    url, run_id = two_trees(tmp_path)
    with TestClient(create_app(url)) as http:
        page = http.get(f"/runs/{run_id}/steps/1?split=train").text
    assert page.count('class="tree-node"') == 4 and page.count('class="branch-point"') == 2
    assert "of 2 trees in one group (one root each)" in page
    assert page.index(">r1</a>") < page.index(">b1</a>") < page.index(">r2</a>") < page.index(">b2</a>")
