"""Plays a study's runs one after another with the real trainer, keeping every result on disk as it goes.

What this is: `plan` (the runs, a wall-time estimate from step times measured by earlier runs of the study,
and `plan.json` with the study file's hash), `run` (refuses a study file that differs from the planned one;
then the base and every (arm, seed), each resumed from what is on disk), `status`, and the layout of a
study's folder. Nothing is dropped: a run whose reward collapses is recorded like any other.

How a run is played: for each evaluation point (`StudySpec.checkpoints` evenly spaced env-step counts) it
calls `agentrl.trainer.train.train` with `train.env_step_budget` at that point, checkpoints every step and
the held-out evaluation after (at the run config's `eval.temperature`); the next point resumes the same run
from its newest checkpoint (`trainer.resume`) with the next budget. After the last point the run's final
weights are evaluated at each of the study's `decodings` and on each of its further held-out sets
(`final_evaluations`, `agentrl.trainer.run.run_eval`); the base is evaluated the same way, a sampled
decoding at each of the study's `base_seeds`, and its pass@k last when the study asks for it. After every
training segment and every evaluation the run's record (`results/runs/<run>.json`) is rewritten, so an
interrupted study continues where it stopped: a finished point is never trained again, and an unfinished one
resumes from the checkpoint of the run's last finished step. Checkpoints are not committed: a record with
trained points and no checkpoint left on this machine is refused (`refuse_lost_checkpoints`).

Folder of study NAME (`studies/NAME/`): `study.yaml` (committed), `plan.json` (committed: the hash it was
planned with), `results/` (committed: one record per run, the report's summary JSON, table and plot), and
`runs/` (not committed: the trainer's run folders, checkpoints and a SQLite store).

What this is not: the statistics or the report (`agentrl.study.report`), or a scheduler (one run at a time,
in this process).
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.study.spec import SPEC_FILE, StudySpec, load_spec, spec_hash

PLAN_FILE = "plan.json"
BASE = "base"


@dataclass(frozen=True)
class Layout:
    """Where the files of one study live (module docstring)."""

    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def spec(self) -> Path:
        return self.root / SPEC_FILE

    @property
    def plan(self) -> Path:
        return self.root / PLAN_FILE

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def records(self) -> Path:
        return self.results / "runs"

    @property
    def train_runs(self) -> Path:
        return self.root / "runs"

    def record(self, run: str) -> Path:
        return self.records / f"{run}.json"


@dataclass(frozen=True)
class PlannedRun:
    """One run of the plan: the base's evaluations, or an (arm, seed) training run."""

    name: str
    arm: str | None = None
    seed: int | None = None
    played_elsewhere: bool = False  # a `PlayedRun`: counted, never played by `run`
    reference: bool = False  # a `Reference` line: played after the base, in no statistic


def planned_runs(spec: StudySpec) -> list[PlannedRun]:
    """The base first, then the reference lines (`StudySpec.references`), then each seed's arms (every
    arm's seed 0, then every arm's seed 1, ...: a study stopped partway has whole pairs to compare), in the
    order they run, then the plays outside the plan that count (`StudySpec.also_played`)."""
    trained = [
        PlannedRun(f"{arm.name}-seed{seed}", arm.name, seed) for seed in spec.seeds for arm in spec.arms
    ]
    extra = [PlannedRun(run.name, run.arm, run.seed, True) for run in spec.also_played]
    references = [PlannedRun(item.name, reference=True) for item in spec.references]
    return [PlannedRun(BASE), *references, *trained, *extra]


def checkpoint_points(budget: int, count: int) -> list[int]:
    """Env-step counts at which a run is evaluated: `count` evenly spaced, the last one the budget."""
    return [math.ceil(budget * (index + 1) / count) for index in range(count)]


def read_record(layout: Layout, run: str) -> dict[str, Any] | None:
    path = layout.record(run)
    return json.loads(path.read_text()) if path.is_file() else None


def write_record(layout: Layout, run: str, record: Mapping[str, Any]) -> None:
    """Rewrite a run's record atomically (a kill never leaves half a file)."""
    layout.records.mkdir(parents=True, exist_ok=True)
    partial = layout.record(run).with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(layout.record(run))


# ---- plan ----------------------------------------------------------------------------------------------


