"""`agentrl.study.gonogo` and `agentrl.study.signal`: a go/no-go file's checks (each error names the fix),
the measures read from a record, the verdict under each rule, and the signal measures on hand-made episodes
(pure logic; tests/smoke/test_study_gonogo_cli.py measures a real model).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.study.gonogo import borrowed_evaluations, load_gonogo, settled, spec_kind, table, verdict
from agentrl.study.runner import Layout, write_record
from agentrl.study.signal import (
    advantage_comparison,
    compare_advantages,
    part_start_rows,
    part_start_signal,
    success_summary,
)
from agentrl.types import Action, Episode, Turn

GOOD: dict[str, Any] = {
    "kind": "gonogo",
    "task": "calc-chain",
    "variants": [
        {"name": "base"},
        {"name": "grpo-400", "overrides": ["credit.estimator=grpo"], "train_env_steps": 400},
    ],
    "decodings": [0.0, 0.5],
    "criteria": [
        {"name": "range", "measure": "best_per_part_success", "at_least": 0.2, "at_most": 0.6},
        {"name": "equal parts", "measure": "part_spread", "at_most": 0.1},
        {"name": "signal", "measure": "later_part_signal_share", "at_least": 0.5},
        {"name": "step term", "measure": "cosine_gigpo_vs_episode_term", "at_most": 0.9},
    ],
}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"variants": []}, "name what to measure"),
        ({"criteria": []}, "name what the go/no-go must find"),
        ({"criteria": [{"name": "x", "measure": "vibes", "at_least": 1}]}, "measure 'vibes' is unknown"),
        ({"criteria": [{"name": "x", "measure": "part_spread"}]}, "has no bound"),
        ({"rule": "most"}, "study.rule='most' is unknown"),
        (
            {"criteria": [{"name": "x", "measure": "part_spread", "at_most": 1, "scope": ["sft"]}]},
            "not variants",
        ),
        (
            {"criteria": [{"name": "x", "measure": "part_spread", "at_most": 1, "across": "most"}]},
            "use any or all",
        ),
        ({"batch": False}, "reads the batch: set study.batch to true"),
        ({"gigpo_options": ["gamma"]}, "is not key=value"),
        ({"variants": [{"name": "base", "evaluations_from": "gonogo8"}]}, "must be STUDY/VARIANT"),
        ({"gigpo_options": ["gama=0.5"]}, "gama"),
        (
            {"variants": [{"name": "base"}, {"name": "grpo-400", "evaluate": False}]},
            "give it a scope without them",
        ),
        ({"decodings": []}, "reads evaluations: list study.decodings"),
        ({"budget": 3}, "unknown key(s) ['budget']"),
    ],
)
def test_a_gonogo_file_that_is_not_well_posed_is_refused_with_the_fix(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_gonogo(write(tmp_path, {**GOOD, **change}))
    assert message in str(caught.value)


def test_the_kind_decides_which_study_a_file_is(tmp_path: Path) -> None:
    assert spec_kind(write(tmp_path, GOOD)) == "gonogo"
    assert spec_kind(write(tmp_path, {"task": "maze"})) == "comparison"


def record(best: float, parts: list[float], share: float, cosine: float) -> dict[str, Any]:
    return {
        "done": True,
        "evaluations": [
            {"temperature": 0.5, "per_part_success": best - 0.1, "by_part_index": [0.0, 0.0, 0.0]},
            {"temperature": 0.0, "per_part_success": best, "by_part_index": parts},
        ],
        "batch": {
            "part_start_signal": {"share_with_signal": share},
            "gigpo_episode_term_vs_gigpo": {"cosine": cosine},
        },
    }


def test_each_criterion_holds_on_any_of_its_variants_and_every_criterion_makes_go(tmp_path: Path) -> None:
    untrained = [{**item, "scope": ["base"]} for item in GOOD["criteria"][:2]]
    spec = load_gonogo(write(tmp_path, {**GOOD, "criteria": [*untrained, *GOOD["criteria"][2:]]}))
    records = {
        "base": record(0.3, [0.35, 0.3, 0.25, 0.3], 0.25, 0.96),  # in range, parts equal; little signal
        "grpo-400": record(0.8, [0.5, 0.9, 0.8, 0.8], 0.6, 0.8),  # trained: signal, out of range (not asked)
    }
    found = verdict(spec, records)
    assert found["go"] and [item["holds"] for item in found["criteria"]] == [True, True, True, True]
    assert [item["name"] for item in found["variants"]["grpo-400"]["criteria"]] == ["signal", "step term"]
    base = found["variants"]["base"]
    assert base["measures"]["part_spread"] == pytest.approx(0.1)
    assert [item["holds"] for item in base["criteria"]] == [True, True, False, False]
    shown = table(found)
    assert "**GO**" in shown and "base, signal: later_part_signal_share 0.250 >= 0.5: fails" in shown

    across_all = [{**item, "across": "all"} for item in GOOD["criteria"][2:]]
    strict = load_gonogo(write(tmp_path, {**GOOD, "criteria": [*untrained, *across_all]}))
    assert not verdict(strict, records)["go"]
    unmeasured = verdict(spec, {"base": records["base"], "grpo-400": None})
    assert not unmeasured["go"] and not unmeasured["complete"]
    assert "grpo-400 (not measured)" in table(unmeasured)


def test_rule_variant_says_go_when_one_variant_passes_every_criterion(tmp_path: Path) -> None:
    spec = load_gonogo(write(tmp_path, {**GOOD, "rule": "variant"}))
    records = {
        "base": record(0.3, [0.5, 0.2, 0.2], 0.25, 0.96),  # parts unequal, little signal: fails three
        "grpo-400": record(0.5, [0.5, 0.45, 0.55], 0.6, 0.8),
    }
    found = verdict(spec, records)
    assert found["go"] and found["passing"] == ["grpo-400"]
    assert "passing: grpo-400" in table(found)
    records["grpo-400"] = record(0.5, [0.5, 0.45, 0.55], 0.4, 0.8)  # its signal share now fails
    assert not verdict(spec, records)["go"]


def test_a_bound_below_is_strict_and_a_nan_value_passes_nothing(tmp_path: Path) -> None:
    data = {**GOOD, "criteria": [{"name": "b3", "measure": "cosine_gigpo_vs_episode_term", "below": 0.9}]}
    spec = load_gonogo(write(tmp_path, data))
    at_bound = verdict(
        spec, {"base": record(0.3, [0.3], 0.5, 0.9), "grpo-400": record(0.3, [0.3], 0.5, float("nan"))}
    )
    assert at_bound["passing"] == []


def turn(index: int, part: int, reward: float) -> Turn:
    return Turn(
        index=index, prompt_ids=(1,), completion_ids=(2,), completion_logprobs=(0.0,), text="c",
        action=Action(text="c"), observation="", reward=reward, invalid=False, state_key=f"part{part}",
        info={"part": part, "part_correct": bool(reward)},
    )  # fmt: skip


def episode(group: str, number: int, rewards: list[float]) -> Episode:
    turns = tuple(turn(part, part, reward) for part, reward in enumerate(rewards))
    return Episode(
        episode_id=f"{group}-{number}", env_id="calc", task_id=group, group_id=group, seed=0, turns=turns,
        stop_reason="terminated",
    )  # fmt: skip


def test_part_start_signal_counts_later_part_anchor_groups_with_unequal_returns_to_go() -> None:
    episodes = [
        episode("g1", 0, [1.0, 0.0, 1.0]),
        episode("g1", 1, [0.0, 0.0, 1.0]),  # part 2 (index 1) returns to go equal (1 and 1); part 3 equal
        episode("g2", 0, [1.0, 1.0, 0.0]),
        episode("g2", 1, [1.0, 0.0, 0.0]),  # part 2 unequal (1 vs 0), part 3 equal
    ]
    found = part_start_signal(episodes, parts=3)
    assert (found["anchor_groups"], found["with_signal"]) == (4, 1)
    assert found["by_part"]["1"] == {"anchor_groups": 2, "with_signal": 1}


def test_success_summary_counts_parts_and_leaves_infrastructure_failures_out() -> None:
    rows = [
        {"forms": ["words", "reversed"], "parts_correct": [True, False], "turns": 4, "invalid_turns": 1,
         "infra_failure": False},
        {"forms": ["words", "words"], "parts_correct": [True, True], "turns": 4, "invalid_turns": 0,
         "infra_failure": False},
        {"forms": None, "parts_correct": [False, False], "turns": 1, "invalid_turns": 0,
         "infra_failure": True},
    ]  # fmt: skip
    found = success_summary(rows)
    assert found["per_part_success"] == 0.75 and found["by_part_index"] == [1.0, 0.5]
    assert found["by_form"]["reversed"] == {"success": 0.0, "n": 1} and found["infra_failures"] == 1
    assert found["invalid_turn_rate"] == 1 / 8 and found["all_parts_success"] == 0.5


def test_compare_advantages_reads_collinear_and_flipped_vectors() -> None:
    same = compare_advantages(np.array([1.0, -1.0, 0.0]), np.array([2.0, -2.0, 0.0]))
    assert (
        same["cosine"] == pytest.approx(1.0) and same["sign_differs"] == 0.0 and same["turns_compared"] == 2
    )
    flipped = compare_advantages(np.array([1.0, -1.0]), np.array([-1.0, 1.0]))
    assert flipped["cosine"] == pytest.approx(-1.0) and flipped["sign_differs"] == 1.0


def test_a_gonogo_is_settled_once_a_criterion_can_no_longer_hold(tmp_path: Path) -> None:
    untrained = [{**item, "scope": ["base"]} for item in GOOD["criteria"][:2]]
    spec = load_gonogo(write(tmp_path, {**GOOD, "criteria": [*untrained, *GOOD["criteria"][2:]]}))
    too_easy = record(0.95, [0.9, 1.0, 1.0, 0.9], 0.25, 0.96)  # out of range: only the base could say so
    assert settled(spec, {"base": too_easy, "grpo-400": None}) == ["range"]
    in_range = record(0.3, [0.35, 0.3, 0.25, 0.3], 0.25, 0.96)  # its signal fails, the checkpoint may not
    assert settled(spec, {"base": in_range, "grpo-400": None}) == []
    variant_rule = load_gonogo(write(tmp_path, {**GOOD, "rule": "variant"}))
    assert settled(variant_rule, {"base": too_easy, "grpo-400": None}) == []


def test_the_batch_comparison_runs_gigpo_with_the_options_its_arm_will_use() -> None:
    episodes = [  # equal returns, parts right at other times: a discount separates them at the start
        episode("g1", 0, [1.0, 0.0, 1.0]),
        episode("g1", 1, [1.0, 1.0, 0.0]),
        episode("g2", 0, [0.0, 0.0, 1.0]),
        episode("g2", 1, [1.0, 0.0, 0.0]),
    ]
    default = advantage_comparison(episodes, parts=3)
    halved = advantage_comparison(episodes, parts=3, gigpo_options={"gamma": 0.5})
    assert default["gigpo_options"] == {} and halved["gigpo_options"] == {"gamma": 0.5}
    assert halved["advantages"]["gigpo"] != default["advantages"]["gigpo"]
    assert halved["advantages"]["grpo"] == default["advantages"]["grpo"]


def test_evaluations_are_borrowed_only_from_the_same_model_on_the_same_held_out_set(tmp_path: Path) -> None:
    """`evaluations_from`: another go/no-go's evaluations of the same model, task, held-out set and
    decodings are taken as they are; any difference, or an unfinished record, is refused with the fix."""
    evaluations = [{"temperature": t, "per_part_success": 0.3 + t} for t in (0.0, 0.3, 0.5)]
    (tmp_path / "earlier").mkdir()
    write(tmp_path / "earlier", {**GOOD, "decodings": [0.0, 0.3, 0.5]})
    later = tmp_path / "later"
    later.mkdir()
    borrowing = {**GOOD, "variants": [{"name": "base", "evaluations_from": "earlier/base"}]}
    spec = load_gonogo(write(later, borrowing))
    with pytest.raises(ConfigError, match="has not finished its evaluations"):
        borrowed_evaluations(spec, Layout(later), spec.variants[0])
    write_record(Layout(tmp_path / "earlier"), "base", {"variant": "base", "evaluations": evaluations})
    assert borrowed_evaluations(spec, Layout(later), spec.variants[0]) == [evaluations[0], evaluations[2]]
    for change in ({"eval_tasks": 64}, {"task": "calc"}, {"overrides": ["sampling.top_p=0.9"]}):
        other = load_gonogo(write(later, {**borrowing, **change}))
        with pytest.raises(ConfigError, match="is another measurement"):
            borrowed_evaluations(other, Layout(later), other.variants[0])
    missing = load_gonogo(
        write(later, {**borrowing, "variants": [{"name": "b", "evaluations_from": "x/base"}]})
    )
    with pytest.raises(ConfigError, match="not a study here"):
        borrowed_evaluations(missing, Layout(later), missing.variants[0])


def calc_like(group: str, number: int, rights: list[bool]) -> Episode:
    """Parts of a python call (reward 0, its printout a state of this episode's own) then a paid submit
    that shows the next part's question (a state every episode of the group reaches): calc's shape."""
    turns: list[Turn] = []
    for part, right in enumerate(rights):
        call = turn(len(turns), part, 0.0)
        turns.append(replace(call, state_key=f"{group}-{number}-printed-{part}", info={"part": part}))
        submit = turn(len(turns), part, float(right))
        info = {"part": part, "part_correct": right, "context_reset": True}
        turns.append(replace(submit, state_key=f"{group}-question-{part + 1}", info=info))
    return Episode(
        episode_id=f"{group}-{number}", env_id="calc", task_id=group, group_id=group, seed=0,
        turns=tuple(turns), stop_reason="terminated", initial_state_key=f"{group}-question-0",
    )  # fmt: skip


def test_the_step_term_reaches_the_part_starting_call_only_with_a_parts_return() -> None:
    episodes = [calc_like("g", 0, [True, False]), calc_like("g", 1, [False, True])]
    assert part_start_rows(episodes).tolist() == [True, False, True, False] * 2
    per_turn = advantage_comparison(episodes, parts=2, gigpo_options={"gamma": 0.0})["part_start_step_term"]
    assert per_turn == {"turns": 4, "nonzero": 0, "share": 0.0, "share_of_all_turns": 0.0}
    by_part = {"gamma": 1.0, "step_return": "part"}
    reached = advantage_comparison(episodes, parts=2, gigpo_options=by_part)["part_start_step_term"]
    assert reached == {"turns": 4, "nonzero": 4, "share": 1.0, "share_of_all_turns": 0.5}
