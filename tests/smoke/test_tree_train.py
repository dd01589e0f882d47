"""Tree rollouts through a real `agentrl train` run, in the modes the unit tests covered alone: branching on
entropy (`rollout.tree.branch_on=entropy`), several trees per task (`rollout.tree.trees=2`) with the
shared-prefix update, and both together. Each case is one training step on the maze (envs/maze: pure Python,
forks by copy, served by the embedded env service) with a tiny random Llama over the byte tokenizer
(`tiny_model`) on the cached engine (it reports the first token's entropy), seeded sampling, a sqlite store.

What is checked: the run finishes; the store (read with `agentrl.store.repository`) holds every group's
leaves with parent links and branch turns that form the configured trees (each branch's copied prefix equal
to its parent's turns); on entropy, every branch point lies in its window (`min_turn`..`max_turn`, the k-th
of L by `max_turn - (L - k)`), is recorded in the `info` of its turn in every branch through it and obeys
the rule (it rose above the tree's turn-0 entropy by more than the threshold, or it is the window's last
turn), and the step's tree metrics (`tree/forks`, `tree/branch_turn_mean`, `tree/copied_turn_share`,
`tree/entropy_fired_share`, `tree/branch_entropy_rise_mean`) in the store and metrics.jsonl match the stored
episodes; with two trees, the trees share the env seed and first observation but not their roots, and the
update's micro batches (recorded by wrapping `agentrl.trainer.update.local_packs` in the training process)
are packed tree by tree, each sharing its tree's prefix past the root's first completion; the same two-tree
run with `update.shared_prefix=false` plays the same episodes and gives the same update metrics and final
weights (fp32, no autocast).

What it is not: a test of learning or of a model's entropy (a random model's first-token entropy barely
moves, so with threshold 0 its branch points mostly fall back to the window's end; one case sets a negative
threshold so that the threshold itself fires), nor of a sandbox env, a real LM or the failover of
`tests/integration/test_tree_failover.py`. Every advantage is 0 here (a random model never reaches a goal),
so `loss.entropy_coef` keeps every episode in the update.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file
from stored_runs import train_maze

from agentrl.agent.tree import BRANCH_INFO_KEYS

PACK_SPY = """
import json, sys
from agentrl.cli.main import main
from agentrl.trainer import update

planned = update.local_packs


def first_trained(sample):
    trained = sample.loss_mask.nonzero()
    return int(trained[0, 0]) if trained.numel() else None


def recording(samples, update_cfg, parallel):
    packs = planned(samples, update_cfg, parallel)
    rows = [
        {
            "shared": pack.shared,
            "trees": [samples[i].tree_key for i in pack.indices],
            "groups": [samples[i].group_key for i in pack.indices],
            "first_trained": [first_trained(samples[i]) for i in pack.indices],
            "trains_prefix": any(bool(samples[i].loss_mask[: pack.shared].any()) for i in pack.indices),
        }
        for pack in packs
    ]
    with open(sys.argv[1], "a") as log:
        log.write(json.dumps({"samples": len(samples), "packs": rows}) + "\\n")
    return packs


update.local_packs = recording
sys.exit(main(sys.argv[2:]))
"""
"""Runs `agentrl train` (argv[2:]) with `update.local_packs` wrapped: each call's micro batches, one JSON line
per call in the file argv[1] (the update's and the sampler-mismatch pass's alike)."""

TASKS = 2
COMMON = (
    "engine.kind=cached",  # reports `first_token_entropy`; "auto" picks it too for a Llama on CPU
    "model.dtype=float32",
    "update.autocast_bf16=false",
    "rollout.seeded_sampling=true",
    "rollout.max_context_tokens=4096",  # one byte per token
    "sampling.max_new_tokens=16",
    "train.steps=1",
    f"train.tasks_per_step={TASKS}",
    "train.seed=7",
    "eval.before=false",
    "eval.after=false",
    "loss.entropy_coef=0.01",  # every advantage is 0 with a random model: this keeps the episodes trained
    "rollout.tree.enabled=true",
)
UPDATE_METRICS = ("loss", "entropy", "approx_kl", "ratio_mean", "tokens", "trained_episodes")


@dataclass(frozen=True)
class Trained:
    """What one `agentrl train` run left: its stored episodes (`load_episodes`), step 1's metrics from the
    store, the micro batches of every `local_packs` call, and its run directory."""

    episodes: list[dict[str, Any]]
    metrics: dict[str, float]
    calls: list[dict[str, Any]]
    run_dir: Path

    def groups(self) -> dict[str, list[dict[str, Any]]]:
        """The training episodes by group id, in stored order."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for episode in self.episodes:
            assert episode["split"] == "train"  # eval.before/after are off
            out[str(episode["group_id"])].append(episode)
        return dict(out)


