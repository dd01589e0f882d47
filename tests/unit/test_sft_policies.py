"""The first-party envs' scripted policies (`agentrl demos --policy scripted`), driven as `ScriptedPlay`
drives them (next, then send each observation), on made-up observations: no Docker. Their runs through the
real envs are in docs/cold_start.md (`agentrl demos` on every env) and the Docker tests' scripted plays."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from agentrl_calc.scripted import scripted_policy as calc_policy
from agentrl_search.scripted import keywords
from agentrl_search.scripted import scripted_policy as search_policy
from agentrl_swebench.scripted import hunks
from agentrl_swebench.scripted import scripted_policy as swebench_policy
from agentrl_web.scripted import miniwob_plan, miniwob_policy

from agentrl.demos import scripted_policy_of
from agentrl.types import Action


def calls(turns: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(turn.tool_calls[0].name, dict(turn.tool_calls[0].arguments)) for turn in turns]


def play(policy: Generator[Any, str, None], observations: list[str]) -> list[Any]:
    """Every turn of `policy` when it is sent `observations` in order."""
    turns = [next(policy)]
    for observation in observations:
        try:
            turns.append(policy.send(observation))
        except StopIteration:
            break
    return turns


@pytest.mark.parametrize(
    "env_id",
    [
        "agentrl/Calc-v0",
        "agentrl/Maze-v0",
        "agentrl/Search-v0",
        "agentrl/WebShop-v0",
        "agentrl/WebMiniWob-v0",
        "agentrl/SWEBench-v0",
    ],
)
def test_every_first_party_env_has_a_scripted_policy(env_id: str) -> None:
    assert callable(scripted_policy_of(env_id))


def test_calc_runs_the_expression_then_submits_what_it_printed() -> None:
    task = {"id": "c", "question": "What is 12 * 34 + 5?", "answer": "413"}
    turns = play(calc_policy(task, "", {}), ["exit code 0\n413\n"])
    assert calls(turns) == [("python", {"code": "print(12 * 34 + 5)"}), ("submit", {"answer": "413"})]
    wrong = play(calc_policy(task, "", {}), ["exit code 1\nTraceback"])
    assert calls(wrong)[-1] == ("submit", {"answer": "413"})


def test_search_queries_keywords_then_missing_gold_titles_then_answers() -> None:
    question = 'Which function of the copy module is documented as: "Deep copy operation."?'
    assert keywords(question) == "copy Deep operation"
    task = {"id": "s", "question": question, "answer": "deepcopy", "gold_ids": ["py:copy.deepcopy"]}
    found = play(search_policy(task, "", {"format": "tags"}), ["Doc 1 (Title: copy.deepcopy) ..."])
    assert [turn.text for turn in found] == [
        "<search>copy Deep operation</search>",
        "<answer>deepcopy</answer>",
    ]
    missed = play(search_policy(task, "", {"format": "tools"}), ["Doc 1 (Title: copy.copy) ...", "..."])
    assert calls(missed) == [
        ("search", {"query": "copy Deep operation"}),
        ("search", {"query": "copy deepcopy"}),
        ("answer", {"text": "deepcopy"}),
    ]


PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,4 +10,4 @@ def f():
     a = 1
-    return a
+    return a + 1
 
 def g():
"""


def test_swebench_views_and_replaces_each_hunk_then_submits() -> None:
    (hunk,) = hunks(PATCH)
    assert (hunk.path, hunk.start, hunk.length) == ("pkg/mod.py", 10, 4)
    assert (hunk.old_core, hunk.new_core) == ("    return a", "    return a + 1")
    ok = "<returncode>0</returncode>\n<output>...</output>"
    turns = play(swebench_policy({"patch": PATCH}, "", {}), ["view", ok])
    assert calls(turns) == [
        ("view", {"path": "pkg/mod.py", "start": 10, "end": 13}),
        ("str_replace", {"path": "pkg/mod.py", "old": "    return a", "new": "    return a + 1"}),
        ("submit", {}),
    ]
    ambiguous = "<returncode>1</returncode>\n<output>`old` occurs 2 times</output>"
    retried = calls(play(swebench_policy({"patch": PATCH}, "", {}), ["view", ambiguous, ok]))
    assert retried[2] == ("str_replace", {"path": "pkg/mod.py", "old": hunk.old, "new": hunk.new})
    assert retried[3] == ("submit", {})


def test_miniwob_plans_read_the_page_and_stop_on_an_unknown_one() -> None:
    page = (
        '[3] text "Enter "Kim" into the text field and press Submit."\n'
        '[6] input text value=""\n[7] button "Submit"'
    )
    assert calls(miniwob_plan("enter-text", page) or []) == [
        ("type", {"element_id": 6, "text": "Kim"}),
        ("click", {"element_id": 7}),
    ]
    assert miniwob_plan("click-button", "no elements here") is None
    turns = play(miniwob_policy({"task": "enter-text"}, page, {}), [page])
    assert all(isinstance(turn, Action) for turn in turns) and len(turns) == 2
