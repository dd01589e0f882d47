"""The viewer's tree of a tree rollout's group: `group_tree` on a hand-made tree, and the step page drawing it
(branch points, siblings side by side with return, advantage and subtree mean return) over a real SQLite
store through FastAPI's test client."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from agentrl.store.repository import close_store, create_run, load_episodes, open_store, record_episodes
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app
from agentrl.ui.tree import group_tree


def episode(uid: str, reward: float, parent: str | None = None, branch_turn: int | None = None) -> Episode:
    """A 3-turn maze-like episode whose last turn earns `reward`; the state after turn t is s<t+1>."""
    turns = tuple(
        Turn(t, (1,), (2,), (-0.1,), f"move {t}", Action(f"move {t}"), "obs", reward if t == 2 else 0.0,
             False, f"s{t + 1}")
        for t in range(3)
    )  # fmt: skip
    return Episode(uid, "agentrl/Maze-v0", "maze-1", "g1", 0, turns, "terminated", "s0", success=reward > 0,
                   parent_id=parent, branch_turn=branch_turn)  # fmt: skip


def tree_rows(tmp_path: Path) -> tuple[str, str]:
    """Branch turns (1, 2), width 2: r forks f1 after turn 0; after turn 1 r forks f2 and f1 forks f3."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = create_run(store, "tree", "maze", {})
    episodes = [episode("r", 1.0), episode("f1", 0.0, "r", 1), episode("f2", 0.0, "r", 2),
                episode("f3", 1.0, "f1", 2)]  # fmt: skip
    advantages = [[0.1, 0.5, 0.5], [0.1, -0.5, 0.5], [0.1, 0.5, -0.5], [0.1, -0.5, 0.5]]
    record_episodes(store, run_id, 1, "train", episodes, advantages)
    record_episodes(store, run_id, 2, "train", [episode("flat", 1.0)], [[1.0, 1.0, 1.0]])
    close_store(store)
    return url, run_id


def test_group_tree_nests_branches_at_their_branch_points(tmp_path: Path) -> None:
    url, run_id = tree_rows(tmp_path)
    store = open_store(url)
    rows = load_episodes(store, run_id)
    close_store(store)
    [root] = group_tree([row for row in rows if row["step"] == 1])
    assert (root.episode["uid"], root.start, root.leaf_returns) == ("r", 0, [1.0, 0.0, 1.0, 0.0])
    first, second = root.branches
    assert (first.turn, first.state_key) == (1, "s1") and (second.turn, second.state_key) == (2, "s2")
    assert [s.episode["uid"] for s in first.siblings] == ["r", "f1"]
    assert [s.episode["uid"] for s in second.siblings] == ["r", "f2"]
    f1 = first.siblings[1]
    assert (f1.start, f1.advantage, f1.subtree_mean_return) == (1, -0.5, 0.5)
    assert [s.episode["uid"] for s in f1.branches[0].siblings] == ["f1", "f3"]
    assert group_tree([row for row in rows if row["step"] == 2]) == []  # a flat group draws no tree


def test_step_page_draws_the_tree(tmp_path: Path) -> None:
    url, run_id = tree_rows(tmp_path)
    with TestClient(create_app(url)) as http:
        page = http.get(f"/runs/{run_id}/steps/1?split=train").text
        flat = http.get(f"/runs/{run_id}/steps/2?split=train").text
        failed = http.get(f"/runs/{run_id}/steps/1?split=train&show=failed").text
    assert page.count('class="branch-point"') == 3 and page.count('class="tree-node"') == 4
    assert "branch point</b> at turn 1, state <code>s1</code>: 2 siblings" in page
    assert "turns 1–2 (0–0 copied)" in page and "(goes on)" in page
    assert "advantage at turn 2" in page and "0.500 (2)" in page  # f1's subtree: f1 (0) and f3 (1)
    assert "tree-view" not in flat
    assert failed.count('class="tree-node"') == 4  # the tree is drawn whole whatever the filter
