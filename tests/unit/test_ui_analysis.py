"""The viewer's analysis pages and panels: the SVG tick pickers and value card, the small multiples, the
estimator's effective options, the return as the estimator used it (checked against the real GRPO estimator
on a real SQLite store), the held-out pairing, the config diff, and the pages that show them (through
FastAPI's test client, over the synthetic sample run recorded by the real writer)."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from fastapi.testclient import TestClient

from agentrl.credit import episodes_to_batch, estimate, records_to_batch, split_by_episode
from agentrl.credit.common import discounted_returns
from agentrl.store.migrations import alembic_config, current, head
from agentrl.store.repository import (
    close_store,
    create_run,
    load_episodes,
    load_prompt,
    load_split_episodes,
    open_store,
    record_episodes,
    record_metrics,
)
from agentrl.types import Action, Episode, Turn
from agentrl.ui import analysis, charts, compare, credit_view, finish
from agentrl.ui.app import create_app
from agentrl.ui.sample import SAMPLE_PROMPT, record_sample_run
from agentrl.ui.svg import line_chart, nice_ticks, step_ticks


@pytest.fixture
def sample(tmp_path: Path) -> Iterator[tuple[TestClient, str, str]]:
    """The sample run and a second one at eval temperature 0.7, served in-process; (client, id, other id)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = record_sample_run(store)
    other = record_sample_run(store, "sample-calc-hot", eval_temperature=0.7)
    close_store(store)
    with TestClient(create_app(url)) as client:
        yield client, run_id, other


def turn(index: int, reward: float, invalid: bool = False) -> Turn:
    return Turn(index, (1,), (2,), (-0.1,), "text", Action("text"), "obs", reward, invalid, f"s{index + 1}")


# --- pure parts ----------------------------------------------------------------------------------------


def test_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.5, 1.0]
    assert nice_ticks(0.13, 0.87, 4) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-3.0, 7.0, 4) == [-5.0, 0.0, 5.0, 10.0]
    assert step_ticks(1, 3) == [1, 2, 3]
    assert step_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert step_ticks(5, 5) == [5]


def test_a_chart_labels_several_steps_and_titles_every_point() -> None:
    chart = line_chart({"kl": [(step, 0.01 * step) for step in range(1, 11)]}, "kl")
    assert chart.count('<circle class="pt"') == 10
    assert "<title>kl · step 4: 0.04</title>" in chart
    x_labels = re.findall(r'text-anchor="middle" font-size="10">(\d+)</text>', chart)
    assert x_labels == ["2", "4", "6", "8", "10"]


def test_one_step_is_a_value_card_not_an_axis() -> None:
    card = line_chart({"eval/success_rate": [(0, 0.5)]}, "success")
    assert 'class="chart single"' in card and "<title>eval/success_rate · step 0: 0.5</title>0.5<" in card
    assert "eval/success_rate at step 0, the only step recorded" in card
    assert "-0.5" not in card and "<polyline" not in card


def test_panels_pair_train_and_held_out_and_keep_every_other_metric() -> None:
    names = ["reward_mean", "eval/success_rate", "kl", "credit/anchor_hit_rate", "success_rate"]
    assert [(p.title, p.metrics) for p in charts.panels(names)] == [
        ("reward", ("reward_mean", "eval/mean_reward")),
        ("success", ("success_rate", "eval/success_rate")),
        ("credit/anchor_hit_rate", ("credit/anchor_hit_rate",)),
        ("kl", ("kl",)),
    ]
    overlaid = charts.overlay_charts(
        [("a", {"kl": [(1, 0.1), (2, 0.2)]}), ("b", {"kl": [(1, 0.3), (2, 0.1)]})]
    )
    assert len(overlaid) == 1 and overlaid[0].count("<polyline") == 2


