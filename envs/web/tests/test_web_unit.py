"""Pure-logic tests of the web envs (no Docker): tool-call parsing, tasks, the shop's catalogue and reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentrl_web import shop
from agentrl_web.env import MiniWobEnv, ShopEnv, parse_call
from agentrl_web.tasks import HELDOUT_SEED_BASE, MINIWOB_TASKS, generate

from agentrl.env import tools_of
from agentrl.env.checker import check_tool_specs
from agentrl.errors import EnvError
from agentrl.types import ToolCall


def test_tool_specs_are_valid() -> None:
    check_tool_specs(list(tools_of("agentrl/WebMiniWob-v0")))
    assert [spec["function"]["name"] for spec in tools_of("agentrl/WebShop-v0")] == [
        "click",
        "type",
        "press",
        "scroll",
        "select",
        "stop",
    ]


def test_parse_call_accepts_bracketed_string_ids() -> None:
    request, problem = parse_call(ToolCall(name="click", arguments={"element_id": "[7]"}))
    assert request == {"op": "click", "id": 7} and problem == ""


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall(name="jump", arguments={}), "unknown tool 'jump'"),
        (ToolCall(name="click", arguments={}), "click takes ['element_id']"),
        (ToolCall(name="click", arguments={"element_id": True}), "element_id must be a number"),
        (ToolCall(name="type", arguments={"element_id": 3, "text": 5}), "text must be a string"),
    ],
)
def test_parse_call_explains_bad_calls(call: ToolCall, message: str) -> None:
    request, problem = parse_call(call)
    assert request is None and message in problem


def test_splits_are_disjoint_and_balanced() -> None:
    train = generate("miniwob", "train", 50)
    heldout = generate("miniwob", "heldout", 20)
    assert not {t["id"] for t in train} & {t["id"] for t in heldout}
    assert all(t["seed"] >= HELDOUT_SEED_BASE for t in heldout)
    assert {t["task"] for t in train[: len(MINIWOB_TASKS)]} == set(MINIWOB_TASKS)


def test_task_files_match_the_generator() -> None:
    for suite, family in (("web-miniwob", "miniwob"), ("web-shop", "shop")):
        lines = Path(f"tasks/{suite}/heldout.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == generate(family, "heldout", len(lines))


def test_shop_is_deterministic_and_its_target_scores_one() -> None:
    for seed in range(20):
        products, goal = shop.make_shop(seed)
        assert shop.make_shop(seed) == (products, goal)
        purchase = {"id": goal.target_id, "color": goal.color, "size": goal.size}
        assert shop.purchase_reward(seed, purchase) == 1.0
        assert shop.search(products, goal.category)[0].category == goal.category


def test_shop_reward_gives_partial_credit() -> None:
    products, goal = shop.make_shop(3)
    wrong_colour = next(c for c in shop.COLORS if c != goal.color)
    partial = shop.purchase_reward(3, {"id": goal.target_id, "color": wrong_colour, "size": goal.size})
    assert 0.0 < partial < 1.0
    other = next(p for p in products if p.category != goal.category)
    assert shop.purchase_reward(3, {"id": other.id, "color": goal.color, "size": goal.size}) == 0.0
    assert shop.purchase_reward(3, None) == 0.0


def test_bad_task_records_are_clear_errors() -> None:
    with pytest.raises(EnvError, match="unknown MiniWoB task 'draw-circle'"):
        MiniWobEnv().validate_task({"id": "x", "task": "draw-circle", "seed": 1})
    with pytest.raises(EnvError, match="missing 'seed'"):
        ShopEnv().validate_task({"id": "x"})
