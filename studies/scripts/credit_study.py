"""Credit-assignment study (issue 9): GRPO vs GiGPO vs HGPO vs SALT on the maze env, same env-step budget.

    .venv/bin/python studies/scripts/credit_study.py          # the full study ("Cost" below), run by the lead
    .venv/bin/python studies/scripts/credit_study.py --quick  # 1 seed, grpo + gigpo, 1 tiny step: minutes
    .venv/bin/python studies/scripts/credit_study.py --study calc-chain       # part 3 of the study (issue 41)
    .venv/bin/python studies/scripts/credit_study.py --study calc-chain-tree  # part 3's tree arms (issue 42)

First it makes the warm start every run begins from, once (`agentrl demos` + `agentrl sft`, the
cold-start recipe; `warm_start_demos=0` starts from the base model instead). Then for each estimator and
seed it trains SmolLM2-135M-Instruct from `configs/<task>.yaml` (default `maze`) with only
`credit.estimator` and `train.seed` changed (an `Arm` adds its own overrides, e.g. tree rollouts), until the
run has taken `--env-steps` environment steps (assistant turns, invalid ones included; a tree branch's
copied prefix turns count once, in the episode that played them, and a fork is not a step), and evaluates
held-out success whenever the run's env steps cross one of `--eval-points` evenly spaced checkpoints. The
starting model (env step 0) is evaluated once and shared by every curve: it is the same model, evaluated on
the same tasks with the same sampler seed.

Writes `studies/maze-credit/results/credit_study_warm.json` and `credit_study_warm.png` (mean held-out success
vs env steps per estimator, with 95% Student-t bands over seeds) and prints the summary. JSON keys:
    runs[arm][i]: seed, curve [{checkpoint_env_steps, env_steps, train_step, success_rate,
        episodes}], wall_s, train_steps, env_steps, forks, and the means over train steps of anchor_hit_rate,
        anchor_group_size, zero_variance_groups, invalid_turn_rate, train_success_rate
    mean_curves[estimator]: [{checkpoint_env_steps, mean, low, high, n}]
    summary.gigpo_steps_to_threshold: the credit gym's definition (docs/credit_gym.md): threshold = base +
        0.8 x (GRPO's final mean - base), null when GRPO's final mean is not above the base; the env steps
        at which each estimator's mean curve first reaches it (linear between checkpoints, base at 0);
        their ratio (GiGPO over GRPO); and a 95% percentile band from resampling GRPO's and GiGPO's seeds
        independently (the engine's samples depend on the batch, so seeds are not paired), the threshold
        recomputed in each resample (GRPO's own spread), a resample that never reaches it counted as an
        infinite ratio (censored at the budget, never dropped); an infinite band end is null.
    summary.grpo_final_band_excludes_base: GRPO's final band is above the base (every base evaluation).
    summary.gigpo_half_minus_grpo_full (when a checkpoint sits at half the budget): GiGPO's mean at half the
        env steps minus GRPO's at the full budget, with a 95% Welch band over seeds (unpaired).
    summary.above_base[arm]: the arm's final band above every base evaluation, at the training temperature
        and at the best decoding (null when not evaluated).
    summary.tree[tree_X] (arms named tree_X): above_base, half_minus_grpo_full (as GiGPO's above) and
        minus_flat_full: tree_X minus its flat counterpart X at the full budget, 95% Welch band over seeds.
`--study calc-chain` is part 3's plan (`CALC_CHAIN`): the metric is per-part success (mean reward / parts),
the base is evaluated `base_evaluations` times, and every run's kept summary holds each evaluation's
temperature and per-task outcomes (from the run store), plus a last evaluation at the base's best decoding.
`--study calc-chain-tree` adds part 3's tree arms (`CALC_CHAIN_TREE`: tree GiGPO and Tree-GRPO) to it; its
runs are kept with the flat plan's, so the flat runs and the base are made once and shared.

How: the loop below is the sync seat of the training loop (`agentrl.trainer.train.SyncSeat` in
`agentrl.trainer.loop.run_loop`: the same rollouts and the same shared step of
`agentrl/trainer/step.py`: credit, update, weights into the engine, records) with evaluation at checkpoints
added; one process, runs in sequence.

Cost (measured on the 2-core machine, configs/maze.yaml, idle CPU; see docs/credit_study.md): one train
step (4 tasks x 6 episodes x up to 14 turns, ~300 env steps) takes STEP_S seconds, an evaluation of 16
held-out tasks EVAL_S. The defaults (3 seeds, 4 estimators, 600 env steps = ~2 train steps, 2 eval points,
16 eval tasks) cost about 12 x (2 x STEP_S + 2 x EVAL_S) + EVAL_S; see `estimate_wall_s` and `--dry-run`.

What this is not: a hyper-parameter search (every estimator runs with its defaults and the same config).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentrl.config import RunConfig, load_config
from agentrl.cpu import cpu_flags
from agentrl.evidence import commit_of, evaluations_of
from agentrl.memory import child_environment, choose_allocator
from agentrl.store.repository import load_episodes
from agentrl.study.report import plot as study_plot
from agentrl.study.stats import T95, band, steps_to_threshold
from agentrl.tasks import load_tasks
from agentrl.trainer.samples import env_steps_of, forks_of

if TYPE_CHECKING:
    from agentrl.trainer.run import EvalResult

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "maze-credit" / "results"  # the maze studies
CALC_CHAIN_RESULTS = ROOT / "studies" / "calc-chain" / "results"  # the calc-chain plans (never run)
ESTIMATORS = ("grpo", "gigpo", "hgpo", "salt")
CREDIT_KEYS = ("anchor_hit_rate", "anchor_group_size", "zero_variance_groups")
# measured step and eval times (seconds) on the 2-core machine; used only by `estimate_wall_s`
STEP_S = 240.0
EVAL_S = 90.0
# per task: (train step s, held-out evaluation s, env steps per train step), measured as docs/credit_study.md
# says (calc-chain: part 3's one-step timing and the go/no-go's evaluations)
MEASURED: dict[str, tuple[float, float, float]] = {
    # plan 3b's first GRPO step (2026-11-27, quiet, avx512_bf16, no AMX): 175 s (rollouts ~60, update 114)
    # for 24 episodes of 7 turns; a 48-chain evaluation 140-170 s (go/no-go 3)
    "calc-chain": (175.0, 155.0, 168.0),
}
# two-sided 95% Student-t quantiles by degrees of freedom (no scipy in the venv); 1.96 beyond the table


@dataclass(frozen=True)
class Arm:
    """A line of the study that differs from the plain estimator runs in more than `credit.estimator`: its
    name (the report's key and its kept runs' file prefix), its estimator and its extra `key=value`
    overrides (e.g. tree rollouts). A plain estimator run is `Arm(estimator, estimator)`."""

    name: str
    estimator: str
    overrides: tuple[str, ...] = ()

    def record(self) -> dict[str, Any] | None:
        """What a kept run of this arm must have been made with (None for a plain estimator run, whose kept
        runs predate arms)."""
        if self.name == self.estimator and not self.overrides:
            return None
        return {"name": self.name, "estimator": self.estimator, "overrides": list(self.overrides)}


@dataclass(frozen=True)
class StudyConfig:
    """What the study runs; every default lives here."""

    task: str = "maze"
    estimators: tuple[str, ...] = ("grpo", "gigpo")  # the headline pair; add hgpo,salt with --estimators
    seeds: tuple[int, ...] = (0, 1, 2)
    env_steps: int = 2400  # ~30 updates of 8 maze episodes
    eval_points: int = 4
    eval_tasks: int = 60  # all of maze/level1's held-out split
    # extra `key=value` overrides for every run: a small budget that fits a 2-core CPU session, the lr,
    # the strict move parser and the coordinate line of the warm-start plan (docs/credit_study.md, plan 2)
    overrides: tuple[str, ...] = (
        "train.tasks_per_step=2",
        "train.group_size=4",
        "optim.lr=3e-5",
        "env.kwargs.text_moves=false",
        "env.kwargs.coordinates=true",
    )
    # the supervised warm start every run begins from (docs/cold_start.md's maze recipe): scripted
    # demonstrations of this many train tasks, then `agentrl sft` with these overrides; 0 = the base model
    warm_start_demos: int = 64
    warm_start_sft: tuple[str, ...] = ("sft.epochs=1", "sft.batch_size=8", "sft.lr=1e-4")
    # or an existing warm-start model (an `agentrl sft` run's `final` folder), used as it is: a diagnostic
    # run that changes an RL-only setting starts from the study's own warm start instead of making another
    warm_start_from: str = ""
    runs_dir: str = "runs/credit_study_warm"
    out: Path = RESULTS / "credit_study_warm.json"
    plot: Path = RESULTS / "credit_study_warm.png"
    # what a curve point's value is: "success_rate" (episodes solved) or "per_part_success" (mean reward
    # over the env's `parts`: the calc-chain study's metric)
    metric: str = "success_rate"
    base_evaluations: int = 1  # how often the starting model is evaluated (each its own kept run)
    # a last evaluation of every run at this temperature (the base's best decoding); None: none
    best_temperature: float | None = None
    # more arms after the estimators' (each seed runs the estimators, then these); like `estimators` and
    # `seeds` they are not part of the fingerprint: each kept run records its own arm (`Arm.record`)
    arms: tuple[Arm, ...] = ()
    # where the kept run summaries are read and written; None: next to `out` (`run_dir_of`). A study that
    # adds arms to another keeps its runs with the other's, so the runs they share are made once
    kept_runs: Path | None = None


CALC_CHAIN = StudyConfig(  # docs/credit_study.md part 3, fixed before its first run
    task="calc-chain",
    estimators=("grpo", "gigpo"),
    seeds=(0, 1, 2, 3),
    env_steps=1600,
    eval_points=2,
    eval_tasks=48,
    overrides=(),
    warm_start_demos=0,
    runs_dir="runs/credit_study_calc_chain",
    out=CALC_CHAIN_RESULTS / "credit_study_calc_chain.json",
    plot=CALC_CHAIN_RESULTS / "credit_study_calc_chain.png",
    metric="per_part_success",
    base_evaluations=2,
    # the base's best decoding in the go/no-go (studies/calc-chain-gonogo/results/calc_chain_gonogo.json)
    best_temperature=0.3,
)
# docs/credit_study.md part 3, "Tree arms": one tree of 8 leaves per task, branching after turns 1, 3 and 6 (a
# part takes 2 or 3 turns: 3 and 6 are the first turns of parts 2 and 3 when parts use their budget, as most
# of the base's episodes at 0.7 do; turn 1 because the turns before the first branch are shared by the whole
# group, so both tree estimators give them advantage 0)
CALC_CHAIN_TREE_ROLLOUT = (
    "rollout.tree.enabled=true",
    "rollout.tree.branch_turns=[1,3,6]",
    "rollout.tree.width=2",
    "train.group_size=8",
)
CALC_CHAIN_TREE = replace(
    CALC_CHAIN,
    arms=(
        Arm("tree_gigpo", "gigpo", CALC_CHAIN_TREE_ROLLOUT),
        Arm("tree_grpo", "tree_grpo", CALC_CHAIN_TREE_ROLLOUT),
    ),
    out=CALC_CHAIN_RESULTS / "credit_study_calc_chain_tree.json",
    plot=CALC_CHAIN_RESULTS / "credit_study_calc_chain_tree.png",
    # the flat plan's: its runs and the base are shared
    kept_runs=CALC_CHAIN_RESULTS / "credit_study_calc_chain_runs",
)
# docs/credit_study.md part 3, plan 3b: GRPO against the base at its best decoding, on go/no-go 3's env at the
# training temperature go/no-go 4 found most groups with signal at; greedy is the base's best (go/no-go 3)
STUDIES = {
    "calc-chain": CALC_CHAIN,
    "calc-chain-tree": CALC_CHAIN_TREE,
}


QUICK = StudyConfig(
    estimators=("grpo", "gigpo"),
    seeds=(0,),
    env_steps=1,  # one train step, however many env steps it takes
    eval_points=1,
    eval_tasks=2,
    overrides=(
        "train.tasks_per_step=2",
        "train.group_size=3",
        "env.kwargs.max_steps=4",
        "rollout.max_turns=4",
    ),
    warm_start_demos=0,
)


@dataclass
class RunResult:
    """One (arm, seed) training run; `estimator` is the arm's name (the estimator's, for a plain arm)."""

    estimator: str
    seed: int
    curve: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    train_steps: int = 0
    env_steps: int = 0
    forks: int = 0  # env forks (tree branches); not env steps
    step_metrics: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # with per-task outcomes

    def summary(self) -> dict[str, Any]:
        means = {key: _mean([m[key] for m in self.step_metrics if key in m]) for key in _STEP_KEYS}
        return {
            "seed": self.seed,
            "curve": self.curve,
            "evaluations": self.evaluations,
            "wall_s": round(self.wall_s, 1),
            "train_steps": self.train_steps,
            "env_steps": self.env_steps,
            "forks": self.forks,
            **{key: round(value, 4) for key, value in means.items()},
        }


_STEP_KEYS = (*CREDIT_KEYS, "invalid_turn_rate", "train_success_rate", "step_s")


def checkpoints(env_steps: int, points: int) -> list[int]:
    """Env-step counts at which to evaluate: `points` evenly spaced, the last one the budget."""
    if env_steps < 1 or points < 1:
        raise ValueError(f"env_steps and eval_points must be >= 1, got {env_steps} and {points}")
    return [math.ceil(env_steps * (i + 1) / points) for i in range(points)]


def study_arms(study: StudyConfig) -> tuple[Arm, ...]:
    """Every arm of the study, in run order: a plain arm per estimator, then `study.arms`."""
    return (*(Arm(name, name) for name in study.estimators), *study.arms)


def run_config(study: StudyConfig, estimator: str, seed: int, arm: Arm | None = None) -> RunConfig:
    """The run config of one (estimator, seed): the task config with only these fields changed (and the
    arm's own overrides, when `arm` is given; its estimator is then `estimator`)."""
    name = arm.name if arm is not None else estimator
    overrides = [
        f"eval.num_tasks={study.eval_tasks}",
        f"name=credit-{name}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}",
        f"runs_dir={study.runs_dir}",
        *([f"model.name={warm_start_model(study)}"] if study.warm_start_demos else []),
        *study.overrides,  # may move runs_dir or the store; never the two fields the study varies
        *(arm.overrides if arm is not None else ()),
        f"credit.estimator={estimator}",
        f"train.seed={seed}",
    ]
    return load_config(study.task, overrides)


def warm_start_name(study: StudyConfig, kind: str) -> str:
    """The run name of the warm start's `kind` (demos, sft) step, keyed by everything that makes it, so a
    study whose settings changed never reuses another's warm start."""
    made_of = [study.task, study.warm_start_demos, study.eval_tasks, *study.warm_start_sft, *study.overrides]
    key = hashlib.sha256(json.dumps(made_of).encode()).hexdigest()[:8]
    return f"warm-start-{key}-{kind}"


def warm_start_model(study: StudyConfig) -> Path:
    """Where the study's supervised warm start keeps its model (`agentrl sft`'s output folder)."""
    if study.warm_start_from:
        return Path(study.warm_start_from).resolve()
    return (Path(study.runs_dir) / warm_start_name(study, "sft") / "final").resolve()


def warm_start_commands(study: StudyConfig) -> dict[str, list[str]]:
    """`agentrl demos` then `agentrl sft` (docs/cold_start.md), under the study's own overrides; the SFT
    command's held-out evaluation before and after covers the study's tasks (the base model's row)."""
    runs = Path(study.runs_dir).resolve()
    shared = [f"runs_dir={runs}", f"eval.num_tasks={study.eval_tasks}", *study.overrides]
    demos_name, sft_name = warm_start_name(study, "demos"), warm_start_name(study, "sft")
    demos = [
        "demos", "--task", study.task, "--policy", "scripted", "--n", str(study.warm_start_demos),
        f"name={demos_name}", *shared,
    ]  # fmt: skip
    sft = [
        "sft", "--task", study.task, "--demos", str(runs / demos_name / "demos.jsonl"),
        f"name={sft_name}", *study.warm_start_sft, *shared,
    ]  # fmt: skip
    return {"demos": demos, "sft": sft}


def ensure_warm_start(study: StudyConfig) -> dict[str, Any] | None:
    """Make the warm-start model once (a half-made one is made again); its commands and the SFT run's
    held-out evaluations (step 0: the base model; last: the warm start), or None without a warm start."""
    if not study.warm_start_demos:
        return None
    if study.warm_start_from and not (warm_start_model(study) / "config.json").is_file():
        raise SystemExit(f"--warm-start-from {study.warm_start_from}: no model there (config.json missing)")
    commands = {} if study.warm_start_from else warm_start_commands(study)
    if not (warm_start_model(study) / "config.json").is_file():
        for kind, args in commands.items():
            shutil.rmtree(Path(study.runs_dir) / warm_start_name(study, kind), ignore_errors=True)
            print("$ agentrl " + " ".join(args), file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "agentrl.cli.main", *args], check=True)
    rows = (warm_start_model(study).parent / "metrics.jsonl").read_text().splitlines()
    evals = [json.loads(row) for row in rows if "eval/success_rate" in row]
    return {
        "model": str(warm_start_model(study)),
        "commands": {kind: "agentrl " + " ".join(args) for kind, args in commands.items()},
        "evaluations": [
            {key: row[key] for key in row if key == "step" or key.startswith("eval/")} for row in evals
        ],
    }