def test_effective_options_merge_defaults_with_what_the_run_set() -> None:
    settings = credit_view.credit_settings({"credit": {"estimator": "gigpo", "options": {"gamma": 0.9}}})
    assert settings.estimator == "gigpo" and settings.given == {"gamma"}
    assert settings.options["gamma"] == 0.9 and settings.options["invalid_penalty"] == 0.1
    assert settings.gamma == 0.9 and settings.invalid_penalty == 0.1
    grpo = credit_view.credit_settings({"credit": {"estimator": "grpo", "options": {}}})
    assert grpo.gamma is None and grpo.options["mode"] == "mean_std_norm" and grpo.given == frozenset()
    assert credit_view.credit_settings({}).problem == "this run's saved config names no credit estimator"
    bad = credit_view.credit_settings({"credit": {"estimator": "grpo", "options": {"nope": 1}}})
    assert bad.problem is not None and "nope" in bad.problem


def test_returns_to_go_are_the_estimators_discounted_returns() -> None:
    rewards = [0.0, -0.1, 0.0, 1.0]
    batch = records_to_batch([{"group": "g", "states": [None] * 5, "rewards": rewards}])
    expected = discounted_returns(batch, np.asarray(rewards), 0.95)
    assert credit_view.returns_to_go(rewards, 0.95) == pytest.approx(expected.tolist())
    assert credit_view.penalised_rewards([0.0, 1.0], [True, False], 0.25) == [-0.25, 1.0]


def test_the_return_as_used_reproduces_the_stored_grpo_advantages(tmp_path: Path) -> None:
    """Two failed episodes with raw reward 0 get different advantages; the return as used says why."""
    episodes = [
        Episode("e0", "env", "t", "g", 0, (turn(0, 0.0), turn(1, 1.0)), "terminated", "s0", True),
        Episode("e1", "env", "t", "g", 1, (turn(0, 0.0, invalid=True), turn(1, 0.0)), "terminated", "s0"),
        Episode("e2", "env", "t", "g", 2, tuple(turn(i, 0.0, invalid=True) for i in range(3)), "truncated",
                "s0"),
    ]  # fmt: skip
    batch = episodes_to_batch(episodes)
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "grpo", "t", {"credit": {"estimator": "grpo", "options": {}}})
    record_episodes(store, run_id, 1, "train", episodes, split_by_episode(estimate("grpo", batch), batch))
    rows = load_episodes(store, run_id)
    close_store(store)
    settings = credit_view.credit_settings({"credit": {"estimator": "grpo"}})
    used = [credit_view.episode_return(row, settings) for row in rows]
    assert [u.raw for u in used if u] == [1.0, 0.0, 0.0]
    assert [u.used for u in used if u] == pytest.approx([1.0, -0.1, -0.3])
    summary = credit_view.group_summary([u.used for u in used if u])
    assert summary.n == 3 and not summary.no_signal
    for row, u in zip(rows, used, strict=True):
        assert u is not None
        normalised = (u.used - summary.mean) / (summary.std + 1e-6)  # GRPO, arXiv 2402.03300 sec. 4.1.2
        assert row["turns"][0]["advantage"] == pytest.approx(normalised)
    assert credit_view.group_summary([0.0, 0.0]).no_signal


def test_held_out_pairs_and_counts() -> None:
    a = compare.task_outcomes([
        {"task_id": "t1", "success": True, "reward": 1.0, "stop_reason": "terminated"},
        {"task_id": "t2", "success": False, "reward": 0.0, "stop_reason": "terminated"},
        {"task_id": "t3", "success": True, "reward": 1.0, "stop_reason": "terminated"},
        {"task_id": "t4", "success": False, "reward": 0.0, "stop_reason": "terminated"},
        {"task_id": "t5", "success": False, "reward": 0.0, "stop_reason": "infra_error"},
    ])  # fmt: skip
    b = compare.task_outcomes([
        {"task_id": "t1", "success": True, "reward": 1.0, "stop_reason": "terminated"},
        {"task_id": "t2", "success": True, "reward": 1.0, "stop_reason": "terminated"},
        {"task_id": "t3", "success": False, "reward": 0.0, "stop_reason": "terminated"},
        {"task_id": "t4", "success": False, "reward": 0.0, "stop_reason": "terminated"},
        {"task_id": "t5", "success": True, "reward": 1.0, "stop_reason": "terminated"},
        {"task_id": "t6", "success": True, "reward": 1.0, "stop_reason": "terminated"},
    ])  # fmt: skip
    pairs = compare.pair_tasks(a, b)
    assert [(p.task_id, p.change) for p in pairs] == [
        ("t1", "both"), ("t2", "gained"), ("t3", "lost"), ("t4", "neither"), ("t5", "unpaired"),
        ("t6", "unpaired"),
    ]  # fmt: skip
    assert compare.paired_counts(pairs) == {"both": 1, "gained": 1, "lost": 1, "neither": 1, "unpaired": 2}
    assert compare.solved_count(a) == (2, 4)


