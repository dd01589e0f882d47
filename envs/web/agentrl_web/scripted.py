"""The web envs' scripted policies (`agentrl demos --policy scripted`): they read the text observation, as a
model would, and act with the env's tools.

What this is: `miniwob_policy` (solves the curated MiniWoB++ tasks from their first page) and `shop_policy`
(searches the target product's title, opens the result with the right price, chooses its colour and size,
buys), the optional demonstrating policies of `MiniWobEnv` and `ShopEnv` (the `ScriptedPolicy` contract of
`agentrl.demos`). They are the plays of the Docker tests (envs/web/tests/web_scripted.py), written as
generators. A page they do not recognise ends their plan (the episode is then not kept as a demonstration).
What this is not: a baseline (they parse the known instruction templates; the shopper knows the target from
the shop's seed).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any

from agentrl.types import Action, ToolCall
from agentrl_web.shop import make_shop

LINE = re.compile(r'^\[(\d+)\] (\w+)(?: "(.*)")?(.*)$')
Element = tuple[int, str, str, str]


def elements(observation: str) -> list[Element]:
    """(id, kind, text, rest) of every element line of a page."""
    found = []
    for line in observation.splitlines():
        match = LINE.match(line)
        if match:
            found.append((int(match[1]), match[2], match[3] or "", match[4]))
    return found


def call(name: str, **arguments: Any) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def find(items: list[Element], kind: str, text: str | None = None) -> int | None:
    """The id of the first element of `kind` (with exactly `text`, when given), or None."""
    for element_id, element_kind, element_text, _ in items:
        if element_kind == kind and (text is None or element_text == text):
            return element_id
    return None


def miniwob_plan(task: str, observation: str) -> list[Action] | None:
    """The actions that solve MiniWoB task `task` from its first page, or None when the page is not one the
    plan recognises."""
    items = elements(observation)
    if not items:
        return None
    query = items[0][2]
    targets = re.findall(r'"([^"]*)"', query)
    inputs = [element_id for element_id, kind, _, _ in items if kind == "input"]

    def ids(*found: int | None) -> list[int] | None:
        return None if any(value is None for value in found) else [int(value) for value in found if value]

    if task in ("click-button", "click-link") and targets:
        found = ids(find(items, "button" if task == "click-button" else "text", targets[0]))
        return None if found is None else [call("click", element_id=found[0])]
    if task == "click-dialog":
        found = ids(find(items, "button", "Close"))
        return None if found is None else [call("click", element_id=found[0])]
    if task in ("click-checkboxes", "click-option"):
        wanted = re.match(r"Select (.*?) and click Submit", query)
        names = [] if wanted is None or wanted[1] == "nothing" else re.split(r", | and ", wanted[1])
        labels = [find(items, "label", name) for name in names]
        found = ids(*labels, find(items, "button", "Submit"))
        if found is None:
            return None
        *boxes, submit = found
        return [*(call("click", element_id=box + 1) for box in boxes), call("click", element_id=submit)]
    if task == "choose-list":
        option = re.match(r"Select (.*) from the list", query)
        found = ids(find(items, "select"), find(items, "button", "Submit"))
        if option is None or found is None:
            return None
        return [call("select", element_id=found[0], option=option[1]), call("click", element_id=found[1])]
    if task in ("enter-text", "enter-password") and targets and inputs:
        fields = inputs[:1] if task == "enter-text" else inputs
        found = ids(find(items, "button", "Submit"))
        if found is None:
            return None
        return [
            *(call("type", element_id=field, text=targets[0]) for field in fields),
            call("click", element_id=found[0]),
        ]
    if task == "focus-text" and inputs:
        return [call("click", element_id=inputs[0])]
    if task == "login-user" and len(targets) >= 2 and len(inputs) >= 2:
        found = ids(find(items, "button", "Login"))
        if found is None:
            return None
        return [
            call("type", element_id=inputs[0], text=targets[0]),
            call("type", element_id=inputs[1], text=targets[1]),
            call("click", element_id=found[0]),
        ]
    return None


def miniwob_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """The plan of `miniwob_plan`, one action per turn."""
    for action in miniwob_plan(str(task["task"]), observation) or ():  # noqa: UP028 (see ScriptedPolicy)
        yield action


def shop_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """Search the target's title, open the result whose page shows its price (going back from the others),
    choose the asked colour and size, click Buy Now."""
    products, goal = make_shop(int(task["seed"]))
    target = next(product for product in products if product.id == goal.target_id)
    search_box = find(elements(observation), "input")
    if search_box is None:
        return
    observation = yield call("type", element_id=search_box, text=target.title)
    button = find(elements(observation), "button", "Search")
    if button is None:
        return
    results = yield call("click", element_id=button)
    links = [i for i, kind, text, _ in elements(results) if kind == "link" and text == target.title]
    page = ""
    for link in links:
        page = yield call("click", element_id=link)
        if f"Price: ${target.price:.2f}" in page:
            break
        back = find(elements(page), "link", "Back")
        if back is None:
            return
        yield call("click", element_id=back)
    else:
        return
    items = elements(page)
    selects = [i for i, kind, _, _ in items if kind == "select"]
    buy = find(items, "button", "Buy Now")
    if not selects or buy is None:
        return
    yield call("select", element_id=selects[0], option=goal.color)
    if goal.size is not None and len(selects) > 1:
        yield call("select", element_id=selects[1], option=goal.size)
    yield call("click", element_id=buy)
