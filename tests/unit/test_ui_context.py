"""The episode page's per-turn context line: what a turn's prompt held under a context policy (its stored
`prompt_view`) and where a new token segment starts (`views.context_lines`), on its own, through a page of
turns that starts mid-episode, and on the sample run's masked episode, through the real app."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from agentrl.store.repository import close_store, create_run, open_store, record_episodes
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app
from agentrl.ui.sample import record_sample_run
from agentrl.ui.views import context_lines, prompt_view_text, turn_spans


def episode_links(html: str) -> list[str]:
    return re.findall(r'href="(/runs/\w+/episodes/\d+)"', html)


def prompt_lines(html: str) -> list[str]:
    return re.findall(r'<div class="meta prompt-view">([^<]*)</div>', html)


def test_turn_spans_and_prompt_view_text() -> None:
    assert turn_spans([4]) == "turn 4"
    assert turn_spans([5, 0, 1, 2, 7, 8]) == "turns 0–2, 5, 7–8"
    window = {"policy": "window", "task_turn": 3, "shown": [4, 5], "masked": []}
    assert prompt_view_text(window) == "prompt: window — task from turn 3's observation; turns 4–5 shown"
    mask = {"policy": "mask", "task_turn": None, "shown": list(range(7)), "masked": [0, 1, 3]}
    assert prompt_view_text(mask) == "prompt: mask — turns 0–6 shown, outputs of turns 0–1, 3 masked"
    first = {"policy": "window", "task_turn": None, "shown": [], "masked": [], "state_text": "x" * 70}
    assert prompt_view_text(first) == f"prompt: window — no earlier turn shown; state line “{'x' * 60}…”"
    summary = {"policy": "summary", "task_turn": None, "shown": [6], "masked": [], "summary_turn": 5}
    assert prompt_view_text(summary) == "prompt: summary — summary written at turn 5; turn 6 shown"


def test_context_lines_mark_where_a_segment_starts() -> None:
    view = {"policy": "window", "task_turn": None, "shown": [], "masked": []}
    turns = [
        {"index": 0, "segment": 0, "prompt_view": view},
        {"index": 1, "segment": 1, "prompt_view": {**view, "shown": [0]}},
        {"index": 2, "segment": 1, "prompt_view": {**view, "shown": [0, 1]}},
        {"index": 3, "segment": 2, "prompt_view": None},  # a harness's rewritten history: no view
        {"index": 4, "segment": 2, "prompt_view": None},  # a `full` context: no line
    ]
    assert context_lines(turns, None) == {
        0: "prompt: window — no earlier turn shown · token segment 0",
        1: "prompt: window — turn 0 shown · new token segment 1",
        2: "prompt: window — turns 0–1 shown · token segment 1",
        3: "new token segment 2",
    }
    assert context_lines(turns[2:], 0)[2].endswith("· new token segment 1")  # a page starting at turn 2
    assert context_lines(turns[2:], 1)[2].endswith("· token segment 1")
    assert context_lines([{"index": 0, "segment": 0, "prompt_view": None}], None) == {}


def test_a_page_of_turns_knows_the_segment_of_the_turn_before_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = create_run(store, "windowed", "calc-chain", {})
    view = {"policy": "mask", "task_turn": None, "shown": [0, 1], "masked": [0], "state_text": "<b>x</b>"}
    turns = (
        Turn(0, (1,), (2,), (-0.1,), "first", Action("first"), "out", 0.0, False, "s1"),
        Turn(1, (1, 3), (2,), (-0.1,), "second", Action("second"), "out", 0.0, False, "s2", segment=1,
             prompt_view=view),
    )  # fmt: skip
    record_episodes(store, run_id, 1, "train", [Episode("e", "env", "t", "g", 0, turns, "terminated")], None)
    close_store(store)
    with TestClient(create_app(url)) as http:
        step = http.get(f"/runs/{run_id}/steps/1").text
        link = episode_links(step)[0]
        whole = http.get(link).text
        second = http.get(link, params={"limit": 1, "page": 2}).text
    line = "prompt: mask — turns 0–1 shown, outputs of turn 0 masked; state line “&lt;b&gt;x&lt;/b&gt;”"
    assert prompt_lines(whole) == [f"{line} · new token segment 1"]  # the `full`-context turn 0 has none
    assert prompt_lines(second) == [f"{line} · new token segment 1"]  # turn 0 (segment 0) is off the page


def test_the_sample_runs_masked_episode_shows_its_prompt_lines(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    close_store(store)
    with TestClient(create_app(url)) as http:
        invalid = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "invalid"}).text
        masked, unmasked = (http.get(link).text for link in episode_links(invalid))
    assert prompt_lines(masked) == [
        "prompt: mask — no earlier turn shown · token segment 0",
        "prompt: mask — turn 0 shown · token segment 0",
        "prompt: mask — turns 0–1 shown, outputs of turn 0 masked · new token segment 1",
    ]
    assert prompt_lines(unmasked) == []  # the other task group's episode: a `full` context
