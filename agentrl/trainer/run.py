"""What a run holds open, and what every loop does with it besides training: rollouts, evaluation, metrics.

What this is: `open_run` (the store row, the run folder, the env service or client, the engine, the W&B
mirror; all closed in reverse order whatever happens), `RunContext` (what it yields), `play_tasks` (G
episodes per task through the engine, or through every rank's: `dp_rollouts.py`), `play_heldout` (one
seeded episode per held-out task), `evaluate` / `run_eval` (held-out success), `log_metrics`,
`save_final_weights`, and the small pure summaries of a step's episodes.

What this is not: the training loop (`agentrl/trainer/loop.py`, with the seats of `trainer/train.py`,
`trainer/async_loop.py` and `trainer/sft.py`) or the step they share (`agentrl/trainer/step.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console

from agentrl.agent.engines.base import PolicyEngine, SamplingParams
from agentrl.agent.engines.factory import build_engine
from agentrl.agent.rollout import run_episode
from agentrl.agent.session import EpisodePlayer
from agentrl.agent.tree import BRANCH_INFO_KEYS, collect_groups
from agentrl.client import EnvClient
from agentrl.config import EvalConfig, RunConfig, to_dict
from agentrl.errors import ConfigError, RolloutError
from agentrl.harness.runner import choose_player
from agentrl.service.embedded import EmbeddedService
from agentrl.store.repository import create_run, finish_run, open_store, resume_run
from agentrl.store.tensorboard import export_run_events
from agentrl.store.wandb_sink import WandbSink
from agentrl.store.writer import StoreWriter, tokenizer_pieces
from agentrl.tasks import Task, load_tasks
from agentrl.trainer import checkpoint
from agentrl.trainer.dp_rollouts import PlayOrder, RolloutRanks
from agentrl.trainer.samples import copied_turns, forks_of
from agentrl.types import Episode

console = Console(stderr=True)
EVAL_SEED = EvalConfig.seed  # held-out evaluations' default sampler seed: before/after see the same stream


@dataclass
class RunContext:
    """What one run holds open: its config, engine, env client, store writer and output folder."""

    config: RunConfig
    run_id: str
    run_dir: Path
    engine: PolicyEngine
    client: EnvClient
    writer: StoreWriter
    store: Any  # a SQLAlchemy engine (agentrl.store.repository.open_store)
    sink: WandbSink | None = None  # the W&B mirror, when `metrics.wandb_project` is set
    ranks: RolloutRanks | None = None  # every rank plays a share (`trainer.dp_rollouts`), or rank 0 alone
    player: EpisodePlayer = run_episode  # who plays an episode: the token runner or a harness


@dataclass(frozen=True)
class EvalResult:
    """Held-out success over the episodes that did not fail for infrastructure reasons, and the share of
    their turns that were invalid (malformed or unusable actions: 1 - the valid-call rate)."""

    success_rate: float
    mean_reward: float
    episodes: int
    infra_failures: int
    invalid_turn_rate: float = 0.0


Resume = tuple[Path, checkpoint.CheckpointState]
"""A checkpoint folder and its state: where `trainer.resume` continues from."""


@asynccontextmanager
async def open_run(config: RunConfig, kind: str, resume: Resume | None = None) -> AsyncIterator[RunContext]:
    """Open everything a run needs and close it all, in reverse order, whatever happens. `kind` is "train"
    or "eval". Resuming reopens the checkpoint's run (same id and folder) and drops what it recorded after
    the checkpoint. The run's row ends `finished` or `failed` whatever happens, a run refused while it was
    being opened (before its first step) included: the store never keeps a live row for a dead run."""
    store = open_store(config.store.url)
    if resume is None:
        run_dir = make_run_dir(config, kind)
        run_id = create_run(store, run_dir.name, config.task, to_dict(config))
    else:
        run_dir, run_id = resume[0].parents[1], resume[1].run_id
        resume_run(store, run_id, after_step=resume[1].step)
        trim_metrics_file(run_dir / "metrics.jsonl", after_step=resume[1].step)
    status = "failed"  # also when opening fails (a refused engine, an unreachable service): no live row
    try:
        async with AsyncExitStack() as stack:
            writer = stack.enter_context(StoreWriter(store))
            client = await stack.enter_async_context(await open_client(stack, config, run_dir))
            engine = build_engine(
                config.engine,
                config.model,
                trains=kind == "train",
                nproc=config.trainer.nproc,
                async_mode=config.trainer.async_mode,
            )
            stack.push_async_callback(engine.aclose)
            writer.token_pieces = tokenizer_pieces(engine.tokenizer)
            sink = WandbSink.open(config.metrics, run_id, run_dir.name, run_dir, to_dict(config))
            try:
                player = choose_player(config.rollout)
                yield RunContext(config, run_id, run_dir, engine, client, writer, store, sink, player=player)
                status = "finished"
            finally:
                if sink is not None:
                    sink.close(status == "finished")
                writer.flush()
    finally:
        finish_run(store, run_id, status)
        export_run_events(store, run_id, run_dir / "tensorboard")


def resume_point(config: RunConfig) -> Resume | None:
    """The checkpoint `trainer.resume` points at (its newest), or None when not resuming; refused when its
    run has already spent `train.env_step_budget`."""
    if config.trainer.resume is None:
        return None
    found = checkpoint.latest(Path(config.trainer.resume))
    if found is None:
        raise ConfigError(
            f"trainer.resume={config.trainer.resume}: no checkpoint in its checkpoints/ folder; "
            "runs are resumable when trained with trainer.checkpoint_every > 0"
        )
    state = checkpoint.read_state(found)
    budget = config.train.env_step_budget
    if budget and state.env_steps >= budget:
        raise ConfigError(
            f"trainer.resume={config.trainer.resume}: its checkpoint at step {state.step} has played "
            f"{state.env_steps} env steps, so train.env_step_budget={budget} is spent; raise the budget to "
            "train on, or set train.env_step_budget=0"
        )
    return found, state


async def play_tasks(
    ctx: RunContext, tasks: Sequence[Task], group_size: int, sampling: SamplingParams, seed: int
) -> list[Episode]:
    """`group_size` episodes of each task through the run's engine (`tree.collect_groups`: flat groups or
    trees), or through every rank's engine with data-parallel rollouts (`agentrl/trainer/dp_rollouts.py`)."""
    config = ctx.config
    if ctx.ranks is not None:
        order = PlayOrder(list(tasks), group_size, sampling, seed)
        return await ctx.ranks.play(ctx.client, ctx.engine, config, order, progress=console.is_terminal)
    return await collect_groups(
        ctx.client,
        ctx.engine,
        config.env.id,
        tasks,
        group_size,
        sampling,
        config.rollout,
        seed=seed,
        progress=console.is_terminal,
        player=ctx.player,
    )


