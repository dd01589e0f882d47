"""`bench/make_test_time.py`'s report: the phases, their total, pytest's summary line and its slowest tests,
read from a run's folder (pure parsing; the run itself is a half-hour `make test`)."""

from __future__ import annotations

import subprocess
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


def test_each_row_keeps_the_machine_it_was_measured_on() -> None:
    bench = load_bench("make_test_time")
    amd = {"cores": 2, "cpu_model": "AMD EPYC", "cpu_flags": ["avx512_bf16"], "load_before": [0.5]}
    earlier = {"harness": {"commit": "d5b0235", "machine": amd}, "runs": {"after": {"total_s": 1895.5}}}
    rows = bench.rows_with_provenance(earlier)
    # the old row takes the machine of the block that wrote it, not its commit (its note names that)
    assert rows == {
        "after": {"total_s": 1895.5, "machine": {k: amd[k] for k in ("cores", "cpu_model", "cpu_flags")}}
    }
    intel = {"commit": "f32d217", "machine": {**amd, "cpu_model": "Intel Xeon", "cpu_flags": ["avx512f"]}}
    own = bench.provenance(intel)
    assert own == {
        "commit": "f32d217",
        "machine": {"cores": 2, "cpu_model": "Intel Xeon", "cpu_flags": ["avx512f"]},
    }
    kept = bench.rows_with_provenance(
        {"harness": intel, "runs": {"after": {**rows["after"], "total_s": 1.0}}}
    )
    assert kept["after"]["machine"]["cpu_model"] == "AMD EPYC"  # a row's own provenance wins over the block's


def test_a_row_names_the_commit_of_the_clone_it_ran_in(tmp_path: Path) -> None:
    bench = load_bench("make_test_time")
    assert bench.run_commit(tmp_path) is None  # an earlier run's folder: its note names the commit
    clone = tmp_path / "clone"
    clone.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(clone)]
    subprocess.run([*git, "init", "-q"], check=True)
    (clone / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    assert bench.run_commit(tmp_path) == head.strip()
    (clone / "a.txt").write_text("b")
    assert bench.run_commit(tmp_path) == head.strip() + "+dirty"