def tree_env_steps(max_turns: int, branch_turns: Sequence[int], width: int) -> int:
    """Env steps of one tree whose every episode plays `max_turns` turns: the root's turns up to the first
    branch turn, then width ** k branches' turns up to the next (agentrl/agent/tree.py's t + G (T - t),
    nested); a flat group of G such episodes costs G x max_turns."""
    ends = [*branch_turns, max_turns]
    return sum(width**level * (ends[level] - (ends[level - 1] if level else 0)) for level in range(len(ends)))


async def train_run(study: StudyConfig, arm: Arm, seed: int) -> RunResult:
    """Train one (arm, seed) until its env-step budget is spent, evaluating at the checkpoints."""
    # the trainer's modules (seconds to import) in the run processes only: the study's own process never
    # trains or evaluates
    from agentrl.trainer import distributed
    from agentrl.trainer.run import (
        evaluate,
        log_metrics,
        open_run,
        pad_id,
        rollout_metrics,
        save_final_weights,
        tree_metrics,
    )
    from agentrl.trainer.step import IntoEngine, assign_credit, make_learner, record_step, update_step
    from agentrl.trainer.task_sampling import collect_step, record_sampling, resumed_sampler

    config = run_config(study, arm.estimator, seed, arm)
    result = RunResult(arm.name, seed)
    started = time.perf_counter()
    parallel = distributed.init_from_env()
    pending = checkpoints(study.env_steps, study.eval_points)
    async with open_run(config, kind="train") as ctx:
        learner = make_learner(config, parallel, ctx.engine.module, pad_id(ctx.engine.tokenizer))
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        sampler = resumed_sampler(ctx, train_tasks, resumed=False)
        step = 0
        while pending:
            step += 1
            step_started = time.perf_counter()
            collected = await collect_step(ctx, sampler, step)  # as `SyncSeat.collect` draws and plays a step
            tasks, episodes = collected.tasks, collected.episodes
            credited = await assign_credit(ctx, episodes, tasks)
            update = await update_step(learner, credited.samples, IntoEngine(ctx.engine))
            record_step(ctx, step, episodes, credited, update)
            record_sampling(ctx, step, collected)
            rollouts = rollout_metrics(collected.played_episodes)
            metrics = {
                **rollouts,
                **tree_metrics(collected.played_episodes),
                **collected.metrics,
                **credited.metrics,
                **update.metrics,
                "step_s": time.perf_counter() - step_started,
            }
            log_metrics(ctx, step, metrics)
            result.env_steps += env_steps_of(collected.played_episodes)
            result.forks += forks_of(collected.played_episodes)
            result.train_steps = step
            result.step_metrics.append(step_summary(metrics))
            while pending and result.env_steps >= pending[0]:
                evaluated = await evaluate(ctx, step)
                result.curve.append(curve_point(pending.pop(0), result.env_steps, step, evaluated, config))
        if study.best_temperature is not None:
            result.curve[-1]["at_best_temperature"] = await evaluate_at(ctx, study.best_temperature)
        result.evaluations = kept_evaluations(ctx)
        save_final_weights(
            ctx
        )  # runs_dir/<run>/final, for `studies/scripts/calc_chain_failures.py model.name=...`
    result.wall_s = time.perf_counter() - started
    return result