def train(repo_root: Path, tmp_path: Path, model: Path, name: str, *overrides: str) -> Trained:
    packs = tmp_path / f"{name}-packs.jsonl"
    program = [sys.executable, "-c", PACK_SPY, str(packs)]
    episodes, metrics = train_maze(
        repo_root, tmp_path, name, program, f"model.name={model}", *COMMON, *overrides
    )
    calls = [json.loads(line) for line in packs.read_text().splitlines()]
    return Trained(episodes, metrics, calls, tmp_path / "runs" / name)


def checked_groups(run: Any, trees: int, width: int, levels: int) -> list[tuple[list[dict[str, Any]], Any]]:
    """One group per task, each checked by `check_trees`: (group, its leaves by root uid) per task."""
    groups = run.groups()
    assert len(groups) == TASKS
    return [(group, check_trees(group, trees, width, levels)) for group in groups.values()]


def check_trees(group: list[dict[str, Any]], trees: int, width: int, levels: int) -> dict[str, list[str]]:
    """Checks that `group` is `trees` trees of `width ** levels` leaves each, linked within each tree, every
    branch's copied prefix its parent's; the leaves' uids by their root's uid."""
    assert len(group) == trees * width**levels
    by_uid = {str(episode["uid"]): episode for episode in group}
    roots = [uid for uid, episode in by_uid.items() if episode["parent_uid"] is None]
    assert len(roots) == trees
    children: dict[str, list[str]] = defaultdict(list)
    for uid, episode in by_uid.items():
        if episode["parent_uid"] is None:
            assert episode["branch_turn"] is None
            continue
        parent = by_uid[str(episode["parent_uid"])]  # a link never leaves the group
        turn = int(episode["branch_turn"])
        assert turn >= 1, "a branch point follows a tool result (TreeConfig: min_turn >= 1)"
        assert turn < len(parent["turns"]), f"branch turn {turn} is past its parent's turns"
        assert len(episode["turns"]) > turn  # the branch played its own turns from its branch turn on
        mine, theirs = episode["turns"][:turn], parent["turns"][:turn]
        for field in ("text", "observation", "reward", "state_key", "completion_tokens"):
            assert [t[field] for t in mine] == [t[field] for t in theirs], field
        children[str(episode["parent_uid"])].append(uid)
    leaves: dict[str, list[str]] = {}
    for root in roots:
        below = [root]
        for uid in below:  # breadth first over the links
            below.extend(children.get(uid, []))
        leaves[root] = below
        assert len(below) == width**levels
        # each branch point adds width - 1 forks: the root gets width - 1 per level, and so on
        assert len(children.get(root, [])) == (width - 1) * levels
    assert sorted(uid for tree in leaves.values() for uid in tree) == sorted(by_uid)
    return leaves