def test_config_diff_and_key_columns() -> None:
    one = {
        "model": {"name": "m"},
        "credit": {"estimator": "grpo", "options": {}},
        "eval": {"temperature": 0.0},
    }
    two = {"model": {"name": "m"}, "credit": {"estimator": "gigpo", "options": {"gamma": 0.9}}, "x": 1}
    diff = dict(compare.config_diff([one, two]))
    assert diff["credit.estimator"] == ["grpo", "gigpo"]
    assert diff["credit.options"] == [{}, compare.MISSING] and diff["credit.options.gamma"][1] == 0.9
    assert diff["eval.temperature"] == [0.0, compare.MISSING] and "model.name" not in diff
    assert compare.last_values([{"kl": [(1, 0.1), (3, 0.2)]}, {"kl": [], "loss": [(2, 1.5)]}]) == [
        ("kl", [(3, 0.2), None]),
        ("loss", [None, (2, 1.5)]),
    ]
    assert compare.key_columns(one) == {
        "model": "m", "estimator": "grpo", "eval_temperature": 0.0, "group_size": None,
    }  # fmt: skip


def test_finish_reasons_are_the_engines_else_inferred() -> None:
    assert finish.sampling_of({}) == (128, ("</tool_call>",))
    budget, stops = finish.sampling_of({"sampling": {"max_new_tokens": 16, "stop": ["</answer>"]}})
    assert (budget, stops) == (16, ("</answer>",))
    inferred = finish.Finish
    assert finish.finish_reason("<tool_call>{...", 16, budget, stops) == inferred("length", False)
    assert finish.finish_reason("x</answer>\n", 5, budget, stops) == inferred("stop string </answer>", False)
    assert finish.finish_reason("The answer is 4.", 5, budget, stops) == inferred("end of turn", False)
    assert finish.finish_reason("short", 5, budget, stops, "length") == finish.Finish("length", True)
    assert finish.finish_reason("x</answer>", 16, budget, stops, "stop") == finish.Finish(
        "stop string </answer>", True
    )
    turns = [{"index": 0, "text": "a", "completion_tokens": 16}, {"index": 1, "reward": 0.0}]
    assert finish.turn_finishes({"sampling": {"max_new_tokens": 16}}, turns) == {0: inferred("length", False)}


# --- the pages -----------------------------------------------------------------------------------------


def test_runs_list_shows_key_config_and_warns_of_mixed_eval_temperatures(
    sample: tuple[TestClient, str, str],
) -> None:
    http, run_id, other = sample
    page = http.get("/").text
    assert f'name="run" value="{run_id}"' in page and f'name="run" value="{other}"' in page
    assert "sample (no model)" in page and "gigpo" in page
    assert 'id="temperature-note"' in page and "0.0, 0.7" in page


def test_run_page_charts_every_metric_and_names_the_estimator(sample: tuple[TestClient, str, str]) -> None:
    http, run_id, _ = sample
    page = http.get(f"/runs/{run_id}").text
    logged = {"reward_mean", "success_rate", "eval/success_rate", "infra_failures", "kl", "entropy"}
    assert len(re.findall(r'<svg[^>]* class="chart', page)) == len(charts.panels(sorted(logged | {
        "credit/zero_variance_groups", "credit/anchor_hit_rate", "credit/anchor_group_size",
        "credit/advantage_mean", "credit/advantage_std"})))  # fmt: skip
    assert "<title>kl · step 2: 0.004</title>" in page
    assert '<b class="estimator">gigpo</b>' in page and "gamma=0.95" in page and "invalid_penalty=0.1" in page
    assert 'id="sampler-steps"' in page and page.count("<td>uniform</td>") == 6