async def evaluate_at(ctx: Any, temperature: float) -> dict[str, Any]:
    """One more held-out evaluation of the run's current model at `temperature`, played as `evaluate` plays
    it (`play_heldout`: same tasks, per-request sampler seeds, env seed), with its per-task outcomes; not
    recorded in the store."""
    from agentrl.trainer.run import play_heldout, summarise_eval

    config = ctx.config
    tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)
    tasks = tasks[: config.eval.num_tasks]
    sampling = replace(config.sampling, temperature=temperature)
    episodes = await play_heldout(ctx, tasks, sampling)
    evaluated = summarise_eval(episodes)
    parts = int(config.env.kwargs.get("parts", 1))
    per_task = [
        {
            "task_id": episode.task_id,
            "success": None if episode.is_infra_failure else episode.success,
            "reward": episode.reward,
        }
        for episode in episodes
    ]
    return {
        "temperature": temperature,
        "success_rate": evaluated.success_rate,
        "per_part_success": evaluated.mean_reward / parts,
        "episodes": evaluated.episodes,
        "per_task": per_task,
    }


def kept_evaluations(ctx: Any) -> list[dict[str, Any]]:
    """Every held-out evaluation the run recorded, with its temperature and per-task outcomes (the store)."""
    ctx.writer.flush()
    episodes = [row for row in load_episodes(ctx.store, ctx.run_id) if row["split"] == "eval"]
    return evaluations_of(episodes, ctx.config.eval.temperature, "eval")


