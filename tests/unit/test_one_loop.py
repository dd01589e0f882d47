"""The one training loop (`agentrl/trainer/loop.py`): every rank makes the same collective calls in the same
order, whatever its seat.

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
from dataclasses import dataclass, replace
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


class World:
    """Records rank 0's collectives, then checks rank 1's against them."""

    def __init__(self) -> None:
        self.made: list[tuple[str, Any]] = []
        self.replayed = 0

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
            self.collective("checkpoint.save", parallel)

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
class LeaderSeat(FollowerSeat):
    """Rank 0's side, without episodes: the plan, a sample per step, the weights into its engine."""

    engine: FakeEngine | None = None
    publish_at_end: bool = False

    async def evaluate(self, step: int) -> Any:
        return None

    def restored(self, learner: Learner) -> None:
        publish_weights(self.engine, learner)  # type: ignore[arg-type]

    def plan(self, first_step: int) -> Plan:  # type: ignore[override]
        return Plan("runs/x", first_step, STEPS)

    async def collect(self, step: int) -> Collected:  # type: ignore[override]
        return Collected([object()])  # type: ignore[list-item]

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        if self.publish_at_end:
            publish_weights(self.engine, learner)  # type: ignore[arg-type]


def config_with(every: int) -> RunConfig:
    config = RunConfig()
    return replace(config, trainer=replace(config.trainer, checkpoint_every=every))


def resume_at(step: int) -> Any:
    return Path("runs/x/checkpoints/step-1"), checkpoint.CheckpointState(
        step=step, run_id="r", weights_version=1
    )


def seats(kind: str, config: RunConfig) -> tuple[FollowerSeat, FollowerSeat]:
    engine = FakeEngine()
    if kind == "rl":
        leader_out: WeightsOut = IntoEngine(engine)  # type: ignore[arg-type]
        leader = LeaderSeat(config, DataParallel(0, 2), learner_for(config, 0), leader_out, engine=engine)
        return leader, FollowerSeat(config, DataParallel(1, 2), learner_for(config, 1), GatherOnly())
    leader = LeaderSeat(
        config,
        DataParallel(0, 2),
        learner_for(config, 0),
        AfterTheLastStep(),
        engine=engine,
        publish_at_end=True,
    )
    follower = FollowerSeat(
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