def test_step_page_shows_returns_as_used_group_summaries_and_anchor_groups(
    sample: tuple[TestClient, str, str],
) -> None:
    http, run_id, _ = sample
    page = http.get(f"/runs/{run_id}/steps/1", params={"split": "train"}).text
    assert page.count('class="group-summary"') == 2 and "n=3" in page and "n=2" in page
    assert '<td class="num return-used">+0.900</td>' in page  # a right answer after an invalid turn
    assert page.count('class="anchor-set"') >= 2 and "R_t (γ=0.95)" in page
    step3 = http.get(f"/runs/{run_id}/steps/3", params={"split": "train"}).text
    assert "no signal: all returns equal" in step3  # every episode succeeds at step 3


def test_episode_page_shows_the_return_as_used_beside_the_raw_reward(
    sample: tuple[TestClient, str, str],
) -> None:
    http, run_id, _ = sample
    invalid = http.get(f"/runs/{run_id}/steps/1", params={"split": "train", "show": "invalid"}).text
    link = re.findall(r'href="(/runs/\w+/episodes/\d+)"', invalid)[0]
    page = http.get(link).text
    assert re.search(r'id="return-used">return as the estimator used it: <b>\+0\.900</b>', page)
    assert "invalid-turn penalty 0.100" in page and 'class="used-reward neg">-0.100' in page
    stop = "stop string &lt;/tool_call&gt;"  # escaped in the HTML; a "stop" told apart by the text
    assert re.findall(r'class="finish"[^>]*>([^<]+)<', page) == [stop, "end of turn", stop]  # the engine's


def test_held_out_page_counts_match_the_store(sample: tuple[TestClient, str, str]) -> None:
    http, run_id, other = sample
    page = http.get("/heldout", params={"run_a": run_id}).text
    counts = {c: int(n) for c, n in re.findall(r'id="count-(\w+)">(\d+)<', page)}
    store = open_store(str(http.app.state.store.url))  # type: ignore[attr-defined]
    evals = load_split_episodes(store, run_id, "eval")
    close_store(store)
    before = {e["task_id"]: e["success"] for e in evals if e["step"] == 0}
    after = {e["task_id"]: e["success"] for e in evals if e["step"] == 3}
    assert counts["gained"] == sum(not before[t] and after[t] for t in before) == 1
    assert counts["both"] == sum(before[t] and after[t] for t in before) == 1
    assert counts["lost"] == counts["neither"] == counts["unpaired"] == 0
    assert 'class="change-gained"' in page and 'id="temperature-warning"' not in page
    assert 'id="no-shared-tasks"' not in page
    across = http.get("/heldout", params={"run_a": run_id, "step_a": 0, "run_b": other, "step_b": 0}).text
    assert 'id="temperature-warning"' in across and re.search(r'id="count-both">1<', across)
    assert http.get("/heldout", params={"run_a": run_id, "step_a": 2}).status_code == 404


def test_compare_page_overlays_runs_and_diffs_their_configs(sample: tuple[TestClient, str, str]) -> None:
    http, run_id, other = sample
    page = http.get("/compare", params=[("run", run_id), ("run", other)]).text
    assert page.count("<polyline") >= 2 * 5  # every multi-step metric, one line per run
    assert "<td><code>eval.temperature</code></td><td><code>0.0</code></td><td><code>0.7</code></td>" in page
    assert 'id="heldout-link"' in page
    assert re.search(r"<td>kl</td><td class=\"num\">0\.006 <span class=\"zero\">\(step 3\)</span></td>", page)
    assert http.get("/compare").status_code == 404


