"""The one training loop (`agentrl/trainer/loop.py`): every rank makes the same collective calls in the same
order, whatever its seat, and a spent env-step budget ends the run on every rank after the same step.

Two ranks are simulated one after the other: rank 0 runs first and every collective it makes is recorded
with its result (a broadcast's value); rank 1 then runs and each of its collectives must be the next one
rank 0 made, and gets rank 0's value back. A rank that skips, adds or reorders a collective fails the test
(a real run would hang). The seats are the real ones where they hold no engine (`FollowerSeat`, the
`IntoEngine` / `GatherOnly` / `AfterTheLastStep` weights-out strategies and `publish_weights`); rank 0's
seat plays no episodes (a stand-in for what `SyncSeat.collect` returns).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from agentrl.config import RunConfig
from agentrl.trainer import checkpoint, distributed
from agentrl.trainer.loop import Collected, FollowerSeat, Plan, run_loop
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.sft import AfterTheLastStep
from agentrl.trainer.step import GatherOnly, IntoEngine, Learner, WeightsOut, publish_weights
from agentrl.trainer.update import UpdateResult

STEPS = 3
ENV_STEPS = 4  # what the leader's seat counts per step


class World:
    """Records rank 0's collectives, then checks rank 1's against them."""

    def __init__(self) -> None:
        self.made: list[tuple[str, Any]] = []
        self.replayed = 0

    def values(self, name: str) -> list[Any]:
        """What rank 0 passed to its collectives named `name`, in order."""
        return [value for made, value in self.made if made == name]

    def collective(self, name: str, parallel: DataParallel, value: Any = None) -> Any:
        if parallel.rank == 0:
            self.made.append((name, value))
            return value
        assert self.replayed < len(self.made), f"rank {parallel.rank} made an extra collective: {name}"
        expected, result = self.made[self.replayed]
        assert expected == name, f"rank {parallel.rank} made {name} where rank 0 made {expected}"
        self.replayed += 1
        return result

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def broadcast(obj: Any, parallel: DataParallel) -> Any:
            return self.collective("broadcast", parallel, obj)

        def full_state_dict(model: Any, every_rank: bool = False) -> dict[str, Any]:
            self.collective("full_state_dict", model.parallel)
            return {}

        def load(path: Path, model: Any, optimizer: Any, scheduler: Any, parallel: DataParallel) -> None:
            self.collective("checkpoint.load", parallel)

        def save(run_dir: Path, state: Any, model: Any, *args: Any, parallel: DataParallel) -> None:
            self.collective("checkpoint.save", parallel, state.env_steps)

        monkeypatch.setattr(distributed, "broadcast", broadcast)
        monkeypatch.setattr(distributed, "full_state_dict", full_state_dict)
        monkeypatch.setattr(checkpoint, "load", load)
        monkeypatch.setattr(checkpoint, "save", save)


class Policy(torch.nn.Linear):
    def __init__(self, parallel: DataParallel) -> None:
        super().__init__(1, 1)
        self.parallel = parallel


class FakeLearner(Learner):
    def update(self, samples: Sequence[Any] | None) -> UpdateResult:
        return UpdateResult({"loss": 1.0} if samples else {})


class FakeEngine:
    """Rank 0's engine as `publish_weights` and `IntoEngine` use it."""

    module = None

    def load_weights(self, weights: Any) -> None: ...
    def release_memory(self) -> None: ...
    def retake_memory(self) -> None: ...


def learner_for(config: RunConfig, rank: int) -> Callable[[], Learner]:
    parallel = DataParallel(rank=rank, world_size=2)
    return lambda: FakeLearner(config, Policy(parallel), None, None, None, parallel, 0)


@dataclass
class Follower(FollowerSeat):
    """A follower that remembers the step `finish_training` was told was the last."""

    finished_at: int | None = None

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        self.finished_at = last_step
        await super().finish_training(learner, last_step)


@dataclass
class LeaderSeat(Follower):
    """Rank 0's side, without episodes: the plan, a sample per step (which cost `ENV_STEPS` env steps), the
    weights into its engine; it remembers the steps it evaluated at."""

    engine: FakeEngine | None = None
    publish_at_end: bool = False
    evaluated: list[int] = field(default_factory=list)

    async def evaluate(self, step: int) -> Any:
        self.evaluated.append(step)
        return None

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        self.env_steps_total += ENV_STEPS

    def restored(self, learner: Learner) -> None:
        publish_weights(self.engine, learner)  # type: ignore[arg-type]

    def plan(self, first_step: int) -> Plan:  # type: ignore[override]
        return Plan("runs/x", first_step, STEPS)

    async def collect(self, step: int) -> Collected:  # type: ignore[override]
        return Collected([object()])  # type: ignore[list-item]

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        self.finished_at = last_step
        if self.publish_at_end:
            publish_weights(self.engine, learner)  # type: ignore[arg-type]


def config_with(every: int, budget: int = 0) -> RunConfig:
    config = RunConfig()
    return replace(
        config,
        trainer=replace(config.trainer, checkpoint_every=every),
        train=replace(config.train, env_step_budget=budget),
    )