def plan(layout: Layout) -> dict[str, Any]:
    """The study's runs and wall-time estimate; writes `plan.json` with the study file's hash."""
    spec = load_spec(layout.spec)
    runs = planned_runs(spec)
    planned = {
        "study": layout.name,
        "spec_sha256": spec_hash(layout.spec),
        "runs": [run.name for run in runs],
        "checkpoints": checkpoint_points(spec.env_step_budget, spec.checkpoints),
        "estimate_s": estimate_s(layout, spec),
    }
    layout.plan.write_text(json.dumps(planned, indent=1) + "\n")
    return planned


def estimate_s(layout: Layout, spec: StudySpec) -> float | None:
    """Seconds the whole study takes, from the seconds per env step (training and its evaluations) that the
    study's finished runs measured, plus the seconds the base and the reference lines took when they are
    done; None before any run has finished."""
    rate = seconds_per_env_step(layout, spec)
    if rate is None:
        return None
    played = [run for run in planned_runs(spec) if run.arm and not run.played_elsewhere]
    untrained = [read_record(layout, run.name) for run in planned_runs(spec) if run.arm is None]
    measured = sum(
        float(record.get("wall_s") or 0.0) for record in untrained if record and record.get("done")
    )
    return rate * spec.env_step_budget * len(played) + measured


def seconds_per_env_step(layout: Layout, spec: StudySpec) -> float | None:
    """The mean over the study's finished training runs of wall seconds (training and its evaluations) per
    env step; None before any has finished."""
    rates = [
        record["wall_s"] / record["env_steps"]
        for record in (
            read_record(layout, run.name)
            for run in planned_runs(spec)
            if run.arm and not run.played_elsewhere
        )
        if record and record.get("done") and record.get("env_steps")
    ]
    return sum(rates) / len(rates) if rates else None


def seconds_needed(spec: StudySpec, record: Mapping[str, Any] | None, rate: float | None) -> float | None:
    """Seconds a training run still needs (its env steps left at `rate`); None when no rate is known."""
    if rate is None:
        return None
    done = float(record.get("env_steps") or 0) if record else 0.0
    return rate * max(spec.env_step_budget - done, 0.0)


def starts_before(now: float, until: float, need_s: float | None) -> bool:
    """Whether a run that needs `need_s` seconds (None: not known yet, so it starts) ends by `until`."""
    return now < until and (need_s is None or now + need_s <= until)


def check_planned(layout: Layout, load: Callable[[Path], Any] = load_spec) -> Any:
    """The study file (read by `load`), refused unless it is the one `plan` hashed and, in a git work tree,
    committed."""
    if not layout.plan.is_file():
        raise ConfigError(
            f"study {layout.name} has no plan: run `agentrl study plan {layout.name}`, commit study.yaml and "
            "plan.json, then run it"
        )
    planned = json.loads(layout.plan.read_text())
    if planned["spec_sha256"] != spec_hash(layout.spec):
        raise ConfigError(
            f"{layout.spec} differs from the study that was planned: a study runs as it was registered. "
            f"Re-plan it (`agentrl study plan {layout.name}`) and commit both files, or restore study.yaml"
        )
    dirty = uncommitted(layout.spec)
    if dirty:
        raise ConfigError(f"{layout.spec} has changes git has not committed ({dirty}): commit it, then run")
    return load(layout.spec)


