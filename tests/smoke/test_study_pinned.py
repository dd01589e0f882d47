"""`scripts/study_pinned.sh`: a study played on the code of one commit. The script checks the commit out into
a worktree once and runs `agentrl study run` with agentrl and the env plugins imported from it; its own check
(both come from the worktree, or nothing runs) is what this test reads, with a study name that does not
exist so that nothing trains; further arguments reach `agentrl study run`. What it is not: a study run
(tests/smoke/test_study_cli.py plays one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_study_runs_on_the_pinned_commit_with_its_envs(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "AGENTRL_STUDY_CODE_DIR": str(tmp_path), "AGENTRL_PYTHON": sys.executable}
    code = tmp_path / f"agentrl-study-{head[:12]}"
    try:
        result = subprocess.run(
            ["bash", "scripts/study_pinned.sh", "no-such-study", "HEAD"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert (code / "agentrl" / "__init__.py").is_file()
        files = f"{code}/agentrl/__init__.py {code}/envs/calc"
        pinned = f"study_pinned: no-such-study on {head}, code from {code} ({files}"
        assert pinned in result.stderr, result.stderr[-2000:]
        assert result.returncode != 0 and "no-such-study" in result.stderr.split(pinned)[1]  # agentrl said so
        again = subprocess.run(
            ["bash", "scripts/study_pinned.sh", "no-such-study", "HEAD", "--until"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert pinned in again.stderr and "Preparing worktree" not in again.stderr  # checked out once
        assert "argument --until: expected one argument" in again.stderr  # further args reach `study run`
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=REPO, capture_output=True)