def branch_points(episode: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(turn, info) of every turn of `episode` that records an entropy branch point (`BRANCH_INFO_KEYS`)."""
    points = []
    for turn in episode["turns"]:
        info = turn["info"] or {}
        if any(key in info for key in BRANCH_INFO_KEYS):
            assert set(BRANCH_INFO_KEYS) <= set(info)
            points.append((int(turn["index"]), info))
    return points


def check_entropy_rule(
    group: list[dict[str, Any]], levels: int, min_turn: int, max_turn: int, threshold: float
) -> list[bool]:
    """Checks every leaf's branch points against the entropy rule and its windows; every point's
    `branch_fallback`, in leaf order."""
    by_uid = {str(episode["uid"]): episode for episode in group}
    fallbacks = []
    for episode in group:
        points = branch_points(episode)
        assert len(points) == levels  # every leaf ran long enough to pass each branch point on its path
        first = min_turn
        for k, (turn, info) in enumerate(points, start=1):
            last = max_turn - (levels - k)  # the k-th of L must leave a turn for each later one
            assert first <= turn <= last, (turn, first, last)
            rise = float(info["branch_entropy"]) - float(info["branch_entropy_initial"])
            if info["branch_fallback"]:
                assert turn == last and rise <= threshold
            else:
                assert rise > threshold
            fallbacks.append(bool(info["branch_fallback"]))
            first = turn + 1
        if episode["parent_uid"] is not None:  # a branch forked at one of its path's branch points
            assert int(episode["branch_turn"]) in {turn for turn, _ in points}
        # every branch through a branch point records it alike: the parent holds the same values there
        parent = by_uid.get(str(episode["parent_uid"]))
        if parent is not None:
            turn = int(episode["branch_turn"])
            assert dict(branch_points(parent))[turn] == dict(points)[turn]
        # and the turn-0 reference is the tree's: the same on every point of the path
        assert len({float(info["branch_entropy_initial"]) for _, info in points}) == 1
    return fallbacks


def check_tree_metrics(trained: Trained, forks: int) -> None:
    """Checks step 1's tree metrics (`agentrl.trainer.run.tree_metrics`), in the store and in metrics.jsonl,
    against the step's stored episodes (width 2: each branch point has one fork, and the fork's own turn at
    its branch turn records the point)."""
    lines = (trained.run_dir / "metrics.jsonl").read_text().splitlines()
    (logged,) = [record for record in map(json.loads, lines) if record["step"] == 1]
    episodes = trained.episodes
    branches = [episode for episode in episodes if episode["parent_uid"] is not None]
    points = [episode["turns"][int(episode["branch_turn"])]["info"] for episode in branches]
    turns = [int(episode["branch_turn"]) for episode in branches]
    expected = {
        "tree/forks": forks,
        "tree/branch_turn_mean": sum(turns) / len(turns),
        "tree/copied_turn_share": sum(turns) / sum(len(episode["turns"]) for episode in episodes),
        "tree/entropy_fired_share": sum(not info["branch_fallback"] for info in points) / len(points),
        "tree/branch_entropy_rise_mean": sum(
            float(info["branch_entropy"]) - float(info["branch_entropy_initial"]) for info in points
        )
        / len(points),
    }
    for name, value in expected.items():
        assert trained.metrics[name] == pytest.approx(value, abs=1e-6), name
        assert logged[name] == pytest.approx(value, abs=1e-6), name
    assert 0 < trained.metrics["tree/copied_turn_share"] < 1


def check_update(trained: Trained, episodes: int) -> None:
    metrics = trained.metrics
    assert metrics["episodes"] == episodes and metrics["infra_failures"] == 0
    assert metrics["played_groups"] == TASKS
    assert metrics["trained_episodes"] == episodes  # entropy_coef keeps them all
    for name in (*UPDATE_METRICS, "grad_norm"):
        assert name in metrics, name
    assert metrics["tokens"] > 0 and metrics["grad_norm"] > 0
    assert (trained.run_dir / "final" / "model.safetensors").is_file()


def check_packs_tree_by_tree(trained: Trained, roots: set[str]) -> None:
    """Every micro batch the shared-prefix update ran holds one tree's members (its root's uid as their
    `tree_key`), shares a prefix that runs past the root's first completion (so its root trains tokens in the
    prefix: the prefix's own logits are computed), and every tree got such a pack in every pass."""
    assert trained.calls
    for call in trained.calls:
        packed: set[str] = set()
        for pack in call["packs"]:
            assert len(set(pack["groups"])) == 1
            assert len(set(pack["trees"])) == 1, pack["trees"]  # never two trees in one micro batch
            (tree,) = set(pack["trees"])
            assert tree in roots
            if len(pack["trees"]) > 1:  # a shared-prefix pack
                assert pack["shared"] > min(first for first in pack["first_trained"] if first is not None)
                assert pack["trains_prefix"]
                packed.add(tree)
        assert packed == roots


