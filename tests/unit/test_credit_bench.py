"""bench/credit.py --quick runs, prints one JSON object with every key, and its loop GiGPO agrees.

The speed gate itself (exit 1 below 10x) is not asserted: timings on a shared machine are not
deterministic. The exit code must match the printed `ok`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentrl.credit import ESTIMATORS


def test_quick_bench_prints_every_key(repo_root: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(repo_root / "bench" / "credit.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
    )
    result = json.loads(completed.stdout)
    expected = {f"{name}_1m_s" for name in ESTIMATORS} | {
        "gigpo_loop_1m_s",
        "gigpo_loop_scaled_from",
        "gigpo_speedup_vs_loop",
        "hgpo_speedup_vs_loop",
        "salt_speedup_vs_loop",
        "gigpo_loop_max_abs_diff",
        "anchor_hit_rate",
        "intern_1m_s",
        "gigpo_speedup_incl_interning",
        "steps",
        "ok",
    }
    assert expected <= set(result)
    assert all(result[f"{name}_1m_s"] > 0 for name in ESTIMATORS)
    assert result["gigpo_loop_max_abs_diff"] < 1e-9
    assert 50_000 < result["steps"] < 200_000
    assert completed.returncode == (0 if result["ok"] else 1), completed.stderr