async def play_heldout(ctx: RunContext, tasks: Sequence[Task], sampling: SamplingParams) -> list[Episode]:
    """`eval.samples` episodes of each task (one by default) as the held-out evaluation plays them, at
    `sampling`: per-request sampler seeds from `eval.seed` (`EVAL_SEED` by default), whatever
    rollout.seeded_sampling says for training, so that with the cached engine's engine.cached.deterministic
    (on by default) each episode repeats exactly, given the env, at any temperature, greedy included (an
    unseeded request is decoded in whatever batch it lands in)."""
    config = ctx.config
    torch.manual_seed(config.eval.seed)
    seeded = replace(ctx, config=replace(config, rollout=replace(config.rollout, seeded_sampling=True)))
    return await play_tasks(
        seeded, tasks, group_size=config.eval.samples, sampling=sampling, seed=config.eval.seed
    )


def require_some_usable(episodes: Sequence[Episode], what: str, infra_attempts: int) -> None:
    """`RolloutError` when every one of `episodes` failed for infrastructure reasons (after `infra_attempts`
    plays each): training or scoring on nothing would hide a broken env fleet."""
    if episodes and all(episode.is_infra_failure for episode in episodes):
        raise RolloutError(
            f"all {len(episodes)} episodes of {what} failed for infrastructure reasons after "
            f"{infra_attempts} play(s) each; first error: {episodes[0].error}. Check that the env service "
            "and its sandboxes are healthy (runs/<run>/service.log for an embedded service)"
        )


