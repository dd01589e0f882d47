"""A run whose every episode fails for infrastructure reasons stops with a clear error instead of going on.

The env service URL points at a loopback port nobody listens on: every session fails to open (an
infrastructure failure), is re-played `rollout.infra_attempts` times, and the evaluation then stops the run
with `RolloutError` rather than reporting "success 0.000 over 0 episodes".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.errors import RolloutError
from agentrl.trainer.run import require_some_usable
from agentrl.types import Episode


def episode(stop_reason: str, error: str | None = None) -> Episode:
    return Episode("e", "env", "t", "g", 0, (), stop_reason, error=error)  # type: ignore[arg-type]


def test_only_a_batch_of_nothing_but_infrastructure_failures_is_refused() -> None:
    require_some_usable([], "step 1", 3)
    require_some_usable([episode("infra_error", "lost"), episode("terminated")], "step 1", 3)
    with pytest.raises(
        RolloutError, match=r"all 2 episodes of step 1 .* after 3 play\(s\) each; first error: lost"
    ):
        require_some_usable([episode("infra_error", "lost"), episode("infra_error", "gone")], "step 1", 3)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_eval_against_an_unreachable_service_stops_with_the_reason(repo_root: Path, tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "agentrl.cli.main", "eval", "--task", "calc",
        f"service.url=http://127.0.0.1:{closed_port()}", "eval.num_tasks=2", "rollout.infra_attempts=2",
        f"runs_dir={tmp_path / 'runs'}", f"store.url=sqlite:///{tmp_path / 'store.db'}",
    ]  # fmt: skip
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    result = subprocess.run(command, cwd=repo_root, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "RolloutError: all 2 episodes of the held-out evaluation failed" in result.stderr
    assert "unreachable" in result.stderr and "Traceback" not in result.stderr
