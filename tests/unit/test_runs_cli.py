"""`agentrl runs ls|show|export|plot` on a real SQLite store holding the synthetic sample run, and the pure
views behind them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli.main import main
from agentrl.errors import ConfigError
from agentrl.store.repository import close_store, open_store
from agentrl.ui.plot import PANELS, present_panels
from agentrl.ui.sample import record_sample_run
from agentrl.ui.views import anchor_groups, find_run, keep, metric_series, state_before, summarise_metrics


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    record_sample_run(store)
    close_store(store)
    return url


def test_ls_and_show(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "ls", "--db", db]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split()[:4] == ["ID", "NAME", "TASK", "STATUS"]
    assert listing[1].split()[1:6] == ["sample-calc", "calc", "finished", "3", "1.000"]

    assert main(["runs", "show", "sample-calc", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "best held-out success  1.000" in shown
    assert "estimator: gigpo" in shown
    reward_line = next(line for line in shown.splitlines() if line.startswith("reward_mean"))
    assert reward_line.split()[1:] == ["3", "0.6", "1", "0.6", "1"]


def test_unknown_run_is_a_clear_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", "nope", "--db", db]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_export_jsonl_and_parquet(db: str, tmp_path: Path) -> None:
    assert (
        main(
            [
                "runs",
                "export",
                "sample-calc",
                "--format",
                "jsonl",
                "--out",
                str(tmp_path / "e.jsonl"),
                "--db",
                db,
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert len(records) == 22  # 2 tasks x 3 episodes x 3 steps + 2 evals x 2
    infra = [record for record in records if record["stop_reason"] == "infra_error"]
    assert len(infra) == 3 and all(record["turns"] == [] for record in infra)
    train = next(record for record in records if record["split"] == "train" and record["turns"])
    assert set(train["turns"][0]) >= {"reward", "advantage", "state_key", "invalid", "tool_name", "text"}
    assert train["turns"][0]["advantage"] is not None

    import pyarrow.parquet as pq

    assert (
        main(
            [
                "runs",
                "export",
                "sample-calc",
                "--format",
                "parquet",
                "--out",
                str(tmp_path / "e.parquet"),
                "--db",
                db,
            ]
        )
        == 0
    )
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 22
    # the same turns, with the free-form env info as one JSON text per turn (Parquet needs fixed structs)
    expected = [
        [{**turn, "info": json.dumps(turn["info"])} for turn in record["turns"]] for record in records
    ]
    assert table.column("turns").to_pylist() == expected


def test_plot_writes_a_png(db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plot.png"
    assert main(["runs", "plot", "sample-calc", "--out", str(out), "--db", db]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "note:" not in capsys.readouterr().err  # the sample run has every plotted metric


def test_missing_panels_are_skipped_with_a_note() -> None:
    shown, notes = present_panels({"reward_mean": [(1, 0.5)], "kl": []})
    assert [panel.title for panel in shown] == ["reward"]
    assert len(notes) == len(PANELS) - 1 and "no KL in this run" in notes[1]


def test_views() -> None:
    runs = [{"id": "abc123", "name": "one"}, {"id": "abd456", "name": "two"}]
    assert find_run(runs, "two")["id"] == "abd456"
    assert find_run(runs, "abc")["name"] == "one"
    with pytest.raises(ConfigError, match="ambiguous"):
        find_run(runs, "ab")
    series = metric_series(
        [
            {"step": 2, "name": "r", "value": 1.0},
            {"step": 1, "name": "r", "value": 3.0},
            {"step": 3, "name": "r", "value": None},
        ]
    )
    assert series == {"r": [(1, 3.0), (2, 1.0)]}
    [summary] = summarise_metrics(series)
    assert (summary.count, summary.first, summary.last, summary.low, summary.high) == (2, 3.0, 1.0, 1.0, 3.0)


def test_filters_and_anchor_groups() -> None:
    def episode(
        row_id: int, group: str, keys: list[str | None], success: bool, invalid: bool = False
    ) -> dict:
        turns = [{"index": i, "state_key": key, "invalid": invalid and i == 0} for i, key in enumerate(keys)]
        return {
            "id": row_id,
            "split": "train",
            "group_id": group,
            "turns": turns,
            "success": success,
            "stop_reason": "terminated",
        }

    episodes = [
        episode(1, "g", ["a", "b"], True),
        episode(2, "g", ["a", "c"], False, invalid=True),
        episode(3, "h", ["a", "b"], True),
    ]
    groups = anchor_groups(episodes)
    refs = {
        (ref.episode, ref.turn): [(m.episode, m.turn) for m in members] for ref, members in groups.items()
    }
    assert refs[(1, 1)] == [(1, 1), (2, 1)]  # same group, both taken in state "a"
    assert refs[(3, 1)] == [(3, 1)]  # state "a" of another task group is another anchor
    assert refs[(1, 0)] == [(1, 0)]  # the initial state is not stored: turn 0 stands alone
    assert state_before(episodes[0], 1) == "a" and state_before(episodes[0], 0) is None
    assert [e["id"] for e in episodes if keep(e, "failed")] == [2]
    assert [e["id"] for e in episodes if keep(e, "invalid")] == [2]
    assert [e["id"] for e in episodes if keep(e, "infra")] == []


def test_tensorboard_events_round_trip(db: str, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    for _ in range(2):  # a second export replaces the first instead of duplicating points
        assert main(["runs", "tensorboard", "sample-calc", "--out", str(out), "--db", db]) == 0
    assert len(list(out.glob("events.out.tfevents.*"))) == 1
    events = EventAccumulator(str(out))
    events.Reload()
    assert "credit/anchor_hit_rate" in events.Tags()["scalars"]
    reward = [(event.step, round(event.value, 6)) for event in events.Scalars("reward_mean")]
    assert reward == [(1, 0.6), (2, 1.0), (3, 1.0)]