def step_summary(metrics: Mapping[str, float]) -> dict[str, float]:
    """The per-step numbers the study keeps (credit metrics without their `credit/` prefix)."""
    kept = {key: float(metrics[f"credit/{key}"]) for key in CREDIT_KEYS if f"credit/{key}" in metrics}
    kept["invalid_turn_rate"] = float(metrics["invalid_turn_rate"])
    kept["train_success_rate"] = float(metrics["success_rate"])
    kept["step_s"] = float(metrics["step_s"])
    return kept


def curve_point(
    checkpoint: int, env_steps: int, step: int, evaluated: EvalResult, config: RunConfig
) -> dict[str, float]:
    parts = int(config.env.kwargs.get("parts", 1))
    return {
        "checkpoint_env_steps": checkpoint,
        "env_steps": env_steps,
        "train_step": step,
        "success_rate": evaluated.success_rate,
        "per_part_success": evaluated.mean_reward / parts,
        "temperature": config.eval.temperature,
        "episodes": evaluated.episodes,
    }


async def evaluate_base(study: StudyConfig) -> dict[str, Any]:
    """Held-out success of the model every run starts from (env step 0 of every curve): the warm start, or
    the base model when the study has none; at the best decoding too when the study names one."""
    from agentrl.trainer.run import evaluate, open_run

    config = run_config(study, "grpo", 0)
    async with open_run(config, kind="eval") as ctx:
        point: dict[str, Any] = curve_point(0, 0, 0, await evaluate(ctx, 0), config)
        if study.best_temperature is not None:
            point["at_best_temperature"] = await evaluate_at(ctx, study.best_temperature)
        point["evaluations"] = kept_evaluations(ctx)
    return point