def test_entropy_branching_trains_through_agentrl_train(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    levels, min_turn, max_turn = 2, 2, 4
    trained = train(
        repo_root,
        tmp_path,
        tiny_model,
        "entropy",
        "rollout.max_turns=6",  # the window 2..4 ends before the episode's last turn (5)
        "train.group_size=4",
        "rollout.tree.branch_on=entropy",
        f"rollout.tree.branch_points={levels}",
        f"rollout.tree.min_turn={min_turn}",
        f"rollout.tree.max_turn={max_turn}",
    )
    checked = checked_groups(trained, trees=1, width=2, levels=levels)
    roots = {root for _, leaves in checked for root in leaves}
    for group, _ in checked:
        check_entropy_rule(group, levels, min_turn, max_turn, threshold=0.0)
    check_tree_metrics(trained, forks=TASKS * 3)  # 3 forks per tree of 4 leaves
    check_update(trained, episodes=TASKS * 4)
    check_packs_tree_by_tree(trained, roots)


def test_two_trees_per_task_train_with_the_shared_prefix_packed_tree_by_tree(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    two_trees = (
        "rollout.max_turns=3",
        "train.group_size=4",
        "rollout.tree.trees=2",
        "rollout.tree.branch_turns=[1]",
        "update.micro_batch_size=8",  # room for a whole group: only the tree keys split it
    )
    shared = train(repo_root, tmp_path, tiny_model, "shared", *two_trees, "update.shared_prefix=true")
    checked = checked_groups(shared, trees=2, width=2, levels=1)
    roots = {root for _, leaves in checked for root in leaves}
    for group, leaves in checked:
        assert {episode["branch_turn"] for episode in group} == {None, 1}
        # both trees start from the group's reset, and each samples its own root
        assert len({episode["seed"] for episode in group}) == 1
        assert len({episode["first_observation"] for episode in group}) == 1
        first, second = (group_by_uid(group)[root] for root in leaves)
        assert first["turns"][0]["text"] != second["turns"][0]["text"]
    check_update(shared, episodes=TASKS * 4)
    check_packs_tree_by_tree(shared, roots)

    unshared = train(repo_root, tmp_path, tiny_model, "unshared", *two_trees, "update.shared_prefix=false")
    assert played(unshared) == played(shared)  # seeded sampling: the same episodes
    assert all(pack["shared"] == 0 for call in unshared.calls for pack in call["packs"])
    for name in UPDATE_METRICS:
        assert unshared.metrics[name] == pytest.approx(shared.metrics[name], rel=1e-4, abs=1e-7), name
    assert unshared.metrics["grad_norm"] == pytest.approx(shared.metrics["grad_norm"], rel=1e-3)
    before = load_file(str(shared.run_dir / "final" / "model.safetensors"))
    after = load_file(str(unshared.run_dir / "final" / "model.safetensors"))
    assert before.keys() == after.keys()
    for key, tensor in before.items():
        assert (tensor - after[key]).abs().max().item() < 1e-5, key


def test_two_entropy_trees_per_task(repo_root: Path, tmp_path: Path, tiny_model: Path) -> None:
    min_turn, max_turn = 2, 3
    trained = train(
        repo_root,
        tmp_path,
        tiny_model,
        "both",
        "rollout.max_turns=4",
        "train.group_size=4",
        "rollout.tree.trees=2",
        "rollout.tree.branch_on=entropy",
        "rollout.tree.branch_points=1",
        f"rollout.tree.min_turn={min_turn}",
        f"rollout.tree.max_turn={max_turn}",
        "rollout.tree.entropy_threshold=-10",  # any turn in the window fires: the threshold, not its end
        "update.micro_batch_size=8",
    )
    checked = checked_groups(trained, trees=2, width=2, levels=1)
    roots = {root for _, leaves in checked for root in leaves}
    for group, _ in checked:
        fallbacks = check_entropy_rule(group, 1, min_turn, max_turn, threshold=-10.0)
        assert not any(fallbacks)
        assert {episode["branch_turn"] for episode in group} == {None, min_turn}
    check_update(trained, episodes=TASKS * 4)
    check_packs_tree_by_tree(trained, roots)


def group_by_uid(group: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(episode["uid"]): episode for episode in group}


def played(trained: Trained) -> list[tuple[Any, ...]]:
    """(task, seed, branch turn, turn texts) of every episode, sorted: what two runs' rollouts share when
    they sample the same (uids and group ids differ by nature)."""
    return sorted(
        (
            episode["task_id"],
            episode["seed"],
            episode["branch_turn"] or 0,
            tuple(turn["text"] for turn in episode["turns"]),
        )
        for episode in trained.episodes
    )
