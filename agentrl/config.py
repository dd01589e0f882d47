"""Run configuration: a YAML file plus dotted `a.b=c` overrides -> one typed, frozen `RunConfig`.

Which YAML file: `resolve_config_path` (a `--config PATH`, else `./configs/<task>.yaml`, else the config an
installed env plugin ships); its docstring is the one statement of that order.

What this is: the composition of the small typed configs each component owns next to its code (ModelConfig
in model_config.py, SamplingParams in agent/engines/base.py, LossConfig in trainer/configs.py, ...), plus the
few run-level sections defined here. Those modules import no torch or transformers, so neither does this one
(`tests/unit/test_layers.py`). Every default lives in exactly one dataclass; YAML files only say what
differs. Unknown keys are errors that list the valid ones. The resolved config is saved with each run.

What this is not: a general-purpose config system (no interpolation, no includes, no environment variables
besides AGENTRL_DB_URL, which the store reads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.engines.configs import ENTROPY_KINDS, EngineConfig
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.client import ClientConfig
from agentrl.credit.answer import AnswerProbConfig
from agentrl.errors import ConfigError
from agentrl.model_config import ModelConfig
from agentrl.store.wandb_sink import MetricsConfig
from agentrl.tasks import SAMPLERS, AdaptiveConfig, FilterConfig
from agentrl.trainer.configs import LossConfig, OptimConfig, SFTConfig, UpdateConfig
from agentrl.typed import build

CONFIG_DIR = Path("configs")


@dataclass(frozen=True)
class EnvConfig:
    """Which registered env to run, and its constructor keyword arguments (passed to the service).

    id:     a registered env id (`agentrl envs list`), e.g. "agentrl/Calc-v0"
    kwargs: keyword arguments of the env's constructor, e.g. {"parts": 3}
    """

    id: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TasksConfig:
    """Where task records come from (`tasks/<suite>/<split>.jsonl`), and how each step's tasks are drawn.

    suite:       the task suite: a folder of `root` (or of the env plugin that ships it)
    root:        where task suites are looked for first
    train_split: the split training draws its tasks from
    eval_split:  the split held-out evaluation plays (its first `eval.num_tasks` tasks)
    sampler: "uniform" (`train.tasks_per_step` distinct tasks, a pure function of (train.seed, step)),
             "filtered" (uniform, then groups whose returns are all equal are dropped and replaced by extra
             groups: `filter`), or "adaptive" (tasks drawn for their expected signal p(1-p) under a
             per-task Beta posterior of success: `adaptive`). See `agentrl/trainer/task_sampling.py`.
    """

    suite: str = ""
    root: str = "tasks"
    train_split: str = "train"
    eval_split: str = "heldout"
    sampler: str = "uniform"
    filter: FilterConfig = field(default_factory=FilterConfig)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"tasks.sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")


@dataclass(frozen=True)
class CreditConfig:
    """The advantage estimator (a key of `agentrl.credit.ESTIMATORS`) and its keyword options.

    estimator: grpo, drgrpo, rloo, mc_grpo, gdpo, gigpo, hgpo, salt, igpo or tree_grpo (docs/credit.md)
    options:   the estimator's own options, e.g. {"gamma": 0.95} (its typed config names them)
    answer:    IGPO's teacher-forced answer measurement (used only by igpo)

    Options may be given flat (`credit.gamma=0.95`) or nested (`credit.options.gamma=0.95`); both land in
    `options` as given (and are saved so) and are built once, when the run config is built, into the
    estimator's own typed config: `settings` (an unknown option or a wrong type is a `ConfigError` then).
    `answer` configures IGPO's teacher-forced answer measurement (used only when estimator is "igpo").
    """

    estimator: str = "grpo"
    options: Mapping[str, Any] = field(default_factory=dict)
    answer: AnswerProbConfig = field(default_factory=AnswerProbConfig)

    def __post_init__(self) -> None:
        from agentrl.credit import make_config  # numpy only; imported here to keep config import light

        # not a field: the saved config keeps the options as given; frozen, hence object.__setattr__
        object.__setattr__(self, "_settings", make_config(self.estimator, **dict(self.options)))

    @property
    def settings(self) -> Any:
        """The estimator's typed config (e.g. `GiGPOConfig`), built from `options` once."""
        return self._settings  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TrainConfig:
    """The outer loop: how many steps, and how many episodes each step collects.

    steps:           training steps (each: rollouts, credit, one update); the env-step budget may end sooner
    tasks_per_step:  tasks drawn per step, each played as one group
    group_size:      episodes per task (the group credit compares; a tree's leaves with rollout.tree)
    seed:            the seed of the task draws and the rollouts' env seeds
    env_step_budget: 0 = off; N > 0 = the run ends after the first step at which the env steps of its
           training rollouts since step 1 reach N (`steps` still caps the run). An env step is a turn an
           env played (`agentrl.trainer.samples.env_steps_of`: a tree branch's copied prefix turns count
           once, in the episode that played them). Counted: the groups the `filtered` sampler plays and
           drops. Not counted: held-out evaluations, and infrastructure re-plays (an episode's failed
           plays, a branch's prefix replayed from reset). Logged every step as `env_steps` and
           `env_steps_total`; checkpoints keep the total, so a resumed run stops at the same step. Async
           mode counts only the groups it trains on (not those dropped as stale, cancelled or still in
           flight); `agentrl sft` plays no env steps and refuses a budget. Compare a tree run with a flat
           one at equal N.
    """

    steps: int = 10
    tasks_per_step: int = 8
    group_size: int = 4
    seed: int = 0
    env_step_budget: int = 0

    def __post_init__(self) -> None:
        if self.env_step_budget < 0:
            raise ConfigError(
                f"train.env_step_budget must be >= 0, got {self.env_step_budget}: set 0 for no budget, or "
                "N > 0 to end the run once its training rollouts have played N env steps"
            )


