"""`bench/service.py --quick` end to end: a real service, real OpenEnv, real sandboxes; the JSON has every key
and no errors. Throughput targets are not asserted (the machine is shared); the report reads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="OpenEnv is the baseline: pip install -e .[dev] (or .[bench])")

KEYS = {
    "steps_per_s", "http_steps_per_s", "p50_ms", "p99_ms", "openenv_steps_per_s", "openenv_modes",
    "ratio_vs_openenv", "modes", "best_steps_per_s", "sandboxed_sessions", "sandboxed_errors", "errors",
    "openenv_errors", "load_avg_1m",
}  # fmt: skip


@pytest.mark.docker
@pytest.mark.slow
def test_service_bench_quick(repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(repo_root / "bench" / "service.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=repo_root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert KEYS <= set(result), KEYS - set(result)
    assert set(result["steps_per_s"]) == set(result["http_steps_per_s"]) == {"1", "16", "128"}
    assert all(value > 0 for value in result["steps_per_s"].values())
    assert result["errors"] == result["openenv_errors"] == result["sandboxed_errors"] == 0
    assert result["sandboxed_sessions"] == 16
    assert result["openenv_steps_per_s"] > 0 and result["ratio_vs_openenv"] > 0
