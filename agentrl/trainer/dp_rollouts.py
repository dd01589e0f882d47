"""Data-parallel rollouts (`trainer.dp_rollouts`, on by default with `trainer.nproc` > 1): every rank plays
its share of the step's groups with an engine of its own, against the same env service.

What this is: rank 0 still decides what is played (the task sampler, its extra rounds, the held-out tasks)
and owns the store. Each time it plays tasks it broadcasts a `PlayOrder` (tasks, group size, sampling,
rollout seed); every rank plays one contiguous block of the tasks (`shares`: whole groups, block sizes
differing by at most one), rank 0 included, and the episodes come back to rank 0 in rank order, which is
task order then member order as in one process (`RolloutRanks.play`). A rank plays its block with the task
indices the whole list gives it (`collect_rollouts(first_task_index=)`), so env seeds and, with
`rollout.seeded_sampling`, sampler seeds are those of a single process: with an engine whose seeded
sampling does not depend on batching (the HF engine samples each seeded request alone), a step's episodes,
advantages and metrics do not depend on how many ranks played it (`tests/integration/test_dp_rollouts.py`).
When rank 0 is done playing for a while (a step's rounds, an evaluation) it ends the phase with `STOP`;
the other ranks serve orders until then (`serve_phase`), then join the update. After the update the
gathered weights go into every rank's engine (`step.IntoEngine(every_rank=True)`).

Without seeded sampling the ranks > 0 seed torch from (rollout seed, rank) for each order, so their
streams differ from each other and from rank 0's.

What this is not: a scheduler (no work stealing: a rank whose block finishes early waits at the gather),
or multi-node service discovery: with ranks on several nodes `service.url` must name a service (or
replicas) every node reaches; rank 0's embedded service listens on 127.0.0.1 only (`check_placement`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import torch

from agentrl.agent.engines.base import PolicyEngine, SamplingParams
from agentrl.agent.engines.factory import build_engine
from agentrl.agent.rollout import derive_seed
from agentrl.agent.tree import collect_groups
from agentrl.client import EnvClient
from agentrl.config import RunConfig
from agentrl.errors import ConfigError
from agentrl.harness.runner import choose_player
from agentrl.tasks import Task
from agentrl.trainer import distributed
from agentrl.trainer.parallel import DataParallel
from agentrl.types import Episode

STOP = None
"""What rank 0 broadcasts instead of a `PlayOrder` when a rollout phase is over."""


@dataclass(frozen=True)
class PlayOrder:
    """`group_size` episodes of each of `tasks`, sampled with `sampling`, from rollout seed `seed`."""

    tasks: list[Task]
    group_size: int
    sampling: SamplingParams
    seed: int


def enabled(config: RunConfig, parallel: DataParallel) -> bool:
    """Whether every rank rolls out in this run."""
    return parallel.world_size > 1 and config.trainer.dp_rollouts


def check_placement(config: RunConfig, parallel: DataParallel) -> None:
    """Refuse data-parallel rollouts across nodes with no `service.url`: rank 0's embedded service binds
    127.0.0.1, which the other nodes cannot reach."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(parallel.world_size)))
    reachable = config.service.url or config.service.ray_fleet_address
    if enabled(config, parallel) and local < parallel.world_size and not reachable:
        raise ConfigError(
            "trainer.dp_rollouts with ranks on several nodes needs service.url (or --service-url): an env "
            "service or fleet that every node reaches (rank 0's embedded service listens on 127.0.0.1); "
            "or set trainer.dp_rollouts=false to roll out on rank 0 alone"
        )


def shares(count: int, world_size: int) -> list[range]:
    """The task indices each rank plays, in rank order: contiguous blocks whose sizes differ by at most one
    (the first `count % world_size` ranks take one more)."""
    base, extra = divmod(count, world_size)
    blocks, start = [], 0
    for rank in range(world_size):
        size = base + (rank < extra)
        blocks.append(range(start, start + size))
        start += size
    return blocks


async def play_share(
    client: EnvClient,
    engine: PolicyEngine,
    config: RunConfig,
    order: PlayOrder,
    parallel: DataParallel,
    progress: bool = False,
) -> list[Episode]:
    """This rank's block of `order`, played as `collect_rollouts` would play it within the whole list."""
    block = shares(len(order.tasks), parallel.world_size)[parallel.rank]
    if not block:
        return []
    return await collect_groups(
        client,
        engine,
        config.env.id,
        order.tasks[block.start : block.stop],
        order.group_size,
        order.sampling,
        config.rollout,
        seed=order.seed,
        progress=progress,
        first_task_index=block.start,
        player=choose_player(config.rollout),
    )


@dataclass(frozen=True)
class RolloutRanks:
    """Rank 0's side: send each play order to every rank, play its own block, gather the episodes."""

    parallel: DataParallel

    async def play(
        self,
        client: EnvClient,
        engine: PolicyEngine,
        config: RunConfig,
        order: PlayOrder,
        progress: bool = False,
    ) -> list[Episode]:
        """Every episode of `order`, in task order then member order, played by all ranks."""
        await distributed.off_loop(distributed.broadcast, order, self.parallel)
        mine = await play_share(client, engine, config, order, self.parallel, progress)
        blocks = await distributed.off_loop(distributed.gather_to_rank0, mine, self.parallel)
        return [episode for block in blocks for episode in block]

    async def end_phase(self) -> None:
        """Tell the other ranks that no more orders come before the next collective of the loop."""
        await distributed.off_loop(distributed.broadcast, STOP, self.parallel)


async def serve_phase(
    client: EnvClient, engine: PolicyEngine, config: RunConfig, parallel: DataParallel
) -> int:
    """Ranks > 0: play this rank's block of every order rank 0 sends, until it ends the phase; the number
    of orders played."""
    played = 0
    while (order := await distributed.off_loop(distributed.broadcast, None, parallel)) is not STOP:
        if not config.rollout.seeded_sampling:
            torch.manual_seed(derive_seed(order.seed, parallel.rank))
        episodes = await play_share(client, engine, config, order, parallel)
        await distributed.off_loop(distributed.gather_to_rank0, episodes, parallel)
        played += 1
    return played


@asynccontextmanager
async def open_rollout_rank(config: RunConfig, service_urls: Sequence[str]) -> AsyncIterator[RolloutRank]:
    """A rank > 0's rollout side: an env client of rank 0's service (or replicas) and an engine of its own
    (the configured model; the trained weights arrive after each update); closed in reverse order."""
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(rank_client(config, service_urls))
        engine = build_engine(config.engine, config.model, trains=True, nproc=config.trainer.nproc)
        stack.push_async_callback(engine.aclose)
        yield RolloutRank(client, engine)


def rank_client(config: RunConfig, service_urls: Sequence[str]) -> EnvClient:
    """An env client of the replicas rank 0 uses; on a Ray fleet it follows the fleet's live replicas as
    rank 0's does (`agentrl/service/ray_fleet.py`)."""
    address = config.service.ray_fleet_address
    if address is None:
        return EnvClient(list(service_urls), config=config.service.client)
    from agentrl.service.ray_fleet import RayReplicas

    discover = RayReplicas(address).discover
    return EnvClient(list(service_urls), config=config.service.client, discover=discover)


@dataclass(frozen=True)
class RolloutRank:
    """What a rank > 0 plays with."""

    client: EnvClient
    engine: PolicyEngine
