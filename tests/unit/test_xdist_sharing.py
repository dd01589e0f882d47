"""`agentrl.devtools.test_workers`: a pytest-xdist worker's thread count (the cores shared out, at least one,
nothing where OMP_NUM_THREADS is set or pytest runs in one process) and the file order (slow files, then
Docker files, then the rest; a file's tests together and in order); and pytest in two workers on a scratch
suite, where each worker sees the shared-out threads and the slow file is handed out first.

What this is not: a timing (docs/benchmarks.md, "How long `make test` takes").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentrl.devtools.test_workers import long_files_first, start_rank, usable_cores, worker_threads

REPO = Path(__file__).resolve().parents[2]


def test_the_cores_are_shared_out_among_the_workers_and_an_explicit_setting_wins() -> None:
    assert worker_threads(2, {"PYTEST_XDIST_WORKER_COUNT": "2"}) == 1
    assert worker_threads(8, {"PYTEST_XDIST_WORKER_COUNT": "2"}) == 4
    assert worker_threads(2, {"PYTEST_XDIST_WORKER_COUNT": "3"}) == 1  # never none
    assert worker_threads(2, {"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "2"}) is None
    assert worker_threads(2, {"PYTEST_XDIST_WORKER_COUNT": "1"}) is None
    assert worker_threads(2, {}) is None  # one process: PyTorch's default
    assert worker_threads(2, {"PYTEST_XDIST_WORKER_COUNT": "two"}) is None


def test_slow_files_then_docker_files_then_the_rest_each_file_whole() -> None:
    pure, docker, slow = start_rank(False, False), start_rank(False, True), start_rank(True, True)
    assert (slow, docker, pure) == (0, 1, 2) and start_rank(True, False) == 0
    tests = [
        ("a.py", pure),
        ("a.py", pure),
        ("b.py", docker),
        ("c.py", pure),
        ("c.py", slow),  # one slow test makes its whole file start early
        ("d.py", docker),
        ("e.py", pure),
    ]
    order = long_files_first(tests)
    assert order == [3, 4, 2, 5, 0, 1, 6]
    assert long_files_first([]) == []
    assert long_files_first([("a.py", pure), ("b.py", pure)]) == [0, 1]  # ties keep collection order


REPORT = """
import json, os
from pathlib import Path
import pytest, torch

{marks}
def test_{name}(request):
    record = {{"threads": torch.get_num_threads(), "env": os.environ["OMP_NUM_THREADS"],
              "order": [item.nodeid.split("::")[0] for item in request.session.items]}}
    (Path(os.environ["SCRATCH_OUT"]) / "{name}.json").write_text(json.dumps(record))
"""


def test_two_workers_get_their_share_of_the_cores_and_the_slow_file_first(tmp_path: Path) -> None:
    """The repository's conftest over a scratch suite of three files (pure, Docker, slow, in that
    collection order) in two workers: each worker's PyTorch and its subprocesses' environment get this
    machine's cores shared out, and each worker's collection (what xdist hands out, in order) puts the slow
    file first, then the Docker one."""
    suite = tmp_path / "tests"
    suite.mkdir()
    (suite / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    for name, marks in (("a_pure", ""), ("b_docker", "@pytest.mark.docker"), ("c_slow", "@pytest.mark.slow")):
        (suite / f"test_{name}.py").write_text(REPORT.format(name=name, marks=marks))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2"]
    command += ["--dist", "loadfile", "--no-loadscope-reorder", "-o", "markers=slow\ndocker", "tests"]
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    ran = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, "SCRATCH_OUT": str(tmp_path)},
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    records = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("*.json"))]
    assert len(records) >= 2  # the Docker test skips where no engine answers
    share = max(1, usable_cores() // 2)
    assert all(record["threads"] == share and record["env"] == str(share) for record in records)
    order = ["tests/test_c_slow.py", "tests/test_b_docker.py", "tests/test_a_pure.py"]
    assert all(record["order"] == order for record in records)
