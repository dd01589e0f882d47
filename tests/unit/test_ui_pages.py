"""The viewer's pages over a real SQLite store holding the synthetic sample run, through FastAPI's test
client (in-process; the browser test drives the real server): content, filters, anchor links, escaping."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agentrl.store.repository import close_store, create_run, open_store, record_episodes
from agentrl.types import Action, Episode, Turn
from agentrl.ui.app import create_app, signed
from agentrl.ui.sample import record_sample_run
from agentrl.ui.svg import line_chart


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    close_store(store)
    with TestClient(create_app(url)) as test_client:
        yield test_client, run_id


def episode_links(html: str) -> list[str]:
    return re.findall(r'href="(/runs/\w+/episodes/\d+)"', html)


def test_runs_and_run_page(client: tuple[TestClient, str]) -> None:
    http, run_id = client
    runs = http.get("/")
    assert runs.status_code == 200
    assert f'href="/runs/{run_id}"' in runs.text and "sample-calc" in runs.text and "1.000" in runs.text
    run = http.get(f"/runs/{run_id}").text
    assert run.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 10  # every metric charted
    assert "reward_mean" in run and "eval/success_rate" in run
    assert f'href="/runs/{run_id}/steps/1?split=train"' in run
    assert f'href="/runs/{run_id}/steps/0?split=eval"' in run
    assert "estimator: gigpo" in run  # the config


def test_step_page_groups_and_filters(client: tuple[TestClient, str]) -> None:
    http, run_id = client
    step = http.get(f"/runs/{run_id}/steps/1", params={"split": "train"}).text
    assert step.count('class="group"') == 2 and "6 of 6 episodes" in step
    assert len(episode_links(step)) == 6
    infra = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "infra"}).text
    assert len(episode_links(infra)) == 1 and "infra_error" in infra
    invalid = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "invalid"}).text
    assert len(episode_links(invalid)) == 2  # one per task group
    failed = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "failed"}).text
    assert len(episode_links(failed)) == 3  # two wrong answers and the infrastructure failure
    assert http.get(f"/runs/{run_id}/steps/1", params={"show": "nonsense"}).status_code == 404
    assert http.get(f"/runs/{run_id}/steps/99").status_code == 404


def test_episode_page_is_a_chat_with_credit_and_anchors(client: tuple[TestClient, str]) -> None:
    http, run_id = client
    invalid = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "invalid"}).text
    page = http.get(episode_links(invalid)[0]).text
    assert page.count('class="turn') == 3 and 'class="turn invalid"' in page
    assert "tool call · python" in page and "print(12 + 30)" in page
    assert "invalid action" in page
    assert re.search(r'advantage <span class="pos">\+0\.\d+</span>', page)
    assert 'anchor group of <b class="anchor-size">3</b>' in page
    assert len(re.findall(rf'href="/runs/{run_id}/episodes/\d+#turn-\d"', page)) >= 2
    assert 'id="first-observation"' in page and "What is" in page
    assert re.search(r'class="meta exec-log">env info \(exec log\): exit_code=<code>0</code>', page)
    failed = episode_links(http.get(f"/runs/{run_id}/steps/1", params={"show": "failed"}).text)
    negative = http.get(failed[0]).text
    assert re.search(r'advantage <span class="neg">-\d\.\d+</span>', negative)


def test_infra_failure_and_not_found(client: tuple[TestClient, str]) -> None:
    http, run_id = client
    [link] = episode_links(http.get(f"/runs/{run_id}/steps/1", params={"show": "infra"}).text)
    page = http.get(link).text
    assert 'id="infra-error"' in page and "SandboxLost" in page
    assert http.get("/runs/nope").status_code == 404
    assert http.get(f"/runs/{run_id}/episodes/12345").status_code == 404
    assert http.get("/healthz").text == "ok"


def test_every_value_is_escaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    evil = "<script>alert(1)</script>"
    run_id = create_run(store, evil, evil, {"x": evil})
    turn = Turn(0, (1,), (2,), (-0.1,), evil, Action(evil), evil, 0.0, False, evil)
    record_episodes(
        store, run_id, 1, "train", [Episode(evil, evil, evil, evil, 0, (turn,), "terminated")], [[0.0]]
    )
    close_store(store)
    with TestClient(create_app(url)) as http:
        pages = [http.get("/"), http.get(f"/runs/{run_id}"), http.get(f"/runs/{run_id}/steps/1")]
        pages.append(http.get(episode_links(pages[-1].text)[0]))
        for response in pages:
            assert response.status_code == 200
            assert "<script>" not in response.text and "&lt;script&gt;" in response.text


def test_signed_and_chart_helpers() -> None:
    assert signed(0.5) == '<span class="pos">+0.500</span>'
    assert signed(-2) == '<span class="neg">-2.000</span>'
    assert signed(None) == '<span class="zero">–</span>'
    chart = line_chart({"<b>": [(1, 0.0), (2, 1.0)], "empty": []}, "t<")
    assert chart.count("<polyline") == 1 and "&lt;b&gt;" in chart and "<title>t&lt;</title>" in chart
    assert "no x recorded" in line_chart({"a": []}, "x")