def test_an_eval_only_run_draws_value_cards(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    run_id = create_run(store, "eval-only", "calc", {"eval": {"temperature": 0.3}})
    record_metrics(store, run_id, 0, {"eval/success_rate": 0.25, "eval/mean_reward": 0.25})
    close_store(store)
    with TestClient(create_app(url)) as http:
        page = http.get(f"/runs/{run_id}").text
    assert page.count('class="chart single"') == 2 and "eval/success_rate at step 0, the only step" in page
    assert "this run&#39;s saved config names no credit estimator" in page


def test_the_sampler_panel_keeps_the_last_steps(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = record_sample_run(store)
    panel = analysis.sampler_panel(store, run_id, last=2)
    close_store(store)
    assert panel["steps"] == 3 and list(panel["per_step"]) == [2, 3]
    assert panel["per_step"][2] == {"uniform": 2} and len(panel["draws"]) == 4


def test_the_engines_finish_reason_is_stored_and_shown(tmp_path: Path) -> None:
    """A turn's finish reason goes through the real store writer and migration 0006 to the episode page;
    a downgrade to 0005 drops the column and reopening the store adds it back."""
    database = tmp_path / "runs.db"
    url = f"sqlite:///{database}"
    store = open_store(url)
    run_id = create_run(store, "finish", "t", {"sampling": {"max_new_tokens": 64}})
    cut = dataclasses.replace(turn(0, 0.0, invalid=True), text="<tool_call>{", finish_reason="length")
    done = dataclasses.replace(turn(1, 1.0), text="The answer is 4.", finish_reason="stop")
    record_episodes(
        store, run_id, 1, "train", [Episode("e", "env", "t", "g", 0, (cut, done), "terminated", "s0")]
    )
    assert [t["finish_reason"] for t in load_episodes(store, run_id)[0]["turns"]] == ["length", "stop"]
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0005")
    close_store(store)
    with sqlite3.connect(database) as conn:
        assert "finish_reason" not in [row[1] for row in conn.execute("pragma table_info(turns)")]
    store = open_store(url)
    assert (
        current(store.engine) == head()
        and load_episodes(store, run_id)[0]["turns"][0]["finish_reason"] is None
    )
    close_store(store)
    store = open_store(url)
    record_episodes(
        store, run_id, 2, "train", [Episode("f", "env", "t", "g", 0, (cut, done), "terminated", "s0")]
    )
    before, after = (row["id"] for row in load_episodes(store, run_id))
    close_store(store)
    with TestClient(create_app(url)) as http:
        page = http.get(f"/runs/{run_id}/episodes/{after}").text
        older = http.get(f"/runs/{run_id}/episodes/{before}").text
    assert re.findall(r'class="finish"[^>]*>([^<]+)<', page) == ["length", "end of turn"]
    # stored before 0006 came back: inferred from the token count (1 of max_new_tokens 64) and the text
    inferred = r'class="finish inferred"[^>]*>([^<]+) \(inferred\)<'
    assert re.findall(inferred, older) == ["end of turn", "end of turn"]


def test_held_out_runs_without_a_shared_task_say_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    ids = []
    for name, task in (("base", "shop-1"), ("other", "click-1")):
        run_id = create_run(store, name, "t", {"eval": {"temperature": 0.0}})
        played = Episode(f"{name}-e", "env", task, f"{name}-g", 0, (turn(0, 1.0),), "terminated", "s0", True)
        record_episodes(store, run_id, 0, "eval", [played])
        ids.append(run_id)
    close_store(store)
    with TestClient(create_app(url)) as http:
        page = http.get("/heldout", params={"run_a": ids[0], "run_b": ids[1]}).text
    assert 'id="no-shared-tasks"' in page and re.search(r'id="count-unpaired">2<', page)


def test_first_prompt_inputs_are_stored_once_and_shown(tmp_path: Path) -> None:
    """The sample episodes share one set of tools: one prompts row, referenced by every played episode,
    shown on the episode page with agentrl's default instructions."""
    database = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{database}")
    run_id = record_sample_run(store)
    episodes = load_episodes(store, run_id)
    played = [e for e in episodes if e["stop_reason"] != "infra_error"]
    [prompt_id] = {e["prompt_id"] for e in played}
    assert load_prompt(store, prompt_id) == SAMPLE_PROMPT and load_prompt(store, prompt_id + 1) is None
    assert all(e["prompt_id"] is None for e in episodes if e["stop_reason"] == "infra_error")
    close_store(store)
    with sqlite3.connect(database) as conn:
        assert conn.execute("select count(*) from prompts").fetchone() == (1,)
    with TestClient(create_app(f"sqlite:///{database}")) as http:
        page = http.get(f"/runs/{run_id}/episodes/{played[0]['id']}").text
    assert 'id="prompt"' in page and "2 tool(s), 0 few-shot example(s)" in page
    assert page.count('class="msg call prompt-tool"') == 2 and "Run Python code" in page
    assert "agentrl&#39;s default" in page and "You can call these tools" in page
