"""End to end with the real model: `agentrl eval` runs SmolLM2 episodes on both web task families."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("suite", ["web-miniwob", "web-shop"])
def test_smollm2_episodes_end_to_end(suite: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "eval", "--task", suite]
        + ["eval.num_tasks=2", "rollout.max_turns=2", "sampling.max_new_tokens=48"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "AGENTRL_DB_URL": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(
        r"held-out: success ([0-9.]+) over (\d+) episodes .*infrastructure failures (\d+)", result.stdout
    )
    assert match is not None, result.stdout
    assert 0.0 <= float(match[1]) <= 1.0
    assert match[2] == "2" and match[3] == "0"  # both episodes ran through the browser without infra failures
