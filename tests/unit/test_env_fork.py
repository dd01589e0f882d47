"""`Env.fork`: the guards, each capability on a pure env, and `check_env`'s fork check."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures_envs import GuessNumberEnv

from agentrl.env import Env, StepResult, check_env, make
from agentrl.env.builtin_echo import EchoEnv
from agentrl.env.checker import check_fork
from agentrl.errors import EnvError, EpisodeOver, ForkUnsupported
from agentrl.types import Action, ToolCall


def guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall("guess", {"number": number}),))


def observed(result: StepResult) -> tuple[Any, ...]:
    return result.observation, result.reward, result.terminated, result.truncated, result.info["state_key"]


class NoForkEnv(GuessNumberEnv):
    fork_capability = "none"


class ReplayEnv(GuessNumberEnv):
    """Forks by replay; `drift` makes every replayed reset start elsewhere (a non-deterministic env)."""

    fork_capability = "replay"
    spawned = 0

    def __init__(self, drift: bool = False) -> None:
        super().__init__(high=10)
        self.drift = drift

    def spawn(self) -> Env:
        ReplayEnv.spawned += 1
        child = ReplayEnv(self.drift)
        child.high = 10 + ReplayEnv.spawned if self.drift else 10
        return child


def test_a_copy_fork_steps_like_its_parent_and_independently() -> None:
    env = GuessNumberEnv()
    env.reset(options={"task": {"target": 42}})
    env.step(guess(50))
    fork = env.fork()
    assert fork.turns_taken == env.turns_taken == 1
    assert observed(fork.step(guess(20))) == observed(env.step(guess(20)))
    fork.step(guess(42))  # the fork ends; the parent goes on
    assert env.step(guess(30)).observation == "higher"
    assert fork.turns_taken == 3 and env.turns_taken == 3


def test_a_fork_keeps_the_episode_budget() -> None:
    env = GuessNumberEnv(max_guesses=2)
    env.reset(options={"task": {"target": 7}})
    env.step(guess(1))
    fork = env.fork()
    assert fork.step(guess(2)).truncated  # the parent's first guess counts against the fork's budget


def test_fork_before_reset_after_the_end_and_without_the_capability_raise() -> None:
    with pytest.raises(EnvError, match="fork\\(\\) was called before reset"):
        GuessNumberEnv().fork()
    env = GuessNumberEnv()
    env.reset(options={"task": {"target": 3}})
    env.step(guess(3))
    with pytest.raises(EpisodeOver):
        env.fork()
    refusing = NoForkEnv()
    refusing.reset(options={"task": {"target": 3}})
    with pytest.raises(ForkUnsupported, match="cannot fork"):
        refusing.fork()


def test_a_replay_fork_replays_reset_and_actions() -> None:
    env = ReplayEnv()
    env.reset(seed=1, options={"task": {"target": 6}})
    env.step(guess(5))
    env.step(guess(8))
    fork = env.fork()
    assert fork.turns_taken == 2 and fork is not env
    assert observed(fork.step(guess(7))) == observed(env.step(guess(7)))
    again = fork.fork()  # a fork of a fork replays the fork's own episode
    assert again.turns_taken == 3


def test_a_replay_that_ends_elsewhere_raises() -> None:
    env = ReplayEnv(drift=True)
    env.reset(options={"task": {"target": 6}})
    env.step(guess(5))
    with pytest.raises(EnvError, match="not deterministic"):
        env.fork()


def test_a_subclass_step_calling_its_parent_counts_one_turn() -> None:
    class Wrapped(EchoEnv):
        def step(self, action: Action) -> StepResult:
            return super().step(action)

    env = Wrapped()
    env.reset()
    env.step(Action(text="a"))
    assert env.turns_taken == 1


def test_check_env_checks_forks() -> None:
    check_env(GuessNumberEnv(), options={"task": {"target": 5}}, actions=(guess(3), guess(4), guess(5)))
    check_fork(NoForkEnv(), options={"task": {"target": 5}})

    class Lying(GuessNumberEnv):  # claims "copy" but forks into a fresh episode
        def fork(self) -> Env:
            child = GuessNumberEnv()
            child.reset(options={"task": {"target": 1}})
            return child

    with pytest.raises(EnvError, match="a fork must copy"):
        check_fork(Lying(), options={"task": {"target": 5}}, actions=(guess(3), guess(4)))


def test_first_party_pure_envs_fork() -> None:
    pytest.importorskip("agentrl_maze")
    maze = make("agentrl/Maze-v0")
    moves = [Action(text="", tool_calls=(ToolCall("move", {"direction": d}),)) for d in ("down", "right")]
    check_fork(maze, seed=3, actions=(moves[0], *moves * 3))
    check_fork(EchoEnv(), actions=(Action(text="a"), Action(text="b")))
