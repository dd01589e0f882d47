"""bench/trainer.py --quick runs on the real model and prints its JSON with consistent figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quick_trainer_bench_prints_its_keys(repo_root: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [
        {"step": 0, "eval/success_rate": 0.5},
        {"step": 1, "rollout_s": 3.0, "credit_s": 0.5, "update_s": 1.5},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    completed = subprocess.run(
        [sys.executable, str(repo_root / "bench" / "trainer.py"), "--quick", "--rl-step", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=repo_root,
        check=True,
    )
    result = json.loads(completed.stdout)
    assert result["matmul_gflops"] > 0 and result["train_tokens_per_s"] > 0
    assert result["mfu_ratio"] == pytest.approx(result["train_gflops"] / result["matmul_gflops"], abs=2e-3)
    split = result["rl_step_split"]
    assert split["steps"] == 1 and split["rollout_s"] == 3.0 and split["sync_s"] == 0.0
    assert split["rollout_fraction"] == pytest.approx(0.6)
