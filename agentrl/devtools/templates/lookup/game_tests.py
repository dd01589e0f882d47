"""The envname game's rules: a right submit wins and a turn without a call is invalid (no command runs, so
no sandbox starts: no Docker needed)."""

from __future__ import annotations

from agentrl.types import Action

from agentrl_envname.env import EnvnameEnv
from agentrl_envname.make_tasks import generate
from agentrl_envname.policy import call


def test_a_right_submit_succeeds_and_a_turn_without_a_call_is_invalid() -> None:
    env = EnvnameEnv()
    task = generate("heldout", 1)[0]
    env.reset(options={"task": task})
    bad = env.step(Action(text="I would look at the file"))
    assert bad.info["invalid"] and bad.reward == 0.0 and not bad.terminated
    won = env.step(call("submit", "answer", task["answer"]))
    assert won.terminated and won.reward == 1.0 and won.info["success"]
