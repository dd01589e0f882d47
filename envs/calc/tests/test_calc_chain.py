"""CalcEnv(parts=K) and the calc-chain suite: parts, rewards, state keys, and no leak of correctness.

Every path here ends before a sandbox would start (only `submit` and malformed turns), so no Docker.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from agentrl_calc.chain import generate_chains, make_chain, phrase
from agentrl_calc.env import ANSWER_RECORDED, CalcEnv, part_observation
from agentrl_calc.scripted import scripted_policy

from agentrl.env import check_env
from agentrl.errors import EnvError
from agentrl.types import Action, ToolCall

SUITE = Path(__file__).resolve().parents[3] / "tasks" / "calc-chain"
CHAIN = {
    "id": "chain-1",
    "questions": ["What is 12 times 3?", "Subtract 2 * 3 from 10 * 10. What is left?", "What is 7 * 8?"],
    "answers": ["36", "94", "56"],
}


def submit(answer: str) -> Action:
    return Action(text="", tool_calls=(ToolCall("submit", {"answer": answer}),))


def play(answers: list[str | None], parts: int = 3, max_steps: int = 3) -> list[tuple[str, float, dict]]:
    """(observation, reward, info) of every step; None plays an invalid turn instead of a submit."""
    env = CalcEnv(parts=parts, max_steps=max_steps)
    observation, info = env.reset(options={"task": CHAIN})
    steps = [(observation, 0.0, info)]
    for answer in answers:
        result = env.step(Action(text="hmm") if answer is None else submit(answer))
        steps.append((result.observation, result.reward, {**result.info, "done": result.terminated}))
    return steps


def test_check_env_passes_with_parts() -> None:
    check_env(CalcEnv(parts=3), options={"task": CHAIN})


def test_each_part_is_asked_in_turn_and_paid_on_its_own() -> None:
    steps = play(["36", "1", "56"])
    assert steps[0][0].startswith("Part 1 of 3: What is 12 times 3?")
    assert steps[1][0].startswith("Part 2 of 3: Subtract 2 * 3") and steps[2][0].startswith("Part 3 of 3:")
    assert [reward for _, reward, _ in steps[1:]] == [1.0, 0.0, 1.0]
    assert [info["part_correct"] for _, _, info in steps[1:]] == [True, False, True]
    assert [info["done"] for _, _, info in steps[1:]] == [False, False, True]
    assert steps[-1][2]["success"] is False and steps[-1][2]["parts_correct"] == 2


def test_all_parts_right_is_a_success() -> None:
    last = play(["36", "94", "56"])[-1][2]
    assert last["success"] is True and last["parts_correct"] == 3


def test_the_next_question_does_not_say_whether_the_last_was_right() -> None:
    right, wrong = play(["36", "94", "56"]), play(["35", "93", "55"])
    for (right_obs, _, right_info), (wrong_obs, _, wrong_info) in zip(right, wrong, strict=True):
        assert right_obs == wrong_obs and right_info["state_key"] == wrong_info["state_key"]
    assert not any("orrect" in observation for observation, _, _ in right + wrong)
    assert right[-1][0] == ANSWER_RECORDED


def test_the_state_key_is_the_part_not_the_answers() -> None:
    keys = [info["state_key"] for _, _, info in play(["36", "94", "56"])]
    assert len(set(keys[:3])) == 3  # parts 1, 2 and 3 are different states
    mixed = [info["state_key"] for _, _, info in play(["1", "94", "2"])]
    assert keys[:3] == mixed[:3]


def test_a_part_whose_budget_runs_out_scores_zero_and_moves_on_in_the_same_words() -> None:
    stalled = play([None, None, "94", "56"], max_steps=2)
    answered = play(["36", "94", "56"], max_steps=2)
    assert stalled[2][0] == answered[1][0] and stalled[2][2]["state_key"] == answered[1][2]["state_key"]
    assert stalled[1][2]["invalid"] is True and stalled[2][1] == 0.0
    assert stalled[-1][2]["parts_correct"] == 2 and stalled[-1][2]["done"] is True


def test_the_last_parts_budget_ends_the_episode_truncated() -> None:
    env = CalcEnv(parts=2, max_steps=1)
    two_parts = {**CHAIN, "questions": CHAIN["questions"][:2], "answers": CHAIN["answers"][:2]}
    env.reset(options={"task": two_parts})
    env.step(submit("36"))
    result = env.step(Action(text="hmm"))
    assert result.truncated and not result.terminated and result.info["parts_correct"] == 1


def test_a_repeated_call_ends_the_part_unanswered_only_when_asked() -> None:
    env = CalcEnv(parts=3, max_steps=3, end_part_on_repeat=True)
    env.reset(options={"task": CHAIN})
    first = env.step(Action(text="hmm"))
    repeat = env.step(Action(text=" hmm "))  # the same turn again (no call: its text, stripped)
    assert first.info["invalid"] is True and repeat.info["part"] == 0 and repeat.info["part_correct"] is None
    assert repeat.observation == part_observation(CHAIN["questions"][1], 1, 3) and repeat.reward == 0.0
    env.step(submit("93"))  # a wrong submit, then the same call at the start of part 3 is no repeat
    assert env.step(submit("93")).info["part"] == 2
    plain = CalcEnv(parts=3, max_steps=3)  # off by default: the repeat is played as any turn
    plain.reset(options={"task": CHAIN})
    plain.step(Action(text="hmm"))
    assert plain.step(Action(text="hmm")).info["part"] == 0 and plain._part == 0


def test_one_part_is_the_calc_env_unchanged() -> None:
    env = CalcEnv()
    observation, _ = env.reset(options={"task": {"id": "t", "question": "What is 2 * 3?", "answer": "6"}})
    assert not observation.startswith("Part") and env.step(submit("6")).observation == "Correct."


def test_a_task_with_the_wrong_number_of_parts_is_rejected() -> None:
    with pytest.raises(EnvError, match="a list of 4 strings"):
        CalcEnv(parts=4).reset(options={"task": CHAIN})
    with pytest.raises(EnvError, match="non-numeric"):
        CalcEnv(parts=3).reset(options={"task": {**CHAIN, "answers": ["1", "two", "3"]}})


def test_reset_without_a_task_draws_a_chain_from_the_seed() -> None:
    first, second = CalcEnv(parts=3), CalcEnv(parts=3)
    observation = first.reset(seed=4)[0]
    assert observation == second.reset(seed=4)[0] and observation.startswith("Part 1 of 3")


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_the_examples_show_k_solved_parts_in_the_envs_words(parts: int) -> None:
    examples = CalcEnv(parts=parts).examples
    assert [m["role"] for m in examples] == ["user", "assistant", "tool", "assistant"] + [
        "tool",
        "assistant",
        "tool",
        "assistant",
    ] * (parts - 1)
    for part in range(parts):
        ask, code, output, answer = examples[4 * part : 4 * part + 4]
        assert ask["content"].startswith(f"Part {part + 1} of {parts}: ")
        expression = code["tool_calls"][0]["arguments"]["code"].removeprefix("print(").removesuffix(")")
        value = answer["tool_calls"][0]["arguments"]["answer"]
        assert str(eval(expression)) == value and output["content"] == f"exit code 0\n{value}\n"


def test_the_scripted_policy_solves_every_part() -> None:
    task = make_chain(np.random.default_rng(3), 3, ("words", "reversed"))
    env = CalcEnv(parts=3)
    observation, _ = env.reset(options={"task": task})
    policy = scripted_policy(task, observation, {})
    action, rewards = next(policy), []
    while True:
        name = action.tool_calls[0].name
        if name == "python":  # what the sandbox would print, without one
            expression = action.tool_calls[0].arguments["code"].removeprefix("print(").removesuffix(")")
            feedback = f"exit code 0\n{eval(expression)}\n"
        else:
            result = env.step(action)
            rewards.append(result.reward)
            feedback = result.observation
            if result.terminated:
                break
        action = policy.send(feedback)
    assert rewards == [1.0, 1.0, 1.0]


def test_phrasing_keeps_the_value() -> None:
    assert phrase("3 * 4 - 5 * 6", "reversed") == "Subtract 5 * 6 from 3 * 4. What is left?"
    assert phrase("3 * 4 + 5", "words") == "What is 3 times 4 plus 5?"
    assert phrase("3 * 4", "plain") == "What is 3 * 4?"


def test_chains_are_deterministic_and_the_splits_disjoint() -> None:
    train, heldout = generate_chains("train", 30), generate_chains("heldout", 30)
    assert train == generate_chains("train", 30)
    assert not {c["id"] for c in train} & {c["id"] for c in heldout}
    for chain in train + heldout:
        assert [str(eval(e)) for e in chain["expressions"]] == chain["answers"]
        assert all(form in ("words", "reversed") for form in chain["forms"])


def test_the_committed_suite_is_what_the_generator_writes() -> None:
    manifest = json.loads((SUITE / "manifest.json").read_text())
    for split, digest in manifest["sha256"].items():
        assert hashlib.sha256((SUITE / split).read_bytes()).hexdigest() == digest
    heldout = [json.loads(line) for line in (SUITE / "heldout.jsonl").read_text().splitlines()]
    assert len(heldout) >= 48 and all(len(c["questions"]) == manifest["parts"] for c in heldout)
    settings = (manifest["parts"], manifest["forms"], manifest["seed"], manifest["levels"])
    expected = generate_chains("heldout", 48, *settings)
    assert heldout[:48] == expected


def test_the_first_state_of_each_part_matches_the_examples_wording() -> None:
    assert part_observation("What is 1 * 2?", 1, 3).startswith("Part 2 of 3: What is 1 * 2? Use the python")


R4_OOD = SUITE.parent / "calc-chain-r4-ood"


def chains_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    ("suite", "form", "levels"),
    [
        ("calc-chain-r4", "reversed", [3]),
        ("calc-chain-s4", "story", [3]),
        ("calc-chain-s4m", "story", [3, 3, 4]),
    ],
)
def test_a_study_suite_is_one_wording_with_a_fresh_heldout_seed_and_no_heldout_part_in_training(
    suite: str, form: str, levels: list[int]
) -> None:
    """The 4-part suites of issue 53: one wording; held-out chains from a seed that made no training chain,
    and the out-of-distribution set in a wording training never shows; no held-out or out-of-distribution
    question or expression appears in training."""
    path = SUITE.parent / suite
    manifest = json.loads((path / "manifest.json").read_text())
    assert (manifest["parts"], manifest["forms"], manifest["levels"]) == (4, [form], levels)
    assert manifest["heldout_seed"] != manifest["seed"]
    train, heldout = chains_of(path / "train.jsonl"), chains_of(path / "heldout.jsonl")
    ood = chains_of(R4_OOD / "heldout.jsonl")
    assert len(heldout) >= 64 and len(ood) >= 64
    seen_questions = {q for chain in train for q in chain["questions"]}
    seen_expressions = {e for chain in train for e in chain["expressions"]}
    for chain in heldout + ood:
        assert not set(chain["questions"]) & seen_questions
        assert not set(chain["expressions"]) & seen_expressions
    assert all(found == form for chain in train + heldout for found in chain["forms"])
    assert all(found == "taken" for chain in ood for found in chain["forms"])
    for folder in (path, R4_OOD):
        written = json.loads((folder / "manifest.json").read_text())
        for split, digest in written["sha256"].items():
            assert hashlib.sha256((folder / split).read_bytes()).hexdigest() == digest
    regenerated = generate_chains("heldout", 64, 4, (form,), manifest["heldout_seed"], tuple(levels))
    assert heldout[:64] == regenerated


def test_the_taken_and_story_wordings_keep_the_value_and_the_operands_order() -> None:
    assert phrase("3 * 4 - 5 * 6", "taken") == "Take 5 * 6 away from 3 * 4. What remains?"
    assert phrase("3 * 4 + 5", "taken") == "To 5, add 3 * 4. What is the total?"
    story = phrase("3 * 4 - 5 * 6", "story")
    assert (
        story == "A depot had 3 * 4 boxes in 7 rooms and shipped 5 * 6 of them. How many boxes are left?"
    )  # 3 + 18 % 7
    assert phrase("3 * 4 + 5", "story").startswith("A depot had 5 boxes in ")


@pytest.mark.parametrize(
    ("form", "first", "second"),
    [
        ("reversed", "Subtract 419 * 13 from 2306 * 78.", "Subtract 388 * 21 from 5172 * 64."),
        ("words,reversed", "What is 2306 times 78 minus", "Subtract 388 * 21 from 5172 * 64."),
    ],
)
def test_the_example_parts_are_in_the_wordings_asked_for(form: str, first: str, second: str) -> None:
    env = CalcEnv(parts=4, example_form=form, example_parts=2)
    questions = [
        m["content"] for m in env.examples if m["role"] in ("user", "tool") and "Part" in m["content"]
    ]
    calls = [m["tool_calls"][0] for m in env.examples if m["role"] == "assistant"]
    assert len(questions) == 2 and len(calls) == 4  # two solved parts: python, then submit, each
    assert first in questions[0] and questions[0].startswith("Part 1 of 2")
    assert second in questions[1] and questions[1].startswith("Part 2 of 2")
    for python, submit in zip(calls[::2], calls[1::2], strict=True):
        assert str(eval(python["arguments"]["code"][6:-1])) == submit["arguments"]["answer"]
    with pytest.raises(EnvError, match="example_form must be one of"):
        CalcEnv(parts=4, example_form="shouted")


def test_level_four_is_three_products_and_its_examples_show_both_sizes_without_labels() -> None:
    chains = generate_chains("heldout", 20, 4, ("story",), 1, (3, 3, 4))
    for chain in chains:
        for level, expression, answer in zip(
            chain["levels"], chain["expressions"], chain["answers"], strict=True
        ):
            assert expression.count(" * ") == level - 1 and str(eval(expression)) == answer
    assert {level for chain in chains for level in chain["levels"]} == {3, 4}
    env = CalcEnv(parts=4, example_form="story", example_parts=2, example_levels=[3, 4], part_labels=False)
    questions = [
        m["content"] for m in env.examples if m["role"] in ("user", "tool") and "depot" in m["content"]
    ]
    assert len(questions) == 2 and not any("Part" in question for question in questions)
    assert "lost" not in questions[0] and "lost" in questions[1]
    observation, _ = env.reset(options={"task": chains[0]})
    assert observation.startswith("A depot had")
