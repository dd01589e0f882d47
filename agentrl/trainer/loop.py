"""THE training loop: every rank of every run (RL sync or async, SFT) runs `run_loop`; what differs by role
is a small `Seat` object passed in.

The loop, read top to bottom (cleanrl style); every rank makes the same calls in the same order, so the
cross-rank collectives (marked [c]) line up by construction, not by a comment:

    0. (the seat was opened: rank 0 opened the run; other ranks joined it)
    1. held-out evaluation before training (`seat.evaluate`; with data-parallel rollouts a rollout phase [c])
    2. the learner (`seat.make_learner`: the model, LoRA, FSDP2 sharding [c])
    3. resume: the checkpoint's shards and optimiser state [c], then the weights into the engine(s) [c]
    4. the plan: rank 0 broadcasts the run folder and the step range [c]
    5. each step: `seat.collect` (rank 0 plays or receives episodes and assigns credit; with data-parallel
       rollouts the others play their share [c]), `update_step` (rank 0's samples to every rank [c], the
       update, the weights out [c]), `seat.record` (rank 0: store, metrics, the env steps counted), a
       checkpoint when due [c]; with `train.env_step_budget` > 0, rank 0's word on whether its count has
       reached the budget [c], and the steps end there if it has
    6. `seat.finish_training` (SFT: the weights into the engine once [c]), `seat.close` (rank 0: the final
       weights, saved before the evaluation so that one interrupted can be played again from them), then the
       evaluation after (as 1), all at the last step played
    7. the result

The seats (`Seat` implementations): `trainer/train.py` has rank 0's sync seat and the data-parallel rollout
rank's; `trainer/async_loop.py` the async producer's (rank 0 alone);
`trainer/sft.py` SFT rank 0's; `FollowerSeat` (here) is every rank > 0 that does not roll out, in RL and
SFT; `RunOwner` (here) is what the rank-0 seats share. Resume is written once, here.

What this is not: the step's parts (`trainer/step.py`: credit, update, weights out, records, checkpoints),
the run's resources (`trainer/run.py`), or the collectives themselves (`trainer/distributed.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentrl.config import RunConfig
from agentrl.trainer import checkpoint, distributed
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.peak_memory import PeakMemory
from agentrl.trainer.run import EvalResult, Resume, RunContext, evaluate, save_final_weights
from agentrl.trainer.samples import TrainSample, env_steps_of
from agentrl.trainer.step import Learner, WeightsOut, save_checkpoint_if_due, update_step
from agentrl.trainer.update import UpdateResult
from agentrl.types import Episode

LoopResult = tuple[EvalResult | None, EvalResult | None, str]
"""(held-out before, held-out after, run directory) on rank 0; (None, None, "") on the other ranks."""


@dataclass(frozen=True)
class Plan:
    """What rank 0 tells every rank before the first step: where checkpoints go and which steps run."""

    run_dir: str
    first_step: int
    last_step: int

    @property
    def steps(self) -> range:
        return range(self.first_step, self.last_step + 1)


@dataclass
class Collected:
    """One step's training input on rank 0: the samples to train on, and what `Seat.record` needs."""

    samples: list[TrainSample]
    payload: Any = None  # the seat's own: e.g. the played episodes and their credit


class Seat(Protocol):
    """What one rank does at each phase of `run_loop`. Rank 0's seats own the run (store, engine, metrics);
    the others only take part. Every method is called on every rank in the loop's order."""

    weights_out: WeightsOut
    env_steps_total: int
    """Rank 0: env steps of the training rollouts since step 1 (`train.env_step_budget`). The other ranks do
    not see the episodes; their count is not used (the loop broadcasts rank 0's decision)."""

    @property
    def run_id(self) -> str:
        """The store's run id on rank 0 (what checkpoints record); "" elsewhere."""
        ...

    async def evaluate(self, step: int) -> EvalResult | None:
        """A held-out evaluation (rank 0 plays and records it; others play their share or do nothing)."""
        ...

    def make_learner(self) -> Learner:
        """The learner this rank trains."""
        ...

    def restored(self, learner: Learner) -> None:
        """After a checkpoint was loaded into `learner`: its weights into the engine(s) (a gather)."""
        ...

    def plan(self, first_step: int) -> Plan | None:
        """Rank 0: the plan it broadcasts (others: None, they receive it)."""
        ...

    async def collect(self, step: int) -> Collected | None:
        """Rank 0: step `step`'s samples; other ranks: None (they take part in data-parallel rollouts)."""
        ...

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        """Rank 0: the step into the store (with the update's trainer log-probs) and the metrics log; other
        ranks: nothing."""
        ...

    def flush(self) -> None:
        """Rank 0: make the store hold every step so far (before a checkpoint says it is done)."""
        ...

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        """After the last step, before the evaluation after training."""
        ...

    def close(self) -> str:
        """Rank 0: save the final weights; the run folder ("" on other ranks)."""
        ...


