"""The envname game's rules: a right guess wins, a turn without one is invalid, and the same interval is the
same state whatever guesses led there."""

from __future__ import annotations

from agentrl.types import Action

from agentrl_envname.env import EnvnameEnv, state_key
from agentrl_envname.policy import guess


def test_a_right_guess_succeeds_and_a_turn_without_one_is_invalid() -> None:
    env = EnvnameEnv()
    env.reset(options={"task": {"id": "t", "high": 8, "target": 3}})
    bad = env.step(Action(text="is it three?"))
    assert bad.info["invalid"] and bad.reward == 0.0 and not bad.terminated
    assert "guess" in bad.observation  # the error shows the call format
    won = env.step(guess(3))
    assert won.terminated and won.reward == 1.0 and won.info["success"]


def test_the_same_interval_is_the_same_state_whatever_the_path() -> None:
    env = EnvnameEnv()
    keys = []
    for order in ([4, 12], [12, 4]):
        env.reset(options={"task": {"id": "t", "high": 16, "target": 9}})
        keys.append([env.step(guess(number)).info["state_key"] for number in order][-1])
    assert keys[0] == keys[1] == state_key("t", 5, 11)