def base_value(base: Mapping[str, Any], metric: str) -> float:
    """The starting model's value: the mean of its evaluations (`base["repeats"]`, else the one)."""
    repeats = base.get("repeats") or [base]
    return _mean([float(point[metric]) for point in repeats])


def mean_curve(
    base: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], metric: str = "success_rate"
) -> list[dict[str, float]]:
    """Per checkpoint (base first): mean `metric` over seeds with its band, and mean actual env steps."""
    start = base_value(base, metric)
    points = [
        {"checkpoint_env_steps": 0.0, "env_steps": 0.0, "mean": start, "low": start, "high": start,
         "n": float(len(runs))}
    ]  # fmt: skip
    for index in range(min(len(run["curve"]) for run in runs)):
        rates = [run["curve"][index][metric] for run in runs]
        mean, low, high = band(rates)
        points.append(
            {
                "checkpoint_env_steps": float(runs[0]["curve"][index]["checkpoint_env_steps"]),
                "env_steps": _mean([run["curve"][index]["env_steps"] for run in runs]),
                "mean": mean,
                "low": low,
                "high": high,
                "n": float(len(rates)),
            }
        )
    return points


def threshold_ratio(
    start: float, grpo: np.ndarray, gigpo: np.ndarray, xs: Sequence[float], fraction: float = 0.8
) -> tuple[float | None, float | None, float | None, float | None]:
    """(threshold, GRPO's steps, GiGPO's steps, ratio) from [seeds, checkpoints] arrays: threshold = start +
    fraction x (GRPO's final mean - start), None when GRPO's final mean is not above the start; a curve
    that never reaches it gives steps None and ratio inf (censored at the budget)."""
    grpo_mean, gigpo_mean = grpo.mean(axis=0), gigpo.mean(axis=0)
    if grpo_mean[-1] <= start:
        return None, None, None, None
    threshold = start + fraction * (float(grpo_mean[-1]) - start)
    grpo_steps = steps_to_threshold([(0.0, start), *zip(xs, grpo_mean.tolist(), strict=True)], threshold)
    gigpo_steps = steps_to_threshold([(0.0, start), *zip(xs, gigpo_mean.tolist(), strict=True)], threshold)
    if gigpo_steps is None or not grpo_steps:
        return threshold, grpo_steps, gigpo_steps, math.inf
    return threshold, grpo_steps, gigpo_steps, gigpo_steps / grpo_steps


def threshold_ratio_summary(
    start: float, runs: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, resamples: int = 2000
) -> dict[str, Any]:
    """The gym's steps-to-threshold ratio of GiGPO over GRPO with a 95% band from resampling each
    estimator's seeds independently (see the module docstring)."""
    points = min(len(run["curve"]) for name in ("grpo", "gigpo") for run in runs[name])
    xs = [_mean([run["curve"][i]["env_steps"] for run in runs["grpo"]]) for i in range(points)]
    grpo, gigpo = (np.array([[run["curve"][i][metric] for i in range(points)] for run in runs[name]])
                   for name in ("grpo", "gigpo"))  # fmt: skip
    threshold, grpo_steps, gigpo_steps, ratio = threshold_ratio(start, grpo, gigpo, xs)
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(resamples):
        pick_grpo = rng.integers(len(grpo), size=len(grpo))
        pick_gigpo = rng.integers(len(gigpo), size=len(gigpo))
        drawn = threshold_ratio(start, grpo[pick_grpo], gigpo[pick_gigpo], xs)[3]
        draws.append(math.inf if drawn is None else drawn)  # GRPO not above the start: no finite ratio
    ordered = sorted(draws)
    low, high = ordered[int(0.025 * resamples)], ordered[math.ceil(0.975 * resamples) - 1]
    return {
        "threshold": threshold,
        "grpo_steps": grpo_steps,
        "gigpo_steps": gigpo_steps,
        "ratio": None if ratio is None or not math.isfinite(ratio) else ratio,
        "never_reached": ratio is not None and not math.isfinite(ratio),
        "band": [low if math.isfinite(low) else None, high if math.isfinite(high) else None],
        "resamples": resamples,
    }


