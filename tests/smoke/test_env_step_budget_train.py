"""`train.env_step_budget` end to end: `agentrl train --task maze` (pure Python, no Docker) with a tiny random
Llama stops after the first step whose env-step total reaches the budget, before `train.steps`; logs
`env_steps` and `env_steps_total` every step, evaluates after that last step and saves the final weights.
In sync and in async mode (which counts the groups it trains on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
BUDGET = 5  # 2 episodes of 1 to 2 turns per step: reached at step 2 or 3 of 4


@pytest.mark.slow  # one short CLI run each: about 25 s on the shared 2-core CPU
@pytest.mark.parametrize("mode", ["trainer.async_mode=false", "trainer.async_mode=true"])
def test_a_run_ends_after_the_step_that_spends_its_env_step_budget(
    repo_root: Path, tmp_path: Path, tiny_model: Path, mode: str
) -> None:
    args = [
        "train",
        "--task",
        "maze",
        "name=budget",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        f"model.name={tiny_model}",
        "rollout.max_context_tokens=4096",  # one byte per token
        "sampling.max_new_tokens=32",
        "rollout.max_turns=2",
        "train.steps=4",
        "train.tasks_per_step=1",
        "train.group_size=2",
        f"train.env_step_budget={BUDGET}",
        "eval.before=false",
        "eval.num_tasks=1",
        mode,
    ]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    result = subprocess.run(
        AGENTRL + args, cwd=repo_root, capture_output=True, text=True, env=env, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]

    run_dir = tmp_path / "runs" / "budget"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "rollout_s" in row]
    last = steps[-1]["step"]
    assert [row["step"] for row in steps] == list(range(1, last + 1)) and last < 4
    totals = [row["env_steps_total"] for row in steps]
    assert totals == [sum(row["env_steps"] for row in steps[: n + 1]) for n in range(len(steps))]
    assert all(2 <= row["env_steps"] <= 4 for row in steps)  # one group of 2 episodes of 1 or 2 turns
    assert totals[-1] >= BUDGET and all(total < BUDGET for total in totals[:-1])
    assert [row["step"] for row in rows if "eval/success_rate" in row] == [last]  # evaluated after the last
    assert (run_dir / "final" / "config.json").is_file()
