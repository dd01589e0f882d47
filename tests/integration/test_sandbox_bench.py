"""`bench/sandbox.py --quick` runs end to end against the engine, prints one JSON object with every key, and
meets the loose quick-mode targets (marked `docker`); its pure helpers are checked without Docker."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sandbox.py"
KEYS = {
    "cold_start_p50_ms",
    "cold_start_p95_ms",
    "acquire_p50_ms",
    "exec_p50_ms",
    "exec_p99_ms",
    "docker_exec_p50_ms",
    "fork_p50_ms",
    "max_concurrent",
    "mem_per_sandbox_mb",
}


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))  # as when it runs: its `import harness` resolves
    spec = importlib.util.spec_from_file_location("bench_sandbox", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_percentiles_are_nearest_rank() -> None:
    percentile = _bench().percentile
    samples = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert (percentile(samples, 0.5), percentile(samples, 0.95), percentile(samples, 0.99)) == (
        50.0,
        95.0,
        99.0,
    )
    assert percentile([0.002], 0.99) == 2.0


def test_quick_checks_flag_gross_misses_only() -> None:
    bench = _bench()
    good = {"exec_p50_ms": 1.2, "acquire_p50_ms": 5, "exec_speedup_vs_docker_exec": 40, "fork_p50_ms": 20}
    assert bench.check({**good, "max_concurrent": 16}, bench.QUICK) == []
    bad = bench.check(
        {**good, "exec_p50_ms": 70, "exec_speedup_vs_docker_exec": 1, "max_concurrent": 3}, bench.QUICK
    )
    assert len(bad) == 3


@pytest.mark.docker
def test_quick_benchmark_meets_its_loose_targets() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=180, check=False
    )
    results = json.loads(done.stdout)
    assert KEYS <= results.keys()
    assert done.returncode == 0, results["failures"]
    assert results["max_concurrent"] == 16 and results["exec_p50_ms"] < results["docker_exec_p50_ms"]