async def run_loop(config: RunConfig, seat: Seat, resume: Resume | None) -> LoopResult:
    """The loop of the module docstring, on this rank, with `seat` doing this rank's part."""
    # 1. held-out evaluation before training (not again when resuming)
    before = await seat.evaluate(0) if config.eval.before and resume is None else None
    # 2-3. the learner, restored from the checkpoint when resuming
    learner = seat.make_learner()
    if resume is not None:
        checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, learner.parallel)
        seat.restored(learner)
        seat.env_steps_total = resume[1].env_steps  # counting on from the checkpoint's total
    # 4. the plan, from rank 0
    plan: Plan = distributed.broadcast(seat.plan(first_step(resume)), learner.parallel)
    # 5. the steps, until the plan's last or the one that spends the env-step budget
    last_step = plan.last_step
    peaks = PeakMemory()
    for step in plan.steps:
        with peaks.phase("rollout"):
            collected = await seat.collect(step)
        samples = collected.samples if collected is not None else None
        with peaks.phase("update"):
            update = await update_step(learner, samples, seat.weights_out)
        update = dataclasses.replace(update, metrics={**update.metrics, **peaks.metrics()})
        seat.record(step, collected, update)
        run_dir, env_steps = Path(plan.run_dir), seat.env_steps_total
        save_checkpoint_if_due(config, step, learner, run_dir, seat.run_id, seat.flush, env_steps)
        if await budget_spent(config, env_steps, learner.parallel):
            last_step = step
            break
    # 6. after the last step
    peaks.close()
    await seat.finish_training(learner, last_step)
    folder = seat.close()  # the final weights before the evaluation: one it never finished can be replayed
    after = await seat.evaluate(last_step) if config.eval.after else None
    # 7. the result
    return before, after, folder


def first_step(resume: Resume | None) -> int:
    """The first step this run plays: 1, or the step after the checkpoint it resumes from."""
    return 1 if resume is None else resume[1].step + 1


async def budget_spent(config: RunConfig, env_steps: int, parallel: DataParallel) -> bool:
    """Whether rank 0's `env_steps` have reached `train.env_step_budget`, rank 0's answer on every rank [c];
    False with no budget (0), and then no collective."""
    budget = config.train.env_step_budget
    if not budget:
        return False
    return bool(await distributed.off_loop(distributed.broadcast, env_steps >= budget, parallel))


@dataclass
class RunOwner:
    """What every rank-0 seat shares (the sync, async and SFT seats extend it): the run it owns, the
    held-out evaluation, the store's flush, and the final weights."""

    ctx: RunContext
    parallel: DataParallel
    env_steps_total: int = field(default=0, kw_only=True)

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    def count_env_steps(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Add the env steps `episodes` played (`env_steps_of`) to the total: this step's and the total, as
        the step's `env_steps` and `env_steps_total` metrics."""
        played = env_steps_of(episodes)
        self.env_steps_total += played
        return {"env_steps": float(played), "env_steps_total": float(self.env_steps_total)}

    async def evaluate(self, step: int) -> EvalResult | None:
        return await evaluate(self.ctx, step)

    def flush(self) -> None:
        self.ctx.writer.flush()

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        """Nothing by default: the engine has had the weights since the last step."""

    def close(self) -> str:
        save_final_weights(self.ctx)
        return str(self.ctx.run_dir)


@dataclass
class FollowerSeat:
    """A rank > 0 without rollouts (RL with `trainer.dp_rollouts=false`, SFT): the same steps on its share
    of rank 0's samples, and the collective gathers; no env, engine or store. `gather_at_end`: take part in
    the gather rank 0 does after the last step (SFT puts the weights into its engine only then)."""

    config: RunConfig
    parallel: DataParallel
    learner_factory: Callable[[], Learner]
    weights_out: WeightsOut
    gather_at_end: bool = False
    run_id: str = ""
    env_steps_total: int = 0  # rank 0 counts

    async def evaluate(self, step: int) -> EvalResult | None:
        return None  # rank 0 plays the evaluations alone

    def make_learner(self) -> Learner:
        return self.learner_factory()

    def restored(self, learner: Learner) -> None:
        distributed.full_state_dict(learner.policy)  # the gather rank 0 loads into its engine

    def plan(self, first_step: int) -> None:
        return None

    async def collect(self, step: int) -> None:
        return None

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        """Rank 0 records."""

    def flush(self) -> None:
        """No store on this rank."""

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        if self.gather_at_end:
            distributed.full_state_dict(learner.policy)  # collective: rank 0 loads the result

    def close(self) -> str:
        return ""
