"""`studies/scripts/credit_gym.py`: the pure pieces (bands, thresholds, ratios, features), the SALT = GRPO
identity for Markov policies, and `--quick` end to end with the direction the GiGPO paper reports on the
long-horizon maze level (level 3): GiGPO's held-out success beats GRPO's at the same env steps.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

import credit_gym  # noqa: E402

T90_DF15 = 1.341  # one-sided 90% Student-t quantile, 15 degrees of freedom (16 paired seeds)

from agentrl.credit import episodes_to_batch, estimate  # noqa: E402


def test_band_is_a_student_t_interval() -> None:
    mean, low, high = credit_gym.band([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(4.303 * 0.1 / 3**0.5)
    assert credit_gym.band([0.4]) == (0.4, 0.4, 0.4)
    values = list(np.linspace(0.0, 1.0, 20))
    _, low, high = credit_gym.band(values)
    assert (high - low) / 2 == pytest.approx(2.093 * np.std(values, ddof=1) / 20**0.5)  # df 19
    assert credit_gym.t95(27) == 2.060 and credit_gym.t95(500) == 1.96  # untabled df: the smaller one's


def test_steps_to_threshold_interpolates_between_checkpoints() -> None:
    xs = [0, 100, 200, 300]
    assert credit_gym.steps_to_threshold(xs, [0.1, 0.2, 0.6, 0.7], 0.4) == pytest.approx(150.0)
    assert credit_gym.steps_to_threshold(xs, [0.5, 0.6, 0.6, 0.7], 0.4) == 0.0
    assert credit_gym.steps_to_threshold(xs, [0.1, 0.2, 0.3, 0.3], 0.4) is None


def test_threshold_is_a_fraction_of_grpos_improvement_over_the_base() -> None:
    assert credit_gym.threshold_of(0.1, 0.5, 0.8) == pytest.approx(0.42)
    assert credit_gym.threshold_of(0.1, 0.1, 0.8) is None  # GRPO did not improve: no threshold


def test_ratio_vs_grpo_and_its_bootstrap_band() -> None:
    xs = [0.0, 100.0, 200.0]
    grpo = np.array([[0.0, 0.2, 0.5], [0.0, 0.2, 0.5]])  # threshold 0.4, reached at 166.7
    faster = np.array([[0.0, 0.4, 0.6], [0.0, 0.4, 0.6]])  # reached at 100
    mine, reference, ratio = credit_gym.ratio_vs_grpo(xs, faster, grpo, 0.8)
    assert reference == pytest.approx(200 / 1.2) and mine == pytest.approx(100.0)
    assert ratio == pytest.approx(0.6)
    assert credit_gym.bootstrap_ratio_band(xs, faster, grpo, 0.8, 50) == pytest.approx((0.6, 0.6))
    never = np.zeros_like(grpo)
    assert credit_gym.ratio_vs_grpo(xs, never, grpo, 0.8)[2] is None
    assert credit_gym.bootstrap_ratio_band(xs, never, grpo, 0.8, 50) == (None, None)
    assert credit_gym.percentile_band([1.0, 2.0, math.inf, 3.0] * 10) == (1.0, math.inf)


def test_auc_is_the_mean_success_over_the_budget() -> None:
    assert credit_gym.auc([0, 100, 200], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert credit_gym.checkpoints(40000, 5) == [8000, 16000, 24000, 32000, 40000]


def test_board_features_read_the_board_the_env_shows() -> None:
    legend = "Move @ to G. # is a wall. Step on k to take the key; D opens only with it."
    observation = f"{legend}\n..D.G\nk@#..\n..#.."
    features = credit_gym.board_features(observation)
    planes = features[: 4 * 9].reshape(4, 3, 3)  # wall, door, key, goal around the agent
    directions = features[4 * 9 :].reshape(3, 3, 3)  # goal, key, door: (row sign, column sign) one-hot
    assert planes[0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 1]]
    assert planes[1][0, 2] == 1 and planes[2][1, 0] == 1 and planes[3].sum() == 0
    assert directions[0][0, 2] == 1 and directions[1][1, 0] == 1 and directions[2][0, 2] == 1
    taken = credit_gym.board_features("You took the key.\n..D.G\n.@#..\n..#..")
    assert taken[4 * 9 :].reshape(3, 3, 3)[1].sum() == 0  # the key is gone from the board: held


def test_salt_gives_a_markov_policy_exactly_grpos_gradient() -> None:
    """SALT averages GRPO advantages over occurrences of one (s, a, s'); pi(a | s) is the same for all of
    them, so the policy gradient cannot change (docs/credit_gym.md). GiGPO's does."""
    config = credit_gym.GymConfig()
    train, _ = credit_gym.task_split(config, "mlp", 3)
    actions = credit_gym.action_set(True)
    policy = credit_gym.make_policy(config, "mlp", 0)
    assert isinstance(policy, credit_gym.MLPPolicy)
    envs = [credit_gym.MazeEnv(max_steps=40, level=3) for _ in range(16)]
    tasks = [task for task in train[:2] for _ in range(8)]
    played = credit_gym.play(envs, tasks, [t["id"] for t in tasks], policy, actions, np.random.default_rng(3))
    batch = episodes_to_batch(played.episodes)
    views = [view for episode in played.views for view in episode]
    chosen = np.array([a for episode in played.actions for a in episode])

    def gradient(name: str) -> np.ndarray:
        values = estimate(name, batch)
        assert values.any()
        return np.concatenate([g.ravel() for g in copy.deepcopy(policy).gradients(views, chosen, values)])

    grpo, salt, gigpo = gradient("grpo"), gradient("salt"), gradient("gigpo")
    assert not np.allclose(estimate("grpo", batch), estimate("salt", batch))  # the advantages differ ...
    np.testing.assert_allclose(salt, grpo, rtol=1e-9, atol=1e-12)  # ... their gradient does not
    cosine = gigpo @ grpo / np.linalg.norm(gigpo) / np.linalg.norm(grpo)
    assert cosine < 0.99


@pytest.mark.slow  # 32 level-3 runs, ~50 CPU-s: ~30 s on 2 idle cores, 1.5-9 min on this shared machine
def test_quick_gym_gigpo_beats_grpo_on_the_long_horizon_level(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    subprocess.run(
        [sys.executable, str(ROOT / "studies" / "scripts" / "credit_gym.py"), "--quick", "--out", str(out)],
        check=True,
        cwd=ROOT,
        timeout=1800,  # ~50 CPU-s: ~30 s on an idle 2-core machine, minutes on a loaded one
    )
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").is_file()
    cells = report["results"]["mlp"]["3"]
    grpo, gigpo = cells["grpo"], cells["gigpo"]
    assert grpo["seeds"] == gigpo["seeds"] == credit_gym.QUICK.seeds
    assert grpo["mean_env_steps"] >= credit_gym.QUICK.env_steps[3] <= gigpo["mean_env_steps"]
    # the same budget: each run stops within one update (4 x 8 episodes of <= 40 steps) of it
    assert abs(grpo["mean_env_steps"] - gigpo["mean_env_steps"]) <= 4 * 8 * 40
    # the direction: GiGPO's mean held-out success over the budget (AUC) is higher, and its final success
    # beats GRPO's paired by seed by more than the seed noise: the one-sided 90% Student-t lower bound of
    # the per-seed difference is above 0 (docs/credit_gym.md: this run gives 0.36 - 1.341 x 0.115 = 0.21)
    assert gigpo["auc"]["mean"] > grpo["auc"]["mean"]
    difference = np.array(gigpo["per_seed_success"])[:, -1] - np.array(grpo["per_seed_success"])[:, -1]
    assert difference.size == 16
    lower = difference.mean() - T90_DF15 * difference.std(ddof=1) / math.sqrt(difference.size)
    assert lower > 0.0, f"GiGPO - GRPO final success: mean {difference.mean():.3f}, lower bound {lower:.3f}"


def test_llm_shape_preset_has_the_llm_studys_update_shape() -> None:
    config, replot = credit_gym.parse_args(["--llm-shape", "--seeds", "3"])
    assert (config.tasks_per_step, config.group_size, config.seeds, replot) == (2, 4, 3, False)
    assert config.levels == (1,) and config.out.name == "credit_gym_llm_shape.json"
    with pytest.raises(SystemExit):
        credit_gym.parse_args(["--llm-shape", "--quick"])


@pytest.mark.slow  # 32 tabular level-1 runs, ~40 CPU-s
@pytest.mark.xfail(
    strict=True,
    reason="pre-registered direction refuted by its first run (docs/credit_gym.md, 'Tree mode'): tree GiGPO "
    "AUC 0.681 vs flat GiGPO 0.723 on tabular level 1; kept strict so that a change that makes it pass shows",
)
def test_quick_tree_gigpo_beats_flat_gigpo(tmp_path: Path) -> None:
    """Pre-registered in docs/credit_gym.md ("Tree mode") before it ran: at equal env steps (a tree's shared
    prefix counted once), tree GiGPO's mean AUC beats flat GiGPO's on tabular level 1, with the paired
    per-seed AUC difference's one-sided 90% Student-t lower bound above 0."""
    out = tmp_path / "tree.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "studies" / "scripts" / "credit_gym.py"),
            "--tree",
            "--quick",
            "--out",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        timeout=1800,
    )
    cells = json.loads(out.read_text())["results"]["tabular"]["1"]
    flat, tree = cells["flat_gigpo"], cells["tree_gigpo"]
    assert flat["seeds"] == tree["seeds"] == credit_gym.QUICK_TREE.seeds == 16
    assert abs(flat["mean_env_steps"] - tree["mean_env_steps"]) <= 4 * 8 * 10  # one update of level 1
    xs = [float(point["checkpoint"]) for point in flat["curve"]]
    difference = np.array([credit_gym.auc(xs, row) for row in tree["per_seed_success"]]) - np.array(
        [credit_gym.auc(xs, row) for row in flat["per_seed_success"]]
    )
    lower = difference.mean() - T90_DF15 * difference.std(ddof=1) / math.sqrt(difference.size)
    assert tree["auc"]["mean"] > flat["auc"]["mean"]
    assert lower > 0.0, f"tree - flat GiGPO AUC: mean {difference.mean():.3f}, lower bound {lower:.3f}"


def test_a_tree_update_shares_its_prefix_and_counts_each_env_step_once() -> None:
    config = credit_gym.QUICK_TREE
    train, _ = credit_gym.task_split(config, "tabular", 1)
    actions = credit_gym.action_set(True)
    policy = credit_gym.make_policy(config, "tabular", 0)
    envs = [credit_gym.MazeEnv(max_steps=10, level=1) for _ in range(32)]
    played, cost = credit_gym.play_tree(envs, train[:4], 1, policy, actions, np.random.default_rng(0), config)
    assert len(played.episodes) == 4 * 8
    batch = episodes_to_batch(played.episodes)
    assert batch.is_tree and cost == batch.num_steps - int(batch.shared_copy.sum())
    for episode in played.episodes[8:]:  # the branches, after the 8 roots
        root = next(e for e in played.episodes if e.episode_id == episode.parent_id)
        assert episode.turns[: episode.branch_turn] == root.turns[: episode.branch_turn]
        assert episode.group_id == root.group_id and len(episode.turns) > (episode.branch_turn or 0)
    assert [t.index for t in played.episodes[-1].turns] == list(range(len(played.episodes[-1].turns)))


def test_tree_summary_pairs_each_level_with_its_own_runs() -> None:
    config = replace(credit_gym.QUICK_TREE, levels=(1, 2), bootstrap=10)

    def run(level: int, rollout: str, seed: int, final: float) -> dict:
        curve = [{"checkpoint": x, "success": y} for x, y in ((0, 0.1), (100, final))]
        spec = {"policy": "tabular", "level": level, "estimator": "gigpo", "rollout": rollout, "seed": seed}
        return {
            **spec,
            "curve": curve,
            **dict.fromkeys(credit_gym.RUN_KEYS, 0.0),
            "env_steps": 100,
            "wall_s": 1,
        }

    runs = [run(level, rollout, seed, 0.1 * level + (0.3 if rollout == "tree" else 0.0) + 0.01 * seed)
            for level in (1, 2) for rollout in ("flat", "tree") for seed in range(3)]  # fmt: skip
    results = credit_gym.summarise_tree(config, runs)["results"]["tabular"]
    for level in ("1", "2"):
        paired = results[level]["tree_vs_flat_gigpo"]
        assert paired["final"] == results[level]["tree_gigpo"]["final"]
        assert paired["final_minus_grpo"]["mean"] == pytest.approx(0.3)
    again = credit_gym.summarise_tree(
        config, credit_gym.runs_from_tree_summary({"results": {"tabular": results}})
    )
    assert again["results"]["tabular"]["2"]["tree_gigpo"]["final"] == results["2"]["tree_gigpo"]["final"]
