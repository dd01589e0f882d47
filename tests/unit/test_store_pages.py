"""The viewer's paged readers (`agentrl.store.pages`) on a real SQLite store holding the sample run: each
agrees with the pure views over the whole run (`load_episodes`), pages and sorts, escapes search text; and
migration 0005 (the invalid-turn count, the viewer's indexes) upgrades, downgrades and fills the count
for stored episodes."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest
from alembic import command

from agentrl.errors import NotFound
from agentrl.store import pages
from agentrl.store.migrations import alembic_config, current, head
from agentrl.store.repository import Store, close_store, create_run, load_episodes, open_store
from agentrl.ui import views
from agentrl.ui.sample import record_sample_run


@pytest.fixture
def sample(tmp_path: Path) -> tuple[Store, str]:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    return store, record_sample_run(store)


def test_step_table_is_the_step_summaries_of_the_whole_run(sample: tuple[Store, str]) -> None:
    store, run_id = sample
    rows, total = pages.step_table(store, run_id, pages.Window(limit=100))
    expected = [asdict(summary) for summary in views.step_summaries(load_episodes(store, run_id))]
    assert total == len(expected) == 5  # train steps 1-3, eval steps 0 and 3
    assert [(r["step"], r["split"]) for r in rows] == [(r["step"], r["split"]) for r in expected]
    for row, want in zip(rows, expected, strict=True):
        assert row == pytest.approx(want)
    page_two, _ = pages.step_table(store, run_id, pages.Window(offset=2, limit=2))
    assert [(r["step"], r["split"]) for r in page_two] == [(r["step"], r["split"]) for r in expected[2:4]]
    by_reward, _ = pages.step_table(
        store, run_id, pages.Window(limit=100, sort="mean_reward", descending=True)
    )
    rewards = [r["mean_reward"] for r in by_reward]
    assert rewards == sorted(rewards, reverse=True)
    evals, eval_total = pages.step_table(store, run_id, pages.Window(), split="eval")
    assert eval_total == 2 and {r["split"] for r in evals} == {"eval"}
    close_store(store)


def test_step_counts_and_groups_match_the_viewer_filters(sample: tuple[Store, str]) -> None:
    store, run_id = sample
    whole = [e for e in load_episodes(store, run_id) if e["step"] == 1 and e["split"] == "train"]
    counts = pages.step_counts(store, run_id, 1, "train")
    assert counts == {which: sum(views.keep(e, which) for e in whole) for which in views.FILTERS}
    assert counts["all"] == 6 and counts["infra"] == 1
    first, total = pages.step_groups(store, run_id, 1, "train", "all", pages.Window(limit=1))
    assert total == 2 and len({e["group_id"] for e in first}) == 1 and len(first) == 3
    second, _ = pages.step_groups(store, run_id, 1, "train", "all", pages.Window(offset=1, limit=1))
    assert {e["group_id"] for e in second}.isdisjoint({e["group_id"] for e in first})
    stubs = {e["uid"]: e["turns"] for e in first + second}
    for episode in whole:  # the stubs are the turns without text
        assert stubs[episode["uid"]] == [{k: t[k] for k in pages.STUB_COLUMNS} for t in episode["turns"]]
    infra, infra_groups = pages.step_groups(store, run_id, 1, "train", "infra", pages.Window())
    assert infra_groups == 1 and len(infra) == 3  # the group with the failure, whole
    with pytest.raises(NotFound, match="cannot sort by 'nonsense'"):
        pages.step_groups(store, run_id, 1, "train", "all", pages.Window(sort="nonsense"))
    with pytest.raises(NotFound, match="unknown filter"):
        pages.step_episodes(store, run_id, 1, "train", "odd", pages.Window())
    close_store(store)


def test_step_episodes_sort_and_episode_pages(sample: tuple[Store, str]) -> None:
    store, run_id = sample
    rows, total = pages.step_episodes(
        store, run_id, 0, "eval", "all", pages.Window(sort="task", descending=True)
    )
    assert total == 2 and [r["task_id"] for r in rows] == ["calc-42", "calc-17"] and "turns" not in rows[0]
    failed, failed_total = pages.step_episodes(store, run_id, 0, "eval", "failed", pages.Window())
    assert failed_total == 1 and not failed[0]["success"]
    whole = {e["id"]: e for e in load_episodes(store, run_id)}
    invalid = next(e for e in whole.values() if e["invalid_turns"])
    assert invalid["invalid_turns"] == sum(t["invalid"] for t in invalid["turns"]) == 1
    one = pages.load_episode(store, run_id, invalid["id"], first_turn=1, turn_limit=1)
    assert one is not None and len(one["turns"]) == 1
    tokens = one["turns"][0].pop("tokens")  # only the episode page's reader loads the sampled tokens
    assert one["turns"] == invalid["turns"][1:2] and len(tokens["logprobs"]) == len(tokens["pieces"]) == 6
    assert pages.load_episode(store, "another-run", invalid["id"]) is None
    group = pages.group_stubs(store, invalid)
    assert sorted(e["id"] for e in group) == sorted(
        e["id"]
        for e in whole.values()
        if (e["step"], e["split"], e["group_id"]) == (1, "train", invalid["group_id"])
    )
    assert list(pages.iter_episodes(store, run_id, batch=4)) == list(whole.values())
    close_store(store)


def test_runs_page_find_runs_and_search(sample: tuple[Store, str]) -> None:
    store, run_id = sample
    other = create_run(store, "a-second", "calc", {})
    runs, total = pages.runs_page(store, pages.Window(limit=1, sort="name"), views.HELD_OUT_SUCCESS)
    assert total == 2 and [r["name"] for r in runs] == ["a-second"] and runs[0]["last_step"] is None
    [sample_run], _ = pages.runs_page(
        store, pages.Window(offset=1, limit=1, sort="name"), views.HELD_OUT_SUCCESS
    )
    assert (sample_run["last_step"], sample_run["best"]) == (3, 1.0)
    assert [r["id"] for r in pages.find_runs(store, other[:6])] == [other]
    assert [r["id"] for r in pages.find_runs(store, "sample-calc")] == [run_id]
    assert pages.find_runs(store, "%") == []  # LIKE wildcards are matched literally
    by_task, count = pages.episodes_by_task(store, run_id, "calc-4", pages.Window(limit=2))
    expected = [e["id"] for e in load_episodes(store, run_id) if e["task_id"] == "calc-42"]
    assert count == len(expected) > 2 and [e["id"] for e in by_task] == expected[:2]
    hits, more = pages.turns_with_text(store, run_id, "print(12 + 30)", pages.Window(limit=3))
    assert len(hits) == 3 and more and all("print(12 + 30)" in h["turn"]["text"] for h in hits)
    assert pages.turns_with_text(store, run_id, "12 _ 30", pages.Window()) == ([], False)
    close_store(store)


def test_migration_0005_upgrades_downgrades_and_counts_invalid_turns(sample: tuple[Store, str]) -> None:
    store, run_id = sample
    assert current(store.engine) == head()
    database = store.engine.url.database
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0004")
    with sqlite3.connect(database) as conn:
        assert "invalid_turns" not in [row[1] for row in conn.execute("pragma table_info(episodes)")]
        assert "ix_metrics_run_name" not in [row[1] for row in conn.execute("pragma index_list(metrics)")]
    close_store(store)
    store = open_store(f"sqlite:///{database}")  # upgrades to the head again, counting the stored turns
    assert current(store.engine) == head()
    episodes = load_episodes(store, run_id)
    assert sum(e["invalid_turns"] for e in episodes) == 2  # step 1's, one per task group
    assert all(e["invalid_turns"] == sum(t["invalid"] for t in e["turns"]) for e in episodes)
    with sqlite3.connect(database) as conn:
        indexes = [row[1] for row in conn.execute("pragma index_list(episodes)")]
    assert {"ix_episodes_run_step_summary", "ix_episodes_run_task", "ix_episodes_run_step"} <= set(indexes)
    close_store(store)
