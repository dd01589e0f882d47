"""The envname plugin as a whole: the Env contract, its registration, the shipped task suite, the env's
scripted policy through the real env service, and (slow) one training step from an empty folder. The game's
own rules are tested beside this file."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentrl.agent.parsing import parse_turn
from agentrl.client import EnvClient
from agentrl.env import ScriptedTurns, StepResult, check_env, make
from agentrl.service.embedded import EmbeddedService

from agentrl_envname.env import ENV_ID, EnvnameEnv
from agentrl_envname.make_tasks import SUITE_DIR, write_suite

SPLITS = ("train", "heldout")


def load(split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SUITE_DIR / f"{split}.jsonl").open()]


def test_check_env_passes_with_and_without_a_task() -> None:
    check_env(EnvnameEnv(), options={"task": load("train")[0]})
    check_env(EnvnameEnv())


def test_the_registered_id_makes_the_env() -> None:
    import agentrl_envname  # noqa: F401  (registers the env, as the entry point does)

    assert isinstance(make(ENV_ID), EnvnameEnv)


def test_the_shipped_suite_is_what_the_generator_writes(tmp_path: Path) -> None:
    write_suite(tmp_path)
    for split in SPLITS:
        assert (tmp_path / f"{split}.jsonl").read_text() == (SUITE_DIR / f"{split}.jsonl").read_text()
    train, heldout = ({task["id"] for task in load(split)} for split in SPLITS)
    assert train and heldout and train.isdisjoint(heldout)


async def play(url: str, task: dict[str, Any]) -> StepResult:
    """One episode of the scripted policy through the env service, its turns parsed as a model's are."""
    async with EnvClient(url) as client:
        start = await client.create_session(ENV_ID, task, seed=0)
        turns = ScriptedTurns(EnvnameEnv.scripted_policy, task, env_kwargs={})
        observation = start.observation
        try:
            while (text := turns.next_turn(observation)) is not None:
                result = await client.step(start.session_id, parse_turn(text))
                if result.terminated or result.truncated:
                    return result
                observation = result.observation
            raise AssertionError("the scripted policy ended its plan before the episode ended")
        finally:
            await client.close_session(start.session_id)


@pytest.mark.docker  # only --sandboxed
def test_the_scripted_policy_wins_through_the_env_service(tmp_path: Path) -> None:
    with EmbeddedService(tmp_path / "service.log", preload=["agentrl_envname"]) as service:
        results = [asyncio.run(play(service.url, task)) for task in load("heldout")[:3]]
    assert all(result.info["success"] and result.reward == 1.0 for result in results)


@pytest.mark.slow
@pytest.mark.docker  # only --sandboxed
def test_one_training_step_from_an_empty_folder(tmp_path: Path) -> None:
    if not importlib.metadata.entry_points(group="agentrl.envs", name="envname"):
        pytest.skip(
            "install the plugin first (pip install -e . --no-deps --no-build-isolation): agentrl finds its "
            "config by entry point"
        )
    command = [
        sys.executable, "-m", "agentrl.cli.main", "train", "--task", "envname", "train.steps=1",
        "train.tasks_per_step=2", "train.group_size=2", "eval.before=false", "eval.after=false",
        f"runs_dir={tmp_path}", f"store.url=sqlite:///{tmp_path}/store.db",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.glob("*/final"))