async def run_eval(config: RunConfig) -> EvalResult:
    """Held-out evaluation only (`agentrl eval`)."""
    async with open_run(config, kind="eval") as ctx:
        return await evaluate(ctx, step=0)


async def evaluate(ctx: RunContext, step: int) -> EvalResult:
    """Held-out success rate on the first `eval.num_tasks` tasks of the eval split, sampled at
    `eval.temperature` with fixed per-request sampler seeds (the same before and after training; the HF
    engine samples seeded requests one at a time)."""
    config = ctx.config
    tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[
        : config.eval.num_tasks
    ]
    sampling = replace(config.sampling, temperature=config.eval.temperature)
    episodes = await play_heldout(ctx, tasks, sampling)
    ctx.writer.record_episodes(ctx.run_id, step, "eval", episodes, None)
    require_some_usable(episodes, "the held-out evaluation", config.rollout.infra_attempts)
    result = summarise_eval(episodes)
    log_metrics(ctx, step, {f"eval/{k}": float(v) for k, v in vars(result).items()})
    return result


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Reward, success, turn and validity statistics of one step's episodes."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    turns = [turn for episode in usable for turn in episode.turns]
    return {
        "reward_mean": _mean([episode.reward for episode in usable]),
        "success_rate": _mean([float(episode.success) for episode in usable]),
        "turns_mean": _mean([float(len(episode.turns)) for episode in usable]),
        "invalid_turn_rate": _mean([float(turn.invalid) for turn in turns]),
        "completion_tokens_mean": _mean([float(len(turn.completion_ids)) for turn in turns]),
        "infra_failures": float(len(episodes) - len(usable)),
        "infra_reruns": float(sum(episode.attempts - 1 for episode in episodes)),
        "episodes": float(len(episodes)),
    }


def tree_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """How one step's tree rollouts branched (docs/tree_rollouts.md, "Step metrics"), over every episode
    played, infrastructure failures included (the env played and forked them, as `env_steps_of` and
    `forks_of` count them): `tree/forks`, `tree/branch_turn_mean` (over branches), `tree/copied_turn_share`
    (copied prefix turns over all turns) and, when branch points were chosen on entropy,
    `tree/entropy_fired_share` and `tree/branch_entropy_rise_mean` (over branch points,
    `entropy_branch_points`). {} when no episode is a tree branch (flat groups): flat runs log as before."""
    branches = [episode for episode in episodes if episode.parent_id is not None]
    if not branches:
        return {}
    turns = sum(len(episode.turns) for episode in episodes)
    metrics = {
        "tree/forks": float(forks_of(episodes)),
        "tree/branch_turn_mean": _mean([float(episode.branch_turn or 0) for episode in branches]),
        "tree/copied_turn_share": sum(map(copied_turns, episodes)) / turns if turns else 0.0,
    }
    points = entropy_branch_points(episodes)
    if points:
        metrics["tree/entropy_fired_share"] = _mean([float(not info["branch_fallback"]) for info in points])
        metrics["tree/branch_entropy_rise_mean"] = _mean(
            [float(info["branch_entropy"]) - float(info["branch_entropy_initial"]) for info in points]
        )
    return metrics


def entropy_branch_points(episodes: Sequence[Episode]) -> list[Mapping[str, Any]]:
    """The `info` of each branch point chosen on entropy (`agentrl.agent.tree.BRANCH_INFO_KEYS`), once per
    branch point. Every branch through a branch point at turn t records it on its own turn t: the branch
    that went on in the session that reached it (the point is that episode's, at t) and each fork (the
    point is its parent's, at its `branch_turn`); deeper branches hold those turns only as copies, which
    are skipped."""
    points: dict[tuple[str, int], Mapping[str, Any]] = {}
    for episode in episodes:
        copied = copied_turns(episode)
        for position, turn in enumerate(episode.turns[copied:], start=copied):
            if not set(BRANCH_INFO_KEYS) <= turn.info.keys():
                continue
            reached_by = episode.episode_id
            if episode.parent_id is not None and position == episode.branch_turn:
                reached_by = episode.parent_id  # a fork made at this branch point
            points.setdefault((reached_by, position), turn.info)
    return list(points.values())


