"""`studies/scripts/maze_goal_probe.py`: its pure measures on hand-made distributions, its closer-move reading
of real layouts, and its scoring of the four calls on the tiny random model against a plain full forward."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

import maze_goal_probe as probe  # noqa: E402

from agentrl.model_config import ModelConfig  # noqa: E402
from agentrl.models import load_model  # noqa: E402

LAYOUT = ["@#G.", "....", "....", "...."]  # G is two cells right, behind a wall: the path goes down first


def test_closer_moves_follow_the_bfs_path_not_the_straight_line() -> None:
    assert probe.closer_moves(LAYOUT) == {"down"}  # right points at G but bumps the wall
    assert probe.closer_moves(["....", ".@..", "....", "...G"]) == {"down", "right"}


def test_normalised_is_a_softmax_over_the_four_calls() -> None:
    probs = probe.normalised({"up": math.log(1), "down": math.log(3), "left": -math.inf, "right": 0.0})
    assert probs == pytest.approx({"up": 0.2, "down": 0.6, "left": 0.0, "right": 0.2})


def test_goal_response_is_zero_for_a_lean_and_one_for_a_goal_reader() -> None:
    lean = {"up": 0.1, "down": 0.7, "left": 0.1, "right": 0.1}
    closers = [frozenset({"down"}), frozenset({"right"}), frozenset({"up", "left"}), frozenset({"left"})]
    assert probe.goal_response([(lean, closer) for closer in closers]) == pytest.approx(0.0)
    reader = [({d: (1.0 / len(c) if d in c else 0.0) for d in probe.DIRECTIONS}, c) for c in closers]
    assert probe.closer_mass(reader) == pytest.approx(1.0)
    assert probe.goal_response(reader) == pytest.approx((0.5 + 1.0 + 0.75 + 1.0) / 4)  # up, down, left, right
    assert probe.closer_mass([(lean, closer) for closer in closers]) == pytest.approx(
        (0.7 + 0.1 + 0.2 + 0.1) / 4
    )


def test_call_logprobs_equal_a_plain_forward_of_prompt_and_call(tiny_model: Path) -> None:
    model, _ = load_model(ModelConfig(name=str(tiny_model)))
    prompt = [5, 17, 99, 42, 7, 3]
    calls = {"up": [11, 12, 13], "down": [11, 14], "left": [20], "right": [11, 12, 13, 30]}
    scores = probe.call_logprobs(model, prompt, calls, (0.8, 1.0))
    for name, ids in calls.items():
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        for t in (0.8, 1.0):
            expected = torch.log_softmax(logits / t, -1).gather(1, torch.tensor(ids)[:, None]).sum()
            assert scores[t][name] == pytest.approx(float(expected), abs=1e-4)


def test_the_probe_runs_end_to_end_on_the_tiny_model(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    assert probe.main(["--models", str(tiny_model), "--limit", "4", "--out", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["mazes"] == 4 and sum(result["direction_mass"].values()) == pytest.approx(1.0)
    assert 0.0 < result["random_closer"] <= 0.5 and 0.0 <= result["closer_mass"] <= 1.0
    assert 0.0 < result["call_mass"] < 1.0  # a random model spreads its mass far beyond the four calls