def uncommitted(path: Path) -> str:
    """What git says about `path` when it is not committed as it is ("" when it is, or outside a repo)."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(path.parent), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if inside.returncode != 0:
            return ""
        found = subprocess.run(
            ["git", "-C", str(path.parent), "status", "--porcelain", "--", path.name],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return found.stdout.strip()


# ---- run -----------------------------------------------------------------------------------------------


Log = Callable[[str], None]


def run(
    layout: Layout, log: Log = print, until: float | None = None, clock: Callable[[], float] = time.time
) -> None:
    """Every planned run not yet done, one after another (module docstring). With `until` (seconds since the
    epoch) it stops before a run that would not end by then: a training run's need is its env steps left at
    the seconds per env step the study's finished runs took; a run whose need is not known yet starts while
    time is left. So a study on a machine that is lent for a while stops between runs, and loses nothing
    when the machine and its uncommitted checkpoints go."""
    import torch

    from agentrl.config import load_config
    from agentrl.cpu import native_cpu_bf16

    spec = check_planned(layout)
    commit = code_commit()
    for planned in planned_runs(spec):
        record = read_record(layout, planned.name)
        if record and record.get("done"):
            continue
        if planned.played_elsewhere:
            log(
                f"study {layout.name}: {planned.name} is a play outside the plan; its record is not there yet"
            )
            continue
        trained = planned.arm is not None and not planned.reference
        need = seconds_needed(spec, record, seconds_per_env_step(layout, spec)) if trained else None
        if until is not None and not starts_before(clock(), until, need):
            needed = "" if need is None else f" (about {need / 60:.0f} min)"
            log(f"study {layout.name}: stopped before {planned.name}{needed}: it would not end by --until")
            return
        config = load_config(spec.task, run_overrides(spec, layout, planned))
        here = machine(config, native_cpu_bf16(), torch.cuda.is_available())
        refuse_other_precision(layout, spec, planned.name, here)
        log(f"study {layout.name}: {planned.name} (code at {commit}, {here['cpu']})")
        record = with_machine(with_commit(record or new_record(planned), commit), here)
        if planned.reference:
            run_reference(spec, layout, planned, record, log)
        elif planned.arm is None:
            run_base(spec, layout, record, log)
        else:
            run_training(spec, layout, planned, record, log)


def code_commit() -> str:
    """The commit of the agentrl code this process runs, "+dirty" when the package's tracked files differ
    from it (a study's own records changing do not count), "unknown" outside a git checkout."""
    import agentrl
    from agentrl.evidence import commit_of

    return commit_of(Path(agentrl.__file__).resolve().parent.parent, only=("agentrl", "pyproject.toml"))


def run_overrides(spec: StudySpec, layout: Layout, planned: PlannedRun) -> list[str]:
    """The overrides a planned run's config starts from: the shared ones with its arm's or its reference
    line's own (the runners add the segment's budget, seed and resume to these)."""
    own = (
        spec.reference(planned.name).overrides
        if planned.reference
        else spec.arm(planned.arm).overrides
        if planned.arm is not None
        else []
    )
    return [*shared_overrides(spec, layout, f"{layout.name}-{planned.name}"), *own]


def machine(config: Any, native_bf16: bool, cuda: bool = False) -> dict[str, Any]:
    """This machine's CPU and the precision a run of `config` computes in here: with `native_bf16` (a CPU
    that multiplies bf16 natively) the cached engine's `auto` samples in bf16 and bf16 autocast is on where
    asked, without it both run in fp32. A seeded run's numbers depend on that beside its code, so a study's
    runs share it (`refuse_other_precision`). A run on a CUDA device (`cuda`) is recorded as "gpu": its
    precision is the GPU's, which this does not check."""
    from agentrl.cpu import cpu_model, speed_flags

    def bf16_if(asked: bool) -> str:
        return "bfloat16" if asked and native_bf16 else "float32"

    kind, cached = config.engine.kind, config.engine.cached.precision
    update = bf16_if(config.update.autocast_bf16)
    if cuda and config.model.device != "cpu":
        sampler, update = "gpu", "gpu"
    elif kind == "hf":
        sampler = bf16_if(config.engine.hf.autocast_bf16)
    elif kind in ("auto", "cached"):
        sampler = cached if cached != "auto" else bf16_if(True)
    else:  # vLLM or a server: its own precision, not this CPU's
        sampler = kind
    return {"cpu": cpu_model(), "flags": speed_flags(), "sampler": sampler, "update": update}


def precision_text(entry: Mapping[str, Any]) -> str:
    return f"sampler {entry['sampler']}, update {entry['update']}"


def refuse_other_precision(layout: Layout, spec: StudySpec, run: str, here: Mapping[str, Any]) -> None:
    """`ConfigError` when a run of the study was played in another precision than `run` would be played in
    here: a paired comparison across precisions compares machines as well as arms. Records from before runs
    kept their machine are not checked."""
    for planned in planned_runs(spec):
        record = read_record(layout, planned.name) or {}
        for entry in record.get("machines") or []:
            if precision_text(entry) != precision_text(here):
                raise ConfigError(
                    f"{run} would play in {precision_text(here)} on this CPU ({here['cpu']}), but "
                    f"{planned.name} played in {precision_text(entry)} on {entry['cpu']}: play the study on "
                    "a CPU like that one (native bf16 or not, agentrl.cpu.native_cpu_bf16), or pin "
                    "engine.cached.precision and update.autocast_bf16 in the study's overrides and plan again"
                )


def with_machine(record: dict[str, Any], here: dict[str, Any]) -> dict[str, Any]:
    """`record` with `here` added to the machines it was played on (`machines`, as `commits` is kept)."""
    return played_on(record, "machines", here)


def with_commit(record: dict[str, Any], commit: str) -> dict[str, Any]:
    """`record` with `commit` added to the code commits it was played on (`commits`, in order: a run
    resumed on other code lists each commit, so a study whose runs span commits says so)."""
    return played_on(record, "commits", commit)


def played_on(record: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`record` with `value` appended to its list `key` unless it is the last one there already (a run
    resumed on the same code or machine lists it once; on other code or another machine, each in order)."""
    found = list(record.get(key) or [])
    if not found or found[-1] != value:
        found.append(value)
    return {**record, key: found}


def new_record(planned: PlannedRun) -> dict[str, Any]:
    return {
        "run": planned.name,
        "arm": planned.arm,
        "seed": planned.seed,
        "points": [],
        "decodings": [],
        "env_steps": 0,
        "wall_s": 0.0,
        "done": False,
    }


def shared_overrides(spec: StudySpec, layout: Layout, name: str) -> list[str]:
    """Every run's overrides: its name, where its run folder and store go, the evaluation's size, then the
    study's own (which may change anything but these)."""
    return [
        f"name={name}",
        f"runs_dir={layout.train_runs}",
        f"store.url=sqlite:///{(layout.train_runs / 'store.db').resolve()}",
        f"eval.num_tasks={spec.eval_tasks}",
        "train.steps=1000000",  # the env-step budget ends each segment; a study may still cap steps
        *spec.overrides,
    ]


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation of a run's final weights (or the base): the set (`EvalSet.name`, "" the main
    one), its size and overrides, the temperature, the sampler seed (`eval.seed`) and the episodes per task
    (`eval.samples`; above 1 it scores pass@k)."""

    set: str
    tasks: int
    temperature: float
    seed: int = 0
    samples: int = 1
    overrides: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, float, int, int]:
        return self.set, float(self.temperature), self.seed, self.samples

    @property
    def entry(self) -> dict[str, Any]:
        """What a record's decoding entry says of it, before its outcome (`evaluation_key` reads it back)."""
        return {
            "temperature": float(self.temperature),
            "set": self.set,
            "eval_seed": self.seed,
            "samples": self.samples,
        }


def evaluation_key(point: Mapping[str, Any]) -> tuple[str, float, int, int]:
    """What a record's decoding entry evaluated (`Evaluation.key`); older records name only a temperature."""
    found = (
        point.get("set", ""),
        float(point["temperature"]),
        point.get("eval_seed", 0),
        point.get("samples", 1),
    )
    return str(found[0]), found[1], int(found[2]), int(found[3])


def final_evaluations(
    spec: StudySpec, eval_temperature: float, base: bool, train_temperature: float = 1.0
) -> list[Evaluation]:
    """The evaluations of a run's final weights, in the order they run (pure): the main set at each of the
    study's decodings (the base also at the run config's eval temperature), then each `EvalSet` at its
    decodings (the base also at its `base_decodings`). The base evaluates a sampled decoding at each of
    `base_seeds` (greedy at the first) and, with `base_pass_at` k, ends with its pass@k at the training
    temperature (`train_temperature`: k samples as a training group draws them)."""
    seeds = spec.base_seeds if base else (0,)
    main = [eval_temperature, *spec.decodings] if base else list(spec.decodings)
    sets = [("", spec.eval_tasks, main, ())] + [
        (item.name, item.tasks, [*item.decodings, *(item.base_decodings if base else ())], item.overrides)
        for item in spec.evaluations
    ]
    found = [
        Evaluation(name, tasks, float(temperature), seed, 1, tuple(overrides))
        for name, tasks, temperatures, overrides in sets
        for temperature in dict.fromkeys(float(t) for t in temperatures)
        for seed in (seeds if temperature > 0 else seeds[:1])
    ]
    if base and spec.base_pass_at > 0:
        found.append(Evaluation("", spec.eval_tasks, float(train_temperature), seeds[0], spec.base_pass_at))
    return found


def run_evaluations(
    spec: StudySpec,
    layout: Layout,
    run: str,
    record: dict[str, Any],
    planned: Sequence[Evaluation],
    started: float,
    log: Log,
    model: Path | None = None,
    arm_overrides: Sequence[str] = (),
) -> None:
    """Each of `planned` not in `record` yet, the record rewritten after each."""
    done = {evaluation_key(point) for point in record["decodings"]}
    for item in planned:
        if item.key in done:
            continue
        record["decodings"].append(
            {**item.entry, **evaluation(spec, layout, run, item, model, arm_overrides)}
        )
        record["wall_s"] = time.perf_counter() - started
        write_record(layout, run, record)
        where = f" on {item.set}" if item.set else ""
        extra = f", seed {item.seed}" if item.temperature > 0 else ""
        extra += f", pass@{item.samples}" if item.samples > 1 else ""
        log(f"  {run}{where} at T={item.temperature:g}{extra}: {record['decodings'][-1]['value']:.3f}")


def run_base(spec: StudySpec, layout: Layout, record: dict[str, Any], log: Log) -> None:
    """The base model's evaluations (`final_evaluations`)."""
    from agentrl.config import load_config

    started = time.perf_counter() - float(record["wall_s"])
    config = load_config(spec.task, shared_overrides(spec, layout, f"{layout.name}-base"))
    planned = final_evaluations(spec, config.eval.temperature, True, config.sampling.temperature)
    run_evaluations(spec, layout, BASE, record, planned, started, log)
    record["done"] = True
    write_record(layout, BASE, record)


def run_reference(
    spec: StudySpec, layout: Layout, planned: PlannedRun, record: dict[str, Any], log: Log
) -> None:
    """A reference line (`StudySpec.references`, kind sft): the scripted policy's demonstrations, SFT of
    the base on them, then the final evaluations of a trained run and the main set at the eval temperature.
    Each stage is recorded when it ends; SFT is not resumable, so an interrupted one starts again."""
    from agentrl.config import load_config
    from agentrl.demos import load_demos, make_demos
    from agentrl.trainer.sft import sft

    reference = spec.reference(planned.name)
    started = time.perf_counter() - float(record["wall_s"])
    demos_name, sft_name = (f"{layout.name}-{reference.name}-{kind}" for kind in ("demos", "sft"))
    if "demos" not in record:
        config = load_config(spec.task, [*shared_overrides(spec, layout, demos_name), *reference.overrides])
        made = asyncio.run(make_demos(config, "scripted", reference.demos))
        steps = sum(len(episode.turns) for episode in load_demos(made.path).episodes)
        record["demos"] = {
            "path": str(made.path),
            "kept": made.kept,
            "played": made.played,
            "env_steps": steps,
        }
        record["env_steps"], record["wall_s"] = steps, time.perf_counter() - started
        write_record(layout, planned.name, record)
        log(f"  {planned.name}: {made.kept} demonstrations kept of {made.played}, {steps} env steps")
    final = layout.train_runs / sft_name / "final"
    sft_overrides = [
        *shared_overrides(spec, layout, sft_name),
        f"sft.demos={record['demos']['path']}",
        "eval.before=false",
        "eval.after=false",
        *reference.overrides,
    ]
    config = load_config(spec.task, sft_overrides)
    if not final.is_dir():
        shutil.rmtree(layout.train_runs / sft_name, ignore_errors=True)
        asyncio.run(sft(config))
        record["wall_s"] = time.perf_counter() - started
        write_record(layout, planned.name, record)
    temperature = config.eval.temperature
    planned_evaluations = [
        Evaluation("", spec.eval_tasks, float(temperature)),
        *final_evaluations(spec, temperature, base=False),
    ]
    run_evaluations(spec, layout, planned.name, record, planned_evaluations, started, log, final)
    record["done"] = True
    write_record(layout, planned.name, record)


def run_training(
    spec: StudySpec, layout: Layout, planned: PlannedRun, record: dict[str, Any], log: Log
) -> None:
    """One (arm, seed): train to each checkpoint not yet recorded, then the decodings of its final weights."""
    from agentrl.config import load_config
    from agentrl.trainer import checkpoint
    from agentrl.trainer.train import train

    assert planned.arm is not None and planned.seed is not None
    started = time.perf_counter() - float(record["wall_s"])
    name = f"{layout.name}-{planned.name}"
    run_dir = layout.train_runs / name
    temperature = load_config(spec.task, shared_overrides(spec, layout, name)).eval.temperature
    refuse_lost_checkpoints(record, run_dir, checkpoint.latest(run_dir))
    read_empty_points_again(spec, layout, planned.name, name, record, log)
    for point in checkpoint_points(spec.env_step_budget, spec.checkpoints)[len(record["points"]) :]:
        newest = checkpoint.latest(run_dir)
        state = None if newest is None else checkpoint.read_state(newest)
        recorded_step = record["points"][-1]["train_step"] if record["points"] else 0
        if state is not None and state.env_steps >= point:
            if state.step == recorded_step:  # the last segment's last step played past this point too
                record["points"].append({**record["points"][-1], "checkpoint_env_steps": point})
            else:  # trained, then interrupted before the record was written: evaluated or not
                found = last_evaluation(spec, layout, name, state.step, temperature)
                if not found["per_task"]:  # interrupted during the evaluation: the checkpoint's again
                    found = checkpoint_evaluation(
                        spec, layout, planned, run_dir, newest or run_dir, temperature
                    )
                    log(f"  {planned.name}: step {state.step}'s evaluation, interrupted, played again")
                record["points"].append(
                    {
                        "checkpoint_env_steps": point,
                        "env_steps": state.env_steps,
                        "train_step": state.step,
                        **found,
                    }
                )
            record["env_steps"] = state.env_steps
            write_record(layout, planned.name, record)
            continue
        resume = [f"trainer.resume={run_dir}"] if newest is not None else []
        overrides = [
            *shared_overrides(spec, layout, name),
            *spec.arm(planned.arm).overrides,
            f"train.seed={planned.seed}",
            f"train.env_step_budget={point}",
            "trainer.checkpoint_every=1",
            "eval.before=false",
            "eval.after=true",
            *resume,
        ]
        config = load_config(spec.task, overrides)
        asyncio.run(train(config))
        state = checkpoint.read_state(checkpoint.latest(run_dir) or run_dir)
        point_record = {
            "checkpoint_env_steps": point,
            "env_steps": state.env_steps,
            "train_step": state.step,
            **last_evaluation(spec, layout, name, state.step, config.eval.temperature),
        }
        record["points"].append(point_record)
        record["env_steps"] = state.env_steps
        record["wall_s"] = time.perf_counter() - started
        write_record(layout, planned.name, record)
        log(f"  {planned.name} at {state.env_steps} env steps: {point_record['value']:.3f}")
    finals = final_evaluations(spec, temperature, base=False)
    arm_overrides = spec.arm(planned.arm).overrides
    run_evaluations(
        spec, layout, planned.name, record, finals, started, log, run_dir / "final", arm_overrides
    )
    record["done"] = True
    write_record(layout, planned.name, record)


def refuse_lost_checkpoints(record: Mapping[str, Any], run_dir: Path, newest: Path | None) -> None:
    """`ConfigError` when `record` has trained points but `run_dir` holds no checkpoint to go on from (the
    run folders are not committed, so a fresh clone or another machine has none): training on would start
    from the base weights with a later point's budget and record it as this run's continuation."""
    if not record["points"] or newest is not None:
        return
    raise ConfigError(
        f"{record['run']} has {len(record['points'])} trained point(s) recorded, but {run_dir} holds no "
        "checkpoint to resume from (run folders stay on the machine that trained them): play the run on "
        "that machine, or remove its record from results/runs/ to play it again from its start, and say so "
        "in the study's page"
    )


def read_empty_points_again(
    spec: StudySpec, layout: Layout, run: str, name: str, record: dict[str, Any], log: Log
) -> None:
    """Each recorded point that holds no tasks (nothing was read back from the store), read again from the
    store of trained run `name`; a point found there is rewritten in `record` (study run `run`)."""
    for index, point in enumerate(record["points"]):
        if point.get("per_task"):
            continue
        found = last_evaluation(spec, layout, name, int(point["train_step"]), float(point["temperature"]))
        if found["per_task"]:
            record["points"][index] = {**point, **found}
            write_record(layout, run, record)
            log(f"  {run} at {point['env_steps']} env steps, read again: {found['value']:.3f}")


def checkpoint_evaluation(
    spec: StudySpec, layout: Layout, planned: PlannedRun, run_dir: Path, newest: Path, temperature: float
) -> dict[str, Any]:
    """The evaluation a training segment would have ended with, of its last checkpoint's weights (`newest`,
    loaded as `checkpoint_weights` assembles them): what an interruption during that evaluation left out.
    Seeded like every held-out evaluation, so it is the evaluation the segment would have recorded."""
    assert planned.arm is not None
    weights = checkpoint_weights(run_dir, newest)
    item = Evaluation("", spec.eval_tasks, float(temperature))
    found = evaluation(spec, layout, planned.name, item, weights, spec.arm(planned.arm).overrides)
    return {"temperature": item.temperature, **found}


WEIGHT_FILES = ("config.json", "generation_config.json")


def checkpoint_weights(run_dir: Path, checkpoint: Path) -> Path:
    """A model folder `model.name=` loads: `checkpoint`'s full weights with the tokenizer files the run
    saved in `final/` (a checkpoint holds no tokenizer), made once under the run folder; `ConfigError` when
    the checkpoint holds adapters only or the run never saved `final/`."""
    final = run_dir / "final"
    if not list(checkpoint.glob("*.safetensors")) or not (checkpoint / "config.json").is_file():
        raise ConfigError(
            f"{checkpoint} holds no full weights (a LoRA run's adapters): delete {run_dir} and its record to "
            "train that run again"
        )
    if not (final / "tokenizer_config.json").is_file():
        raise ConfigError(
            f"{run_dir} was interrupted during its first evaluation, before it saved final/: delete that "
            "folder and the run's record to train it again"
        )
    folder = run_dir / f"eval-{checkpoint.name}"
    if folder.is_dir():
        return folder
    partial = run_dir / f"eval-{checkpoint.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for path in checkpoint.iterdir():
        if path.name in WEIGHT_FILES or path.suffix == ".safetensors":
            shutil.copy2(path, partial / path.name)
    for path in final.iterdir():
        if path.is_file() and path.name not in WEIGHT_FILES and path.suffix != ".safetensors":
            shutil.copy2(path, partial / path.name)
    partial.replace(folder)
    return folder


def evaluation(
    spec: StudySpec,
    layout: Layout,
    run: str,
    item: Evaluation,
    model: Path | None = None,
    arm_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """One held-out evaluation (`run_eval`) of run `run`'s `model` (None: the run config's) as `item` says,
    under the run's arm overrides: its outcome (`stored_evaluation`)."""
    from agentrl.config import load_config
    from agentrl.trainer.run import run_eval

    what = f"{item.set or 'main'}-T{item.temperature:g}-s{item.seed}-k{item.samples}"
    name = f"{layout.name}-{run}-eval-{what}-{time.strftime('%Y%m%d-%H%M%S')}"
    overrides = [
        *shared_overrides(spec, layout, name),
        *arm_overrides,
        f"eval.num_tasks={item.tasks}",
        *item.overrides,
        f"eval.temperature={item.temperature}",
        f"eval.seed={item.seed}",
        f"eval.samples={item.samples}",
        *([f"model.name={model}"] if model is not None else []),
    ]
    config = load_config(spec.task, overrides)
    asyncio.run(run_eval(config))
    return stored_evaluation(spec, layout, name, None, item.samples)


def last_evaluation(
    spec: StudySpec, layout: Layout, name: str, step: int, temperature: float
) -> dict[str, Any]:
    """The held-out evaluation a training segment ended with (its run's eval episodes at `step`)."""
    return {"temperature": float(temperature), **stored_evaluation(spec, layout, name, step)}


def stored_evaluation(
    spec: StudySpec, layout: Layout, name: str, step: int | None, samples: int = 1
) -> dict[str, Any]:
    """Per-task outcomes and the study's metric of run `name`'s held-out episodes (at `step`; None: all;
    `samples` per task: pass@k, `outcome`)."""
    from agentrl.config import load_config
    from agentrl.store.repository import close_store, list_runs, load_episodes, open_store

    store = open_store(f"sqlite:///{(layout.train_runs / 'store.db').resolve()}")
    try:
        matches = [row for row in list_runs(store) if row["name"] == name]  # newest first
        if not matches:
            raise ConfigError(f"the study's store holds no run named {name}")
        episodes = held_out_at((load_episodes(store, match["id"]) for match in matches), step)
    finally:
        close_store(store)
    parts = int(load_config(spec.task, list(spec.overrides)).env.kwargs.get("parts", 1))
    return outcome(episodes, spec.metric, parts, samples)


def held_out_at(runs: Iterable[Sequence[Mapping[str, Any]]], step: int | None) -> list[Mapping[str, Any]]:
    """The held-out episodes at `step` (None: all) of the first of `runs` (each a stored run's episodes,
    newest first) that holds any. A run trained in several processes (a study stopped and resumed) is
    several stored runs of one name, and its evaluation at a step is in the one that played it."""
    for episodes in runs:
        found = [
            row for row in episodes if row["split"] == "eval" and (step is None or int(row["step"]) == step)
        ]
        if found:
            return found
    return []


def outcome(
    episodes: Sequence[Mapping[str, Any]], metric: str, parts: int, samples: int = 1
) -> dict[str, Any]:
    """The evaluation's per-task outcomes and its value of `metric` over the episodes that did not fail for
    infrastructure reasons (pure). With `samples` k > 1 (k episodes per task) every episode is listed and
    the value is pass@k: each task scores its best scored episode (its highest reward; solved when any is)."""
    per_task = [
        {
            "task_id": row["task_id"],
            "success": None if row["error"] else bool(row["success"]),
            "reward": float(row["reward"]),
        }
        for row in episodes
    ]
    scored = [row for row in per_task if row["success"] is not None]
    infra_failures = len(per_task) - len(scored)
    if samples > 1:
        best: dict[str, dict[str, Any]] = {}
        for row in scored:
            kept = best.get(row["task_id"])
            if kept is None or (row["reward"], row["success"]) > (kept["reward"], kept["success"]):
                best[row["task_id"]] = row
        scored = list(best.values())
    if not scored:
        value = 0.0
    elif metric == "per_part_success":
        value = sum(row["reward"] for row in scored) / (len(scored) * parts)
    else:
        value = sum(bool(row["success"]) for row in scored) / len(scored)
    return {
        "value": value,
        "tasks": len(scored),
        "infra_failures": infra_failures,
        "per_task": per_task,
    }


# ---- status --------------------------------------------------------------------------------------------


def status(layout: Layout) -> list[str]:
    """One line per planned run: done, how far it got, or not started."""
    spec = load_spec(layout.spec)
    lines = []
    planned_hash = json.loads(layout.plan.read_text())["spec_sha256"] if layout.plan.is_file() else None
    lines.append(
        f"study {layout.name}: "
        + (
            "not planned"
            if planned_hash is None
            else "planned"
            if planned_hash == spec_hash(layout.spec)
            else "study.yaml changed since it was planned"
        )  # fmt: skip
    )
    points = len(checkpoint_points(spec.env_step_budget, spec.checkpoints))
    for planned in planned_runs(spec):
        record = read_record(layout, planned.name)
        if record is None:
            state = "not started"
        elif record.get("done"):
            state = f"done ({done_text(record)})"
        else:
            state = f"{len(record['points'])} of {points} points, {len(record['decodings'])} decodings"
        lines.append(f"  {planned.name}: {state}")
    return lines


def done_text(record: Mapping[str, Any]) -> str:
    """A finished record's env steps and wall time, each "not recorded" when the record lacks it (a record
    converted from a file that did not keep it, e.g. the base of plan 3b or the calc demo's runs)."""
    steps, wall = record.get("env_steps"), record.get("wall_s")
    return (
        f"{'env steps not recorded' if steps is None else f'{steps} env steps'}, "
        f"{'wall time not recorded' if wall is None else f'{wall:.0f} s'}"
    )
