"""Scripted policies for the web envs: they read only the text observation, as a model would.

What this is: test helpers that solve the curated MiniWoB++ tasks and buy the asked product in the shop,
proving the observation carries what a task needs and the actions do what they say. What this is not: a
baseline agent (they parse the known instruction templates).
"""

from __future__ import annotations

import re

from agentrl_web.scripted import call, elements  # the env's own scripted policy reads pages the same way

from agentrl.types import Action


def quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def first_id(items: list[tuple[int, str, str, str]], kind: str, text: str | None = None) -> int:
    for element_id, element_kind, element_text, _ in items:
        if element_kind == kind and (text is None or element_text == text):
            return element_id
    raise AssertionError(f"no {kind} {text!r} in the observation")


def miniwob_plan(task: str, observation: str) -> list[Action]:
    """The actions that solve `task` given its first observation."""
    items = elements(observation)
    query = items[0][2]
    targets = quoted(query)
    if task == "click-button":
        return [call("click", element_id=first_id(items, "button", targets[0]))]
    if task == "click-link":
        return [call("click", element_id=first_id(items, "text", targets[0]))]
    if task == "click-dialog":
        return [call("click", element_id=first_id(items, "button", "Close"))]
    if task in ("click-checkboxes", "click-option"):
        wanted = re.match(r"Select (.*?) and click Submit", query)
        names = [] if wanted is None or wanted[1] == "nothing" else re.split(r", | and ", wanted[1])
        kind = "checkbox" if task == "click-checkboxes" else "radio"
        plan = [call("click", element_id=first_id(items, "label", name) + 1) for name in names]
        assert all(
            first_id(items, "label", name) + 1 in {i for i, k, _, _ in items if k == kind} for name in names
        )
        return [*plan, call("click", element_id=first_id(items, "button", "Submit"))]
    if task == "choose-list":
        option = re.match(r"Select (.*) from the list", query)
        assert option is not None
        return [
            call("select", element_id=first_id(items, "select"), option=option[1]),
            call("click", element_id=first_id(items, "button", "Submit")),
        ]
    if task == "enter-text":
        return [
            call("type", element_id=first_id(items, "input"), text=targets[0]),
            call("click", element_id=first_id(items, "button", "Submit")),
        ]
    if task == "enter-password":
        fields = [element_id for element_id, kind, _, _ in items if kind == "input"]
        return [
            *[call("type", element_id=field, text=targets[0]) for field in fields],
            call("click", element_id=first_id(items, "button", "Submit")),
        ]
    if task == "focus-text":
        return [call("click", element_id=first_id(items, "input"))]
    if task == "login-user":
        fields = [element_id for element_id, kind, _, _ in items if kind == "input"]
        return [
            call("type", element_id=fields[0], text=targets[0]),
            call("type", element_id=fields[1], text=targets[1]),
            call("click", element_id=first_id(items, "button", "Login")),
        ]
    raise AssertionError(f"no scripted plan for {task}")
