"""`train.env_step_budget` outside the loop: the rank-0 seats' count and its metrics, the checkpoint that
keeps the count for a resumed run, and the runs that refuse a budget (SFT, a resume whose budget is spent).
The loop's stop on every rank: tests/unit/test_one_loop.py; a real run:
tests/smoke/test_env_step_budget_train.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama

from agentrl.config import RunConfig
from agentrl.errors import ConfigError
from agentrl.trainer import checkpoint
from agentrl.trainer.loop import RunOwner
from agentrl.trainer.parallel import SINGLE_PROCESS
from agentrl.trainer.run import resume_point
from agentrl.trainer.sft import sft_run_config
from agentrl.trainer.step import Learner, save_checkpoint_if_due
from agentrl.types import Action, Episode, Turn


def episode(turns: int, parent: str | None = None, branch: int | None = None) -> Episode:
    played = tuple(
        Turn(index, (1,), (2,), (-0.1,), "t", Action("t"), "obs", 0.0, False, None) for index in range(turns)
    )
    return Episode("e", "env", "task", "g", 0, played, "terminated", parent_id=parent, branch_turn=branch)


def config_with(budget: int = 0, resume: Path | None = None) -> RunConfig:
    config = RunConfig()
    return replace(
        config,
        train=replace(config.train, env_step_budget=budget),
        trainer=replace(config.trainer, checkpoint_every=1, resume=None if resume is None else str(resume)),
    )


def test_the_seat_logs_each_steps_env_steps_and_the_running_total() -> None:
    seat = RunOwner(ctx=None, parallel=SINGLE_PROCESS, env_steps_total=10)  # type: ignore[arg-type]
    tree = [episode(5), episode(5, parent="e", branch=2)]  # 5 + 3: the branch's two copied turns are free
    assert seat.count_env_steps(tree) == {"env_steps": 8.0, "env_steps_total": 18.0}
    assert seat.count_env_steps([episode(2)]) == {"env_steps": 2.0, "env_steps_total": 20.0}


def save_at(run_dir: Path, step: int, env_steps: int) -> None:
    model = tiny_llama(hidden=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    learner = Learner(config_with(), model, optimizer, scheduler, None, SINGLE_PROCESS, 0)
    save_checkpoint_if_due(config_with(), step, learner, run_dir, "run", lambda: None, env_steps)


def test_a_checkpoint_keeps_the_env_steps_so_far_for_the_resumed_run(tmp_path: Path) -> None:
    save_at(tmp_path, step=2, env_steps=37)
    resume = resume_point(config_with(budget=100, resume=tmp_path))
    assert resume is not None and resume[1].step == 2 and resume[1].env_steps == 37
    # a budget the checkpoint has already spent leaves nothing to resume
    with pytest.raises(ConfigError, match="played 37 env steps, so train.env_step_budget=37 is spent; raise"):
        resume_point(config_with(budget=37, resume=tmp_path))


def test_a_checkpoint_written_before_env_steps_were_kept_counts_from_zero(tmp_path: Path) -> None:
    save_at(tmp_path, step=1, env_steps=5)
    state_file = checkpoint.latest(tmp_path) / checkpoint.STATE_FILE  # type: ignore[operator]
    state = json.loads(state_file.read_text())
    del state["env_steps"]
    state_file.write_text(json.dumps(state))
    resume = resume_point(config_with(resume=tmp_path))
    assert resume is not None and resume[1].env_steps == 0


def test_sft_refuses_an_env_step_budget() -> None:
    config = replace(config_with(budget=100), sft=replace(RunConfig().sft, demos="runs/d/demos.jsonl"))
    with pytest.raises(ConfigError, match="agentrl sft plays no env steps.*drop train.env_step_budget"):
        sft_run_config(config)
    assert sft_run_config(replace(config, train=RunConfig().train)).train.env_step_budget == 0