@dataclass(frozen=True)
class TrainerConfig:
    """How the update runs.

    nproc: data-parallel processes (FSDP2 under torchrun: gloo on CPU, NCCL on GPU). With nproc > 1,
           `agentrl train` re-executes itself under torchrun; rank 0 runs the env service, the task
           sampler and the store, the rollouts are played as `dp_rollouts` says, every rank trains on its
           share of the samples, and the updated weights are gathered into the engines after each update
           (`sync_s`).
    dp_rollouts: (nproc > 1) every rank plays its share of each step's groups (and of the held-out
           evaluation) with an engine of its own, against the same env service; rank 0 still draws the
           tasks, credits, records and stores; the gathered weights go into every rank's engine. On by
           default, for ranks with devices of their own; on one 2-core CPU host `bench/dp_rollout.py`
           measured only ~1.15x over rank 0 alone (docs/scaling.md, `bench/results/dp_rollout.json`).
           false: rank 0 plays every episode while the other ranks wait (they then hold no engine: one
           model copy less per rank).
           Ranks on several nodes need a `service.url` that every node reaches (`trainer/dp_rollouts.py`).
    checkpoint_every: save a resumable checkpoint (weights, optimiser, schedule, RNG, step) every this many
           steps into runs/<run>/checkpoints/ (0: only the final weights); with nproc > 1 every rank
           writes its shards (torch.distributed.checkpoint), and resuming needs the same nproc.
    resume: a run folder (runs/<name>) to continue from its newest checkpoint: the same run id and
           folder, its later records deleted, the next step onwards as if never interrupted.

    async_mode: overlap the rollouts of step n+1 with the update of step n (`trainer/async_loop.py`):
           the update trains a copy of the policy in a worker thread while the engine keeps sampling with
           the previous weights, which are loaded into it as soon as the update ends. Every turn records
           the weights version that sampled it; PPO's "old" log-probs are the sampler's (the behaviour
           policy), with `loss.tis_cap` as the optional truncated importance correction. One process only
           (nproc=1), no IGPO, and not resumable: the groups in flight and the engine's RNG stream are not
           checkpointed, so `trainer.resume` and `trainer.checkpoint_every` are refused; the final weights
           are saved in runs/<run>/final as in sync mode.
    max_staleness: (async) a group is trained on only if its oldest turn was sampled at most this many
           updates before the weights being trained; older groups are dropped (`dropped_stale_groups`).
           Groups sampled while update n-1 ran are 1 behind when step n trains on them, and 2 behind if
           they carry over to step n+1: 2 lets a carried-over group be trained, 1 drops it.
    overprovision: (async, APRIL) groups kept in flight = ceil(tasks_per_step x overprovision); each step
           trains on the first `tasks_per_step` groups to finish and the rest carry over, still running,
           to compete for the next step (`carried_over_groups`).
    """

    nproc: int = 1
    dp_rollouts: bool = True
    checkpoint_every: int = 0
    resume: str | None = None
    async_mode: bool = False
    max_staleness: int = 2
    overprovision: float = 1.5

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError(f"trainer.nproc must be >= 1, got {self.nproc}")
        if self.checkpoint_every < 0:
            raise ValueError(f"trainer.checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if self.max_staleness < 0:
            raise ValueError(f"trainer.max_staleness must be >= 0, got {self.max_staleness}")
        if self.overprovision < 1.0:
            raise ValueError(f"trainer.overprovision must be >= 1.0, got {self.overprovision}")
        if self.async_mode:
            self._check_async()

    def _check_async(self) -> None:
        if self.nproc > 1:
            raise ConfigError(
                "trainer.async_mode=true runs in one process: set trainer.nproc=1, or train with several "
                "ranks in sync mode (trainer.async_mode=false)"
            )
        if self.resume is not None or self.checkpoint_every:
            raise ConfigError(
                "trainer.async_mode=true cannot resume exactly (the groups in flight and the sampler's RNG "
                "are not checkpointed): drop trainer.resume and trainer.checkpoint_every, or train in sync "
                "mode (trainer.async_mode=false)"
            )


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation on the first `num_tasks` tasks of the eval split.

    num_tasks:   held-out tasks per evaluation (the first ones of `tasks.eval_split`)
    before:      evaluate before the first training step
    after:       evaluate after the last one
    temperature: 0 decodes greedily; above 0 samples with a fixed seed (e.g. at the training temperature,
                 to measure the policy that is being trained).
    seed:        the sampler seed every held-out request's seed derives from; the same seed repeats the
                 same evaluation exactly, another one draws another sample of the same policy (a sampled
                 decoding's spread over seeds)
    samples:     episodes per held-out task (1: one each). With k > 1 each task is played k times with its
                 own seeds, as a group, and the store keeps all k (pass@k: a task counts as solved when any
                 of its k episodes is; `agentrl.study` reports it)
    """

    num_tasks: int = 64
    before: bool = True
    after: bool = True
    temperature: float = 0.0
    seed: int = 0
    samples: int = 1

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ConfigError(f"eval.samples={self.samples}: play at least 1 episode per held-out task")


@dataclass(frozen=True)
class ServiceConfig:
    """The env service. With no `url`, `agentrl train` starts an embedded service on 127.0.0.1.

    url: a running service or a load balancer in front of a fleet; "ray://HOST:PORT" is the Ray fleet
            reached through Ray Client (the same as `fleet=ray ray_address=ray://HOST:PORT`).
    fleet: "ray" for the env-service replicas that `agentrl fleet up` started on the Ray cluster at
            `ray_address` (`agentrl/service/ray_fleet.py`); the client finds the live ones and asks again
            when they change.
    ray_address: the Ray cluster, as `ray.init` takes it ("HOST:PORT" of the head, "ray://HOST:10001",
            "auto").
    client: how the runner talks to it, e.g. `service.client.transport=ws` (one multiplexed WebSocket per
            replica: several times the steps/s of "http" at high concurrency; with a load balancer in
            front, list the replicas instead or keep "http", since one socket stays on one replica).
    """

    url: str | None = None
    fleet: str | None = None
    ray_address: str = "auto"
    client: ClientConfig = field(default_factory=ClientConfig)

    def __post_init__(self) -> None:
        if self.fleet not in (None, "ray"):
            raise ConfigError(f"service.fleet={self.fleet!r} is unknown; use service.fleet=ray or unset it")
        if self.fleet and self.url:
            raise ConfigError("set service.url or service.fleet=ray, not both (a ray:// url is a fleet)")

    @property
    def ray_fleet_address(self) -> str | None:
        """The Ray cluster whose fleet this run uses, or None when it uses a URL or an embedded service."""
        if self.url and self.url.startswith("ray://"):
            return self.url
        return self.ray_address if self.fleet == "ray" else None


@dataclass(frozen=True)
class StoreConfig:
    """The run store.

    url: a SQLAlchemy URL (sqlite:///PATH or postgresql://...); None: $AGENTRL_DB_URL, else
         sqlite:///runs/agentrl.db
    """

    url: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """Everything one `agentrl train` / `agentrl eval` run needs.

    task:     the task's name (set from `--task` when the file does not say)
    name:     the run's name (its folder under `runs_dir` and its name in the store); None: TASK-KIND-TIME
    runs_dir: where run folders (config, metrics, checkpoints, final weights) are written
    """

    task: str = ""
    name: str | None = None
    runs_dir: str = "runs"
    env: EnvConfig = field(default_factory=EnvConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)  # `agentrl sft` only (agentrl/trainer/sft.py)

    def __post_init__(self) -> None:
        from agentrl.credit import entry  # numpy only

        if self.trainer.async_mode and self.tasks.sampler != "uniform":
            raise ConfigError(
                f"tasks.sampler={self.tasks.sampler} runs only in sync mode: the async loop keeps groups in "
                "flight across updates and draws its tasks uniformly; set tasks.sampler=uniform or "
                "trainer.async_mode=false"
            )
        needs = entry(self.credit.estimator).needs
        if self.trainer.async_mode and needs:
            raise ConfigError(
                f"credit.estimator={self.credit.estimator} needs {', '.join(needs)} measured with the policy "
                "before each update, which trainer.async_mode=true changes while it measures; use sync mode"
            )
        tree = self.rollout.tree
        if tree.enabled:
            try:
                tree.width_for(self.train.group_size)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        if tree.enabled and self.trainer.async_mode:
            raise ConfigError("rollout.tree runs in sync mode only; set trainer.async_mode=false")
        if tree.enabled and tree.branch_on == "entropy" and self.engine.kind not in ENTROPY_KINDS:
            raise ConfigError(
                f"rollout.tree.branch_on=entropy needs the first token's entropy, which engine.kind="
                f"{self.engine.kind} does not report (it returns only the sampled tokens' log-probs); use "
                f"engine.kind {' or '.join(ENTROPY_KINDS[1:])}, or rollout.tree.branch_on=turns"
            )


def load_config(
    task: str,
    overrides: Sequence[str] = (),
    config_dir: Path = CONFIG_DIR,
    config_path: Path | None = None,
) -> RunConfig:
    """Read the task's YAML file (`resolve_config_path`), apply `a.b=c` overrides, build the typed config."""
    path = resolve_config_path(task, config_path, config_dir)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    data.setdefault("task", task)
    for override in overrides:
        apply_override(data, override)
    fold_credit_options(data)
    return build(RunConfig, data, "")


def resolve_config_path(task: str, config_path: Path | None = None, config_dir: Path = CONFIG_DIR) -> Path:
    """The YAML file a run of `task` reads: the first of

    1. `config_path` (`--config PATH`), a file anywhere; it must exist;
    2. `<config_dir>/<task>.yaml`, i.e. `./configs/<task>.yaml` in the working directory, when it exists;
    3. `data/configs/<task>.yaml` of the installed env plugin that ships it (`agentrl.env.plugin_data`).

    The task suites a config names are found the same way: `./tasks/<suite>/` first, else the plugin's
    (`agentrl.tasks.resolve_suite`). docs/environments.md ("Where a run finds its config and tasks") says
    the same for plugin authors.
    """
    from agentrl.env.plugin_data import shipped_config, shipped_config_names

    if config_path is not None:
        if not Path(config_path).is_file():
            raise ConfigError(f"--config {config_path}: no such file; give the path of a run config YAML")
        return Path(config_path)
    local = config_dir / f"{task}.yaml"
    if local.is_file():
        return local
    shipped = shipped_config(task)
    if shipped is not None:
        return shipped
    known = sorted({p.stem for p in config_dir.glob("*.yaml")} | set(shipped_config_names()))
    raise ConfigError(
        f"no config for task {task!r} at {local} and no installed env plugin ships one; known tasks: "
        f"{', '.join(known) or 'none'} (`agentrl envs list` shows what each plugin ships); or pass "
        "--config PATH"
    )


def fold_credit_options(data: dict[str, Any]) -> None:
    """Move flat estimator options (`credit.gamma`) into `credit.options`."""
    credit = data.get("credit")
    if not isinstance(credit, dict):
        return
    options = dict(credit.get("options") or {})
    for key in [key for key in credit if key not in ("estimator", "options", "answer")]:
        options[key] = credit.pop(key)
    credit["options"] = options


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set `a.b.c=value` in a nested dict; the value is parsed as YAML (`3` -> int, `[1,2]` -> list)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {override!r} is not of the form key.path=value")
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is not a section")
        node = child
    node[leaf] = yaml.safe_load(raw) if raw else ""


def to_dict(config: Any) -> dict[str, Any]:
    """The resolved config as plain data (saved with the run)."""
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
