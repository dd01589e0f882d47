"""The viewer at scale, through FastAPI's test client over a real SQLite store holding the sample run (and a
run still going): pagination and sorting of the runs, steps, groups and turns; an evaluation step as one
table; search by task id and text; the streamed export equal to `agentrl runs export`; the auto-refresh of
a run with no end time; and the pure paging helpers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agentrl.errors import NotFound
from agentrl.store.pages import Window
from agentrl.store.repository import close_store, create_run, open_store, record_episodes
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app
from agentrl.ui.paging import Pager, Sorter, query_string, window
from agentrl.ui.sample import record_sample_run
from agentrl.ui.search import snippet
from agentrl.ui.thinning import thin, thin_series

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


@pytest.fixture
def viewer(tmp_path: Path) -> Iterator[tuple[TestClient, str, str, str]]:
    """The app over a store with the finished sample run and a running run of one 120-turn episode."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    running = create_run(store, "still-going", "calc", {})
    turns = tuple(
        Turn(
            t,
            (1,),
            (2,),
            (-0.1,),
            f"turn text {t}",
            Action(f"turn text {t}"),
            f"obs {t}",
            0.0,
            False,
            f"s{t}",
        )
        for t in range(120)
    )
    record_episodes(store, running, 1, "train", [Episode("long", "e", "t", "g", 0, turns, "truncated")], None)
    close_store(store)
    with TestClient(create_app(url)) as client:
        yield client, run_id, running, url


def links(html: str, pattern: str) -> list[str]:
    return re.findall(pattern, html)


def test_runs_list_sorts_and_pages(viewer: tuple[TestClient, str, str, str]) -> None:
    http, run_id, running, _ = viewer
    names = links(http.get("/", params={"sort": "name"}).text, r'<a href="/runs/\w+">([\w-]+)</a>')
    assert names == ["sample-calc", "still-going"]
    reverse = http.get("/", params={"sort": "name", "order": "desc"}).text
    assert links(reverse, r'<a href="/runs/\w+">([\w-]+)</a>') == ["still-going", "sample-calc"]
    first = http.get("/", params={"sort": "name", "limit": 1}).text
    assert links(first, r'<a href="/runs/(\w+)">') == [run_id] and "page 1 of 2 · 2 runs" in first
    assert 'href="/?sort=name&amp;order=asc&amp;page=2&amp;limit=1" rel="next"' in first
    assert 'href="/?sort=name&amp;order=desc"' in first  # the sorted column's header flips the order
    assert http.get("/", params={"sort": "colour"}).status_code == 404
    assert http.get("/", params={"page": 0}).status_code == 404


def test_run_page_steps_are_paged_sorted_and_refresh_only_while_running(
    viewer: tuple[TestClient, str, str, str],
) -> None:
    http, run_id, running, _ = viewer
    page = http.get(f"/runs/{run_id}", params={"limit": 2}).text
    assert (
        len(links(page, r'href="/runs/\w+/steps/\d+\?split=\w+">step')) == 2
        and "page 1 of 3 · 5 step rows" in page
    )
    assert 'http-equiv="refresh"' not in page
    by_success = http.get(f"/runs/{run_id}", params={"sort": "success_rate", "order": "desc"}).text
    success = [
        float(v)
        for v in re.findall(
            r'<td class="num">(\d\.\d{3})</td>\s*<td class="num">(?:<span|0</td>)', by_success
        )
    ]
    assert success and success == sorted(success, reverse=True)
    going = http.get(f"/runs/{running}").text
    assert 'http-equiv="refresh" content="15"' in going and 'id="refresh-note"' in going
    assert 'http-equiv="refresh"' in http.get("/").text  # a run on the list is still going


def test_evaluation_step_is_one_table(viewer: tuple[TestClient, str, str, str]) -> None:
    http, run_id, _, _ = viewer
    page = http.get(f"/runs/{run_id}/steps/0", params={"split": "eval"}).text
    assert (
        'id="eval-episodes"' in page
        and 'class="group"' not in page
        and "advantage" not in page.split("<table")[1]
    )
    rows = re.findall(r'<tr><td><a href="/runs/\w+/episodes/\d+">([\w-]+)</a></td><td>([\w-]+)</td>', page)
    assert rows == [("eval-0-calc-17-0", "calc-17"), ("eval-0-calc-42-0", "calc-42")]
    assert page.count('badge ok">success') == 1 and page.count('badge bad">failed') == 1
    by_reward = http.get(f"/runs/{run_id}/steps/0", params={"split": "eval", "sort": "reward"}).text
    assert re.findall(r'episodes/\d+">([\w-]+)</a>', by_reward) == ["eval-0-calc-42-0", "eval-0-calc-17-0"]
    failed = http.get(f"/runs/{run_id}/steps/0", params={"split": "eval", "show": "failed"}).text
    assert "1 of 2 episodes" in failed and len(re.findall(r"episodes/\d+\"", failed)) == 1