def welch_band(first: Sequence[float], second: Sequence[float]) -> tuple[float, float, float]:
    """(mean(first) - mean(second), low, high): a 95% Welch band for the difference of two unpaired means."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    difference = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return difference, difference, difference
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return difference, difference, difference
    dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = T95.get(max(1, int(dof)), 1.96) * math.sqrt(va + vb)
    return difference, difference - half, difference + half


def half_budget_comparison(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, fast: str = "gigpo", slow: str = "grpo"
) -> dict[str, Any] | None:
    """`fast` (GiGPO) at the checkpoint at half the budget against `slow` (GRPO) at the full budget (the
    plan's "faster")."""
    checkpoints_at = [point["checkpoint_env_steps"] for point in runs[fast][0]["curve"]]
    half = checkpoints_at[-1] / 2
    if half not in checkpoints_at:
        return None
    index = checkpoints_at.index(half)
    fast_half = [run["curve"][index][metric] for run in runs[fast]]
    slow_full = [run["curve"][-1][metric] for run in runs[slow]]
    difference, low, high = welch_band(fast_half, slow_full)
    return {"half_env_steps": half, "difference": difference, "band": [low, high],
            f"{fast}_half": fast_half, f"{slow}_full": slow_full}  # fmt: skip


def full_budget_comparison(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, first: str, second: str
) -> dict[str, Any]:
    """`first`'s mean at the full budget minus `second`'s, with a 95% Welch band over seeds (unpaired)."""
    first_full = [run["curve"][-1][metric] for run in runs[first]]
    second_full = [run["curve"][-1][metric] for run in runs[second]]
    difference, low, high = welch_band(first_full, second_full)
    return {"env_steps": runs[first][0]["curve"][-1]["checkpoint_env_steps"], "difference": difference,
            "band": [low, high], f"{first}_full": first_full, f"{second}_full": second_full}  # fmt: skip


def above_base(base: Mapping[str, Any], results: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """The plan's "above the base" for one arm: the 95% t-band over its seeds' final `metric` lies above
    the higher of the base's evaluations, at the training temperature and (when both kept one) at the best
    decoding (`at_best_temperature`; None when not evaluated)."""
    repeats = base.get("repeats") or [base]
    finals = [float(run["curve"][-1][metric]) for run in results]
    base_high = max(float(point[metric]) for point in repeats)
    at_best = [run["curve"][-1].get("at_best_temperature") for run in results]
    base_best = [point.get("at_best_temperature") for point in repeats]
    found: dict[str, Any] = {
        "training_temperature": band(finals)[1] > base_high,
        "best_temperature": None,
        # the figures the two verdicts compare: the seeds' finals, their (mean, low, high), the base's best
        "training_temperature_figures": {"seeds": finals, "band": list(band(finals)), "base": base_high},
    }
    if all(at_best) and all(base_best):
        best_finals = [float(point[metric]) for point in at_best]  # type: ignore[index]
        base_best_high = max(float(point[metric]) for point in base_best)  # type: ignore[index]
        found["best_temperature"] = band(best_finals)[1] > base_best_high
        found["best_temperature_figures"] = {
            "seeds": best_finals,
            "band": list(band(best_finals)),
            "base": base_best_high,
        }
    return found


def tree_summary(
    base: Mapping[str, Any], runs: Mapping[str, Sequence[Mapping[str, Any]]], metric: str
) -> dict[str, Any]:
    """The tree arms' pre-named statistics (docs/credit_study.md part 3, "Tree arms"): for each arm
    `tree_X`, the flat plan's two (above the base; at half the budget against GRPO at the full budget) and
    `tree_X` against its flat counterpart `X` at the full budget (the criterion, for tree_gigpo)."""
    summary: dict[str, Any] = {}
    for name in runs:
        flat = name.removeprefix("tree_")
        if flat == name:
            continue
        summary[name] = {
            "above_base": above_base(base, runs[name], metric),
            "half_minus_grpo_full": half_budget_comparison(runs, metric, name) if "grpo" in runs else None,
            "flat": flat,
            "minus_flat_full": full_budget_comparison(runs, metric, name, flat) if flat in runs else None,
        }
    return summary


def summarise(
    base: Mapping[str, Any], runs: Mapping[str, list[dict[str, Any]]], metric: str = "success_rate"
) -> dict[str, Any]:
    """Mean curves and the per-estimator summary from the runs' summaries (`RunResult.summary`)."""
    curves = {name: mean_curve(base, results, metric) for name, results in runs.items()}
    summary: dict[str, Any] = {
        name: {
            "final_mean": curve[-1]["mean"],
            "final_band": [curve[-1]["low"], curve[-1]["high"]],
            "mean_env_steps": _mean([run["env_steps"] for run in runs[name]]),
            "mean_wall_s": _mean([run["wall_s"] for run in runs[name]]),
            **{key: _mean([run[key] for run in runs[name]]) for key in _STEP_KEYS},
        }
        for name, curve in curves.items()
    }
    summary["metric"] = metric
    repeats = [float(point[metric]) for point in (base.get("repeats") or [base])]
    summary["base"] = {"mean": _mean(repeats), "evaluations": repeats}
    if "grpo" in curves and "gigpo" in curves:
        summary["gigpo_steps_to_threshold"] = threshold_ratio_summary(base_value(base, metric), runs, metric)
        summary["gigpo_half_minus_grpo_full"] = half_budget_comparison(runs, metric)
        summary["grpo_improved_over_base"] = curves["grpo"][-1]["mean"] > max(repeats)
        summary["grpo_final_band_excludes_base"] = curves["grpo"][-1]["low"] > max(repeats)
    summary["above_base"] = {name: above_base(base, results, metric) for name, results in runs.items()}
    if any(name.startswith("tree_") for name in runs):
        summary["tree"] = tree_summary(base, runs, metric)
    return {"mean_curves": curves, "summary": summary}


def plot(curves: Mapping[str, Sequence[Mapping[str, float]]], path: Path, title: str) -> None:
    """Mean held-out success vs env steps, one line and a 95% band per estimator."""
    study_plot(curves, path, title, "held-out success rate")


def estimate_wall_s(
    study: StudyConfig, step_s: float = STEP_S, eval_s: float = EVAL_S, step_env: float = 300.0
) -> float:
    """Rough wall time of a study from a train step's and an evaluation's measured seconds (and the env
    steps one train step takes): every run's steps and evaluations, and the base's evaluations.
    A tree arm's run is counted as a flat one's: the same env steps at the same seconds per env step (a
    step's rollouts dominate it; not measured for trees on calc-chain)."""
    extra = 1 if study.best_temperature is not None else 0  # one more evaluation at the best decoding
    steps_per_run = max(1, math.ceil(study.env_steps / step_env))
    per_run = steps_per_run * step_s + (study.eval_points + extra) * eval_s
    runs = len(study_arms(study)) * len(study.seeds)
    return runs * per_run + study.base_evaluations * (1 + extra) * eval_s


def run_dir_of(study: StudyConfig) -> Path:
    """Where finished runs keep their summaries: `kept_runs`, else next to the JSON, e.g.
    studies/maze-credit/results/credit_study_runs/."""
    return study.kept_runs or study.out.with_name(study.out.stem + "_runs")


def fingerprint(study: StudyConfig) -> dict[str, Any]:
    """What a kept run summary must have been produced under to be reused (not the output paths)."""
    fields = asdict(study)
    defaults = asdict(StudyConfig())
    for key in ("warm_start_from", "metric", "base_evaluations", "best_temperature"):
        if fields[key] == defaults[key]:  # absent unless set: runs kept before the field existed still match
            del fields[key]
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in fields.items()
        if key not in ("out", "plot", "estimators", "seeds", "arms", "kept_runs")
    }


def kept_or_run(study: StudyConfig, name: str, argv: list[str], arm: Arm | None = None) -> dict[str, Any]:
    """The summary in `<runs>/<name>.json` when it was made under this study's settings (and `arm`'s, for
    an arm's run); else run `argv` (this script in `--child` mode) in a fresh process, which writes it.

    One process per run: a process that builds model, engine and optimiser twelve times in a row kept
    growing (15 GB after three runs here), and a killed study keeps the runs it finished.
    """
    path = run_dir_of(study) / f"{name}.json"
    if path.is_file():
        kept = json.loads(path.read_text())
        made_by = arm.record() if arm is not None else None
        if kept.get("study") == fingerprint(study) and kept.get("arm") == made_by:
            print(json.dumps({"kept": name}), file=sys.stderr)
            return dict(kept["result"])
    path.parent.mkdir(parents=True, exist_ok=True)
    child = ["--child", *argv, "--child-out", str(path), "--child-study", json.dumps(fingerprint(study))]
    if arm is not None:
        child += ["--child-arm", json.dumps(asdict(arm))]
    # started under the allocator it picks (`choose_allocator` would re-execute it after its imports)
    subprocess.run([sys.executable, __file__, *child], check=True, env=child_environment(os.environ))
    return dict(json.loads(path.read_text())["result"])


def code_version() -> str:
    """The commit this checkout is at, with "+dirty" when tracked files differ ("unknown" outside git):
    recorded with each kept run, since a study may span sessions and commits."""
    return commit_of(Path(__file__).resolve().parent)


def run_child(kind: str, study: StudyConfig, out: Path, arm: Arm | None = None) -> None:
    """`--child base` or `--child NAME:SEED`: one evaluation or one training run (of `arm`, else of the
    plain estimator NAME), summary to `out`."""
    choose_allocator()  # see agentrl/memory.py: a study run reached 14 GB under glibc's defaults
    if kind == "base":
        result: dict[str, Any] = asyncio.run(evaluate_base(study))
    else:
        name, seed = kind.split(":")
        result = asyncio.run(train_run(study, arm or Arm(name, name), int(seed))).summary()
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {
        "study": fingerprint(study),
        **({"arm": arm.record()} if arm is not None and arm.record() is not None else {}),
        "result": result,
        "code_version": code_version(),
        "cpu_flags": sorted(cpu_flags() & {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
    }
    out.write_text(json.dumps(record, indent=2) + "\n")


def run_study(study: StudyConfig, kept_only: bool = False) -> dict[str, Any]:
    """Every (estimator, seed) run, seed by seed and each seed's estimators in order (so a study cut short
    still has paired runs, GRPO and GiGPO first), then the report. `kept_only`: no new runs; report on
    the kept ones and list the missing."""
    started = time.perf_counter()
    warm_start = ensure_warm_start(study) if not kept_only or warm_start_model(study).is_dir() else None
    base = kept_or_run(study, "base", ["base"])
    if study.base_evaluations > 1:  # the same weights again: how far two evaluations differ is measured
        repeats = [kept_or_run(study, f"base-{i + 1}", ["base"]) for i in range(1, study.base_evaluations)]
        base = {**base, "repeats": [base, *repeats]}
    runs: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in study_arms(study)}
    missing = []
    for seed in study.seeds:  # seed-major: a study cut short still has paired runs of every estimator
        for arm in study_arms(study):
            run_name = f"{arm.name}-seed{seed}"
            if kept_only and not (run_dir_of(study) / f"{run_name}.json").is_file():
                missing.append(run_name)
                continue
            plain = arm.record() is None  # a plain estimator's child runs as it did before arms
            argv = [f"{arm.name}:{seed}"]
            runs[arm.name].append(kept_or_run(study, run_name, argv, None if plain else arm))
            print(json.dumps({"done": arm.name, "seed": seed, **runs[arm.name][-1]}), file=sys.stderr)
    runs = {name: results for name, results in runs.items() if results}
    report = {
        "config": plan_of(study),
        "missing_runs": missing,
        "warm_start": warm_start,
        "base": base,
        "runs": runs,
        **summarise(base, runs, study.metric),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    study.out.parent.mkdir(parents=True, exist_ok=True)
    study.out.write_text(json.dumps(report, indent=2) + "\n")
    seeds = ", ".join(f"{name} {len(results)}" for name, results in runs.items())  # the finished runs only
    plot(report["mean_curves"], study.plot, f"{study.task}: mean over seeds ({seeds}), 95% t-band")
    return report


def tuples(fields: Mapping[str, Any]) -> dict[str, Any]:
    """JSON's lists back into the tuples a frozen config holds."""
    return {key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}


def parse_args(argv: Sequence[str] | None) -> tuple[StudyConfig, bool, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, grpo+gigpo, one tiny train step")
    parser.add_argument("--study", choices=sorted(STUDIES), help="a planned study (docs/credit_study.md)")
    parser.add_argument("--task", help="config name (configs/TASK.yaml)")
    parser.add_argument("--estimators", help="comma-separated, e.g. grpo,gigpo")
    parser.add_argument("--seeds", type=int, help="number of seeds (FIRST..FIRST+N-1)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--env-steps", type=int, help="env-step budget of every run")
    parser.add_argument("--eval-points", type=int, help="evenly spaced held-out evaluations per run")
    parser.add_argument("--eval-tasks", type=int, help="held-out tasks per evaluation")
    parser.add_argument("--out", type=Path, help="JSON path (the PNG goes next to it)")
    parser.add_argument("--warm-start-from", help="an existing warm-start model folder, used as it is")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the estimated wall time")
    parser.add_argument("--kept-only", action="store_true", help="report on the finished runs only")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one run in this process (see kept_or_run)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-study", help=argparse.SUPPRESS)
    parser.add_argument("--child-arm", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")
    args = parser.parse_args(argv)
    if args.child:
        study = StudyConfig(**tuples(json.loads(args.child_study)))
        arm = Arm(**tuples(json.loads(args.child_arm))) if args.child_arm else None
        run_child(args.child, study, args.child_out, arm)
        raise SystemExit(0)
    study = QUICK if args.quick else STUDIES[args.study] if args.study else StudyConfig()
    changes: dict[str, Any] = {}
    if args.task:
        changes["task"] = args.task
    if args.estimators:
        changes["estimators"] = tuple(name.strip() for name in args.estimators.split(",") if name.strip())
    if args.seeds is not None or args.first_seed:
        count = args.seeds if args.seeds is not None else len(study.seeds)
        changes["seeds"] = tuple(range(args.first_seed, args.first_seed + count))
    if args.warm_start_from:
        changes["warm_start_from"] = args.warm_start_from
    for key in ("env_steps", "eval_points", "eval_tasks"):  # a planned study's own, unless given
        if getattr(args, key) is not None:
            changes[key] = getattr(args, key)
    if args.overrides:
        changes["overrides"] = (*study.overrides, *args.overrides)
    if args.out:
        changes["out"], changes["plot"] = args.out, args.out.with_suffix(".png")
    elif args.quick:
        changes["out"], changes["plot"] = (
            RESULTS / "credit_study_quick.json",
            RESULTS / "credit_study_quick.png",
        )
    study = replace(study, **changes)
    checkpoints(study.env_steps, study.eval_points)  # fail early on a bad budget
    return study, args.dry_run, args.kept_only


def plan_of(study: StudyConfig) -> dict[str, Any]:
    """The study's settings as JSON can hold them (the report's `config`, the dry run's `plan`)."""
    kept = str(study.kept_runs) if study.kept_runs is not None else None
    return {**asdict(study), "out": str(study.out), "plot": str(study.plot), "kept_runs": kept}


def arms_plan(study: StudyConfig) -> list[dict[str, Any]]:
    """Per arm: its runs, estimator, overrides, env-step budget and checkpoints, and what one group costs
    in env steps when every episode plays all `rollout.max_turns` turns (a tree's shared turns once)."""
    planned = []
    for arm in study_arms(study):
        config = run_config(study, arm.estimator, study.seeds[0], arm)
        turns, group = config.rollout.max_turns, config.train.group_size
        tree = config.rollout.tree
        per_group = group * turns
        if tree.enabled:
            per_group = tree_env_steps(turns, tree.branch_turns, tree.width_for(group))
        planned.append({
            "arm": arm.name, "estimator": arm.estimator, "overrides": list(arm.overrides),
            "runs": [f"{arm.name}-seed{seed}" for seed in study.seeds],
            "env_steps": study.env_steps, "checkpoints": checkpoints(study.env_steps, study.eval_points),
            "group_size": group, "tree": tree.enabled,
            "branch_turns": list(tree.branch_turns) if tree.enabled else None,
            "env_steps_per_group_at_max_turns": per_group,
            "forks_per_group": group - 1 if tree.enabled else 0,
        })  # fmt: skip
    return planned


def main(argv: Sequence[str] | None = None) -> int:
    study, dry_run, kept_only = parse_args(argv)
    if dry_run:
        step_s, eval_s, step_env = MEASURED.get(study.task, (STEP_S, EVAL_S, 300.0))
        estimate = round(estimate_wall_s(study, step_s, eval_s, step_env))
        plan = {"plan": plan_of(study), "arms": arms_plan(study), "kept_runs": str(run_dir_of(study)),
                "estimated_wall_s": estimate, "estimated_hours": round(estimate / 3600, 1)}  # fmt: skip
        print(json.dumps(plan, indent=2))
        return 0
    report = run_study(study, kept_only)
    print(
        json.dumps(
            {"summary": report["summary"], "wall_s": report["wall_s"], "out": str(study.out)}, indent=2
        )
    )
    return 0


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else 0.0


if __name__ == "__main__":
    raise SystemExit(main())
