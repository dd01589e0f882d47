"""Docker tests of the web envs: real Chromium in the agentrl/sandbox-web image, scripted policies."""

from __future__ import annotations

import base64

import pytest
from agentrl_web.env import MiniWobEnv, ShopEnv
from agentrl_web.shop import make_shop
from agentrl_web.tasks import MINIWOB_TASKS, miniwob_task, shop_task
from web_scripted import call, elements, first_id, miniwob_plan

from agentrl.env import make
from agentrl.env.checker import check_env

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def miniwob_env():
    env = MiniWobEnv()
    yield env
    env.close()


@pytest.mark.parametrize("task", MINIWOB_TASKS)
def test_scripted_policy_solves_miniwob_task(miniwob_env: MiniWobEnv, task: str) -> None:
    solved = 0
    for seed in (1, 2):
        observation, _ = miniwob_env.reset(options={"task": miniwob_task(task, seed, "train")})
        plan = miniwob_plan(task, observation)
        for number, action in enumerate(plan):
            result = miniwob_env.step(action)
            assert not result.info["invalid"], result.observation
            if number < len(plan) - 1:
                assert not result.terminated, f"{task} ended early: {result.observation}"
        assert result.terminated and result.reward == 1.0, (task, seed, result.observation)
        solved += 1
    assert solved == 2


def test_wrong_button_gets_zero(miniwob_env: MiniWobEnv) -> None:
    observation, _ = miniwob_env.reset(options={"task": miniwob_task("click-button", 1, "train")})
    wanted = first_id(elements(observation), "button", elements(observation)[0][2].split('"')[1])
    other = next(
        i
        for i, kind, text, _ in elements(observation)
        if kind == "button" and i != wanted and text != elements(observation)[0][2].split('"')[1]
    )
    result = miniwob_env.step(call("click", element_id=other))
    assert result.terminated and result.reward == 0.0


def test_invalid_element_id_is_an_invalid_action(miniwob_env: MiniWobEnv) -> None:
    observation, info = miniwob_env.reset(options={"task": miniwob_task("enter-text", 3, "train")})
    result = miniwob_env.step(call("click", element_id=9999))
    assert result.info["invalid"] and "no element [9999]" in result.observation
    assert not result.terminated and result.info["state_key"] == info["state_key"]
    result = miniwob_env.step(call("type", element_id="abc", text="x"))
    assert result.info["invalid"] and "element_id must be a number" in result.observation


def test_check_env_miniwob() -> None:
    env = make("agentrl/WebMiniWob-v0")
    try:
        check_env(env, seed=0, options={"task": miniwob_task("click-button", 5, "train")})
    finally:
        env.close()


def test_screenshot_is_a_png() -> None:
    env = MiniWobEnv(screenshot=True)
    try:
        _, info = env.reset(options={"task": miniwob_task("click-button", 1, "train")})
        assert base64.b64decode(info["screenshot"]).startswith(b"\x89PNG\r\n\x1a\n")
    finally:
        env.close()


def buy_target(env: ShopEnv, seed: int) -> float:
    """The scripted shopper: search for the target's title, open it, choose the options, buy."""
    products, goal = make_shop(seed)
    target = next(p for p in products if p.id == goal.target_id)
    observation, _ = env.reset(options={"task": shop_task(seed, "train")})
    items = elements(observation)
    result = env.step(call("type", element_id=first_id(items, "input"), text=target.title))
    result = env.step(call("click", element_id=first_id(elements(result.observation), "button", "Search")))
    links = [
        i for i, kind, text, _ in elements(result.observation) if kind == "link" and text == target.title
    ]
    for link in links:
        page = env.step(call("click", element_id=link))
        if f"Price: ${target.price:.2f}" in page.observation:
            break
        env.step(call("click", element_id=first_id(elements(page.observation), "link", "Back")))
    items = elements(page.observation)
    selects = [i for i, kind, _, _ in items if kind == "select"]
    env.step(call("select", element_id=selects[0], option=goal.color))
    if goal.size is not None:
        env.step(call("select", element_id=selects[1], option=goal.size))
    result = env.step(call("click", element_id=first_id(items, "button", "Buy Now")))
    assert result.terminated, result.observation
    return result.reward


def test_scripted_shopper_buys_the_right_product() -> None:
    env = ShopEnv()
    try:
        rewards = [buy_target(env, seed) for seed in (0, 1, 2)]
    finally:
        env.close()
    assert rewards == [1.0, 1.0, 1.0]


def test_check_env_shop() -> None:
    env = make("agentrl/WebShop-v0")
    try:
        check_env(env, seed=0, options={"task": shop_task(4, "train")})
    finally:
        env.close()