def test_training_step_pages_whole_groups(viewer: tuple[TestClient, str, str, str]) -> None:
    http, run_id, _, _ = viewer
    first = http.get(f"/runs/{run_id}/steps/1", params={"limit": 1}).text
    assert first.count('class="group"') == 1 and "page 1 of 2 · 2 task groups" in first
    assert "6 of 6 episodes" in first and "infra failures (1)" in first
    second = http.get(f"/runs/{run_id}/steps/1", params={"limit": 1, "page": 2}).text
    assert second.count('class="group"') == 1 and "calc-42" in second.split('class="group"')[1]
    by_task = http.get(f"/runs/{run_id}/steps/1", params={"sort": "task", "order": "desc"}).text
    tasks = re.findall(r'<h2 class="group">task group <code>[\w-]+</code> <small>task ([\w-]+)', by_task)
    assert tasks == ["calc-42", "calc-17"]


def test_long_episode_pages_its_turns(viewer: tuple[TestClient, str, str, str]) -> None:
    http, _, running, _ = viewer
    step = http.get(f"/runs/{running}/steps/1").text
    [episode] = links(step, r'href="(/runs/\w+/episodes/\d+)"')
    first = http.get(episode).text
    assert (
        first.count('<div class="turn') == 50
        and 'id="turn-0"' in first
        and "page 1 of 3 · 120 turns" in first
    )
    last = http.get(episode, params={"page": 3}).text
    assert last.count('<div class="turn') == 20 and 'id="turn-119"' in last and 'id="turn-99"' not in last
    assert 'rel="prev"' in last and 'rel="next"' not in last


def test_search_by_task_and_text(viewer: tuple[TestClient, str, str, str]) -> None:
    http, run_id, _, _ = viewer
    run = http.get(f"/runs/{run_id}").text
    assert f'action="/runs/{run_id}/search"' in run and f'href="/runs/{run_id}/export.jsonl"' in run
    tasks = http.get(f"/runs/{run_id}/search", params={"task": "calc-17", "limit": 3}).text
    assert len(links(tasks, r'<tr><td><a href="/runs/\w+/episodes/\d+">')) == 3 and "· 11 episodes" in tasks
    text = http.get(f"/runs/{run_id}/search", params={"q": "wrong: 56"}).text
    hits = links(text, r'href="/runs/\w+/episodes/\d+#turn-(\d+)"')
    assert (
        hits and all(hit == hits[0] for hit in hits) and "wrong: 56" in text
    )  # 7 * 8: calc-42's wrong answer
    none = http.get(f"/runs/{run_id}/search", params={"q": "<no such text>"}).text
    assert "no turn of this run contains this text" in none and "&lt;no such text&gt;" in none


def test_export_link_streams_what_the_cli_writes(
    viewer: tuple[TestClient, str, str, str], tmp_path: Path
) -> None:
    http, run_id, _, url = viewer
    response = http.get(f"/runs/{run_id}/export.jsonl")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    out = tmp_path / "cli.jsonl"
    exported = subprocess.run(
        AGENTRL + ["runs", "export", run_id, "--db", url, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    served = [json.loads(line) for line in response.text.splitlines()]
    assert served == [json.loads(line) for line in out.read_text().splitlines()] and len(served) == 22


def test_paging_helpers() -> None:
    assert query_string({"a": 1, "b": "", "c": None, "d": "x y"}) == "?a=1&d=x+y" and query_string({}) == ""
    assert window(3, 10, "reward", "desc") == Window(offset=20, limit=10, sort="reward", descending=True)
    assert window(1, 10**6).limit == 500 and window(1, 0).limit == 1
    with pytest.raises(NotFound, match="numbered from 1"):
        window(0, 10)
    with pytest.raises(NotFound, match="asc or desc"):
        window(1, 10, order="up")
    pager = Pager("/runs/x", Window(offset=20, limit=10), 25, "steps", {"sort": "step"})
    assert (pager.page, pager.pages, pager.next_url) == (3, 3, None)
    assert pager.previous_url == "/runs/x?sort=step&page=2&limit=10"
    unknown = Pager("/s", Window(limit=5), None, "turns", more=True)
    assert unknown.pages is None and unknown.next_url == "/s?page=2&limit=5"
    sorter = Sorter("/", "name", False, {"show": "all"})
    assert sorter.url("name") == "/?show=all&sort=name&order=desc" and sorter.url("task").endswith(
        "order=asc"
    )
    assert (sorter.arrow("name"), sorter.arrow("task")) == (" ▲", "")
    assert snippet("a" * 200 + "NEEDLE" + "b" * 200, "needle", 5) == "…aaaaaNEEDLEbbbbb…"
    assert snippet("short", "absent") == "short"


def test_thinning_keeps_extremes_and_ends() -> None:
    flat = [(step, 0.0) for step in range(1000)]
    spiky = [*flat[:500], (500, 9.0), *flat[501:700], (700, -3.0), *flat[701:]]
    thinned = thin(spiky, 40)
    assert len(thinned) <= 40 and thinned == sorted(thinned)
    assert {(500, 9.0), (700, -3.0), (0, 0.0), (999, 0.0)} <= set(thinned)
    assert thin(flat[:30], 40) == flat[:30]
    assert thin_series({"a": spiky, "b": []}, 40) == {"a": thinned, "b": []}
