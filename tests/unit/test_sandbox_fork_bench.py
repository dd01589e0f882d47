"""bench/sandbox_fork.py's pure parts: a fork's time split into acquire, archive, transfer, restore and the
rest, samples pooled over rounds, and the ratios' direction."""

from __future__ import annotations

from types import ModuleType

import pytest
from bench_scripts import load_bench


def bench() -> ModuleType:
    return load_bench("sandbox_fork")


def test_a_forks_time_is_split_by_what_the_servers_report() -> None:
    calls = [("acquire", 0.004, None), ("download", 0.010, 0.007), ("upload", 0.006, 0.005)]
    parts = bench().split_parts(0.025, calls)
    assert parts == pytest.approx(
        {"acquire": 4.0, "archive": 7.0, "transfer": 4.0, "restore": 5.0, "other": 5.0}
    )


def test_a_side_whose_server_reports_nothing_counts_as_transfer() -> None:
    parts = bench().split_parts(0.010, [("download", 0.003, None), ("upload", 0.002, 0.009)])
    assert parts == pytest.approx(
        {"acquire": 0.0, "archive": 0.0, "transfer": 3.0, "restore": 2.0, "other": 5.0}
    )


def test_rounds_are_pooled_and_ratios_favour_the_current_code_above_one() -> None:
    module = bench()
    round_figures = {"fork": [10.0, 30.0], "workdir_bytes": 5, "what": "w", "load_avg_1m": [1.0, 2.0]}
    round_figures.update({name: [1.0, 2.0] for name in module.PARTS})
    pooled = module.summarise(
        [round_figures, {**round_figures, "fork": [20.0, 40.0], "load_avg_1m": [3.0, 4.0]}]
    )
    assert (pooled["fork_p50_ms"], pooled["fork_p99_ms"], pooled["samples"]) == (20.0, 40.0, 4)
    assert pooled["load_avg_1m"] == [1.0, 2.0, 3.0, 4.0]
    assert module.ratios({"k": {"fork_p50_ms": 50.0}}, {"k": {"fork_p50_ms": 10.0}}) == {"k": 5.0}