def resume_at(step: int, env_steps: int = 0) -> Any:
    return Path("runs/x/checkpoints/step-1"), checkpoint.CheckpointState(
        step=step, run_id="r", weights_version=1, env_steps=env_steps
    )


def seats(kind: str, config: RunConfig) -> tuple[LeaderSeat, Follower]:
    engine = FakeEngine()
    if kind == "rl":
        leader_out: WeightsOut = IntoEngine(engine)  # type: ignore[arg-type]
        leader = LeaderSeat(config, DataParallel(0, 2), learner_for(config, 0), leader_out, engine=engine)
        return leader, Follower(config, DataParallel(1, 2), learner_for(config, 1), GatherOnly())
    leader = LeaderSeat(
        config,
        DataParallel(0, 2),
        learner_for(config, 0),
        AfterTheLastStep(),
        engine=engine,
        publish_at_end=True,
    )
    follower = Follower(
        config, DataParallel(1, 2), learner_for(config, 1), AfterTheLastStep(), gather_at_end=True
    )
    return leader, follower


@pytest.mark.parametrize("kind", ["rl", "sft"])
@pytest.mark.parametrize("resumed", [False, True])
def test_every_rank_makes_the_same_collectives_in_the_same_order(
    kind: str, resumed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World()
    world.install(monkeypatch)
    config = config_with(every=1)
    leader, follower = seats(kind, config)
    resume = resume_at(1) if resumed else None
    asyncio.run(run_loop(config, leader, resume))
    asyncio.run(run_loop(config, follower, resume))
    assert world.replayed == len(world.made), f"rank 1 skipped {world.made[world.replayed :]}"
    names = [name for name, _ in world.made]
    steps = STEPS - (1 if resumed else 0)
    assert names.count("checkpoint.save") == steps and names.count("checkpoint.load") == int(resumed)
    gathers = steps if kind == "rl" else 1  # RL: after every update; SFT: once, after the last step
    assert names.count("full_state_dict") == gathers + int(resumed)
    assert names.count("broadcast") == 1 + steps  # the plan, each step's samples: no budget, no decision
    assert leader.finished_at == follower.finished_at == STEPS


def decisions(world: World) -> list[bool]:
    """Rank 0's broadcast words on the env-step budget (the only booleans the loop broadcasts)."""
    return [value for value in world.values("broadcast") if isinstance(value, bool)]


@pytest.mark.parametrize(
    ("budget", "last", "words"),
    [
        (0, STEPS, []),  # no budget: no collective
        (STEPS * ENV_STEPS + 1, STEPS, [False] * STEPS),  # never reached: train.steps caps the run
        (2 * ENV_STEPS - 1, 2, [False, True]),  # reached within step 2: the run ends after it
        (2 * ENV_STEPS, 2, [False, True]),  # reached exactly
    ],
)
def test_a_spent_env_step_budget_ends_the_run_after_the_same_step_on_every_rank(
    budget: int, last: int, words: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World()
    world.install(monkeypatch)
    config = config_with(every=1, budget=budget)
    leader, follower = seats("rl", config)
    asyncio.run(run_loop(config, leader, None))
    asyncio.run(run_loop(config, follower, None))
    assert world.replayed == len(world.made), f"rank 1 skipped {world.made[world.replayed :]}"
    assert decisions(world) == words
    assert leader.finished_at == follower.finished_at == last  # the run's last step on every rank
    assert leader.evaluated == [0, last]  # held out before training and after its last step
    assert world.values("checkpoint.save") == [ENV_STEPS * step for step in range(1, last + 1)]


def test_a_resumed_run_counts_on_from_its_checkpoint_and_stops_where_the_straight_run_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = World()
    world.install(monkeypatch)
    config = config_with(every=1, budget=2 * ENV_STEPS)
    leader, follower = seats("rl", config)
    resume = resume_at(1, env_steps=ENV_STEPS)  # the straight run's checkpoint after step 1
    asyncio.run(run_loop(config, leader, resume))
    asyncio.run(run_loop(config, follower, resume))
    assert world.replayed == len(world.made), f"rank 1 skipped {world.made[world.replayed :]}"
    assert decisions(world) == [True]  # step 2 spends it, as in the straight run above
    assert leader.finished_at == follower.finished_at == 2
    assert leader.env_steps_total == 2 * ENV_STEPS and world.values("checkpoint.save") == [2 * ENV_STEPS]


def test_a_seat_that_skips_a_collective_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a follower that does not take part in the gather after a restore."""

    @dataclass
    class Skipping(FollowerSeat):
        def restored(self, learner: Learner) -> None:
            pass

    world = World()
    world.install(monkeypatch)
    config = config_with(every=1)
    leader, follower = seats("rl", config)
    skipping = Skipping(config, follower.parallel, follower.learner_factory, GatherOnly())
    asyncio.run(run_loop(config, leader, resume_at(1)))
    with pytest.raises(AssertionError, match="made broadcast where rank 0 made full_state_dict"):
        asyncio.run(run_loop(config, skipping, resume_at(1)))
