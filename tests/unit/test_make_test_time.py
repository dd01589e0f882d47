"""`bench/make_test_time.py`'s report: the phases, their total, pytest's summary line and its slowest tests,
read from a run's folder (pure parsing; the run itself is a half-hour `make test`)."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load_bench

PYTEST_LOG = """........ [100%]
============================= slowest 80 durations =============================
53.09s call     tests/integration/test_fleet.py::test_a_killed_replica
4.52s setup    tests/integration/test_ray_fleet.py::test_worker_loss
=========================== short test summary info ============================
1 failed, 1748 passed, 10 skipped in 1495.01s (0:24:55)
"""


def test_the_report_reads_phases_summary_and_slowest(tmp_path: Path) -> None:
    (tmp_path / "phases.txt").write_text(
        "d948883 a commit line\npython 92.0 rc=0\npytest 1499.9 rc=1\ndone\n"
    )
    (tmp_path / "pytest.log").write_text(PYTEST_LOG)
    report = load_bench("make_test_time").read_logs(tmp_path)
    assert report["phases"] == {"python": {"s": 92.0, "rc": 0}, "pytest": {"s": 1499.9, "rc": 1}}
    assert report["total_s"] == 1591.9
    assert report["pytest_summary"] == "1 failed, 1748 passed, 10 skipped in 1495.01s (0:24:55)"
    assert report["slowest"][0] == {
        "s": 53.09,
        "what": "call",
        "test": "tests/integration/test_fleet.py::test_a_killed_replica",
    }
    assert [row["what"] for row in report["slowest"]] == ["call", "setup"]