def summarise_eval(episodes: Sequence[Episode]) -> EvalResult:
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    return EvalResult(
        success_rate=_mean([float(episode.success) for episode in usable]),
        mean_reward=_mean([episode.reward for episode in usable]),
        episodes=len(usable),
        infra_failures=len(episodes) - len(usable),
        invalid_turn_rate=_mean([float(turn.invalid) for episode in usable for turn in episode.turns]),
    )


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def pad_id(tokenizer: Any) -> int:
    """The id the update pads samples with: the tokenizer's pad token, else its eos token."""
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)


def log_metrics(ctx: RunContext, step: int, metrics: Mapping[str, float]) -> None:
    """One line on the console, one line in runs/<run>/metrics.jsonl, rows in the store, a W&B step when
    configured (and, when the run ends, TensorBoard event files in runs/<run>/tensorboard/)."""
    record = {"step": step, **{key: round(float(value), 6) for key, value in metrics.items()}}
    with (ctx.run_dir / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    ctx.writer.record_metrics(ctx.run_id, step, metrics)
    if ctx.sink is not None:
        ctx.sink.log(step, metrics)
    shown = "  ".join(f"{key}={value:.4g}" for key, value in metrics.items())
    console.print(f"[bold]step {step}[/bold]  {shown}")


def save_final_weights(ctx: RunContext) -> Path:
    """The trained weights and tokenizer in runs/<run>/final; `model.name=<this path>` loads them again.
    With LoRA only the adapters are saved: `model.lora.adapter=<this path>` (same `model.name`) loads them.
    They are saved from the engine's module, which holds the newest weights on rank 0 in every mode."""
    module = ctx.engine.module
    if module is None:
        raise ConfigError("this engine holds no weights to save (engine.kind=openai only evaluates)")
    path = ctx.run_dir / "final"
    module.save_pretrained(path)  # type: ignore[operator]
    ctx.engine.tokenizer.save_pretrained(path)
    console.print(f"saved the final weights to {path}")
    return path


async def open_client(stack: AsyncExitStack, config: RunConfig, run_dir: Path) -> EnvClient:
    """The env client of this run: on the Ray fleet's live replicas (re-asked as they change), on
    `service.url`, or on an embedded service started for this run."""
    address = config.service.ray_fleet_address
    if address is not None:
        from agentrl.service.ray_fleet import RayReplicas

        replicas = RayReplicas(address)
        urls = await replicas.discover()
        console.print(f"env fleet on Ray at {address}: {len(urls)} replicas")
        return EnvClient(urls, config=config.service.client, discover=replicas.discover)
    service_url = config.service.url or start_service(stack, config, run_dir)
    return EnvClient(service_url, config=config.service.client)


def start_service(stack: AsyncExitStack, config: RunConfig, run_dir: Path) -> str:
    """Start an embedded env service on 127.0.0.1 for this run; it stops when the run ends."""
    env_kwargs = {config.env.id: dict(config.env.kwargs)} if config.env.kwargs else {}
    service = stack.enter_context(EmbeddedService(log_path=run_dir / "service.log", env_kwargs=env_kwargs))
    return str(service.url)


def trim_metrics_file(path: Path, after_step: int) -> None:
    """Drop the lines of steps after `after_step` (written before a crash) from a metrics.jsonl."""
    if path.is_file():
        kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= after_step]
        path.write_text("".join(line + "\n" for line in kept))


def make_run_dir(config: RunConfig, kind: str) -> Path:
    """runs/<name>/ with the resolved config saved in it."""
    name = config.name or f"{config.task}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(config.runs_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    return run_dir
