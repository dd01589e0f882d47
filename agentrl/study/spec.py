"""A study as a file: `studies/<name>/study.yaml` read into `StudySpec`, a typed config like the run config.

What this is: frozen dataclasses (every default in one place, standard library only), `load_spec` (the
YAML through `agentrl.typed.build`, so an unknown key names the valid ones), the checks that make a study
well posed (each an error that names the fix) and `spec_hash`, the hash `agentrl study plan` writes and
`agentrl study run` compares against (pre-registration, enforced).

A study trains one run per (arm, seed) from the same run config (`task` plus `overrides`, then the arm's
overrides, then `train.seed`), each until it has played `env_step_budget` env steps, evaluating the
held-out tasks at `checkpoints` evenly spaced env-step points at the run config's `eval.temperature`, and at
its last point at each of `decodings` too, and on each further held-out set of `evaluations` (`EvalSet`: a
size, decodings, overrides such as another suite). The base model is evaluated the same way, once, at every
decoding of every set, a sampled decoding at each of `base_seeds`, and with `base_pass_at` k its pass@k.
The pre-named statistics (`Statistic`) are computed from those numbers and nothing else.

What this is not: the runner (`agentrl.study.runner`) or the report (`agentrl.study.report`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentrl.errors import ConfigError
from agentrl.typed import build

STUDIES_DIR = Path("studies")
SPEC_FILE = "study.yaml"
METRICS = ("success_rate", "per_part_success")
STATISTICS = ("vs_base", "change", "paired", "steps_to_threshold", "steps_to_final", "collapse_rate")
DECODINGS = ("best", "training")


@dataclass(frozen=True)
class Arm:
    """One line of the study: its name and the `key=value` overrides that make it differ from the others."""

    name: str
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlayedRun:
    """A play of an (arm, seed) outside the plan that counts as it ended: e.g. a run started, stopped
    unfinished and played again from its start before interrupted runs resumed. Its record is written by
    whoever kept it (`results/runs/<name>.json`); `run` never plays it, and the statistics count it with its
    arm at whatever it was evaluated at (a decoding it was never evaluated at is reported as missing)."""

    name: str
    arm: str
    seed: int
    why: str


@dataclass(frozen=True)
class EvalSet:
    """A held-out set besides the main one (the first `eval_tasks` tasks of the run config's eval split), on
    which each run's final weights and the base are evaluated.

    name:      how records and statistics (`Statistic.set`) name it
    tasks:     its first `tasks` held-out tasks
    decodings: temperatures it is evaluated at (0: greedy)
    overrides: `key=value` overrides of the run config for it (e.g. `tasks.suite=calc-chain-r4-ood`, a set in
               a wording training never shows)
    base_decodings: further temperatures only the base is evaluated at here: where its best untrained
               decoding is looked for without evaluating every run there too
    """

    name: str
    tasks: int
    decodings: tuple[float, ...]
    overrides: tuple[str, ...] = ()
    base_decodings: tuple[float, ...] = ()


@dataclass(frozen=True)
class Reference:
    """A reference line beside the base that no statistic uses: the base trained another way, then
    evaluated as each run's final weights are (the main set at the run config's `eval.temperature` and at
    each of `decodings`, and every further set).

    name:      its run's name (distinct from the arms', the plays', and "base")
    demos:     "sft": the successful episodes of the env's scripted policy to keep (`agentrl demos`, on
               training tasks); the env steps they played are recorded beside the arms' budget
    kind:      "sft": supervised fine-tuning of the base on those demonstrations (`agentrl sft`)
    overrides: `key=value` overrides of its demonstrations and its SFT run (e.g. `sft.epochs=1`); its
               evaluations use the study's own
    """

    name: str
    demos: int
    kind: str = "sft"
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Statistic:
    """A pre-named statistic.

    kind:      "vs_base": `arm`'s final value at its best decoding over seeds (95% Student-t band) against
               the base at its best decoding (the best of `decodings` and the training temperature);
               "change": per run, `arm`'s final value minus the base's at the decoding `vs_base` would
               compare (`at`, `temperature`, `set` as there), with the tasks the run gained and lost against
               the base on the same tasks and their exact sign-test p (McNemar's for pass/fail), and the
               95% band over seeds of the changes (a before/after table: the calc demo's);
               "paired": `arm` minus `other` at the last checkpoint, paired by seed (95% band of the
               differences); "steps_to_threshold": per seed, the env steps at which `arm`'s curve first
               reaches `threshold` (linear between checkpoints, the base at 0), a seed that never does
               censored at the budget (counted, never dropped), and the same for `other` when named;
               "steps_to_final": the same with `other`'s final mean (its last points' mean) as the
               threshold, with the share of `arm`'s seeds that reach it; "collapse_rate": the share of
               `arm`'s runs whose final value is below the base's best decoding (each run named)
    arm:       the arm the statistic is about
    other:     "paired" and "steps_to_final" (required), "steps_to_threshold" (optional): the arm it is
               compared with
    threshold: "steps_to_threshold": the value to reach, in the study's `metric`
    at:        "vs_base", "change": "best" (the base's best decoding, the test a learning claim needs) or
               "training" (the run config's `eval.temperature`, the base and the arm both evaluated there)
    set:       "vs_base", "change", "paired", "collapse_rate": the held-out set compared on: "" the main one,
               else an `EvalSet` name
    temperature: "vs_base", "change", "paired", "collapse_rate": the final decoding compared (the arm's
               and, for "vs_base" and "change", the base's too; None: those two as `at` says, "paired" and
               "collapse_rate" the last point on the main set or a named set's first decoding)
    """

    kind: str
    arm: str
    other: str = ""
    threshold: float = 0.0
    at: str = "best"
    set: str = ""
    temperature: float | None = None


@dataclass(frozen=True)
class StudySpec:
    """What a study runs and what it will report.

    task:            the run config (`configs/<task>.yaml` or a plugin's), as `agentrl train --task` takes it
    overrides:       `key=value` overrides of every run (base included)
    arms:            the lines compared (at least one; each overrides something)
    seeds:           `train.seed` of each arm's runs (2 at least: every statistic has a band over seeds)
    env_step_budget: env steps each run trains for (`train.env_step_budget`)
    checkpoints:     evaluation points, evenly spaced over the budget, the last one at the budget
    eval_tasks:      held-out tasks per evaluation (the first ones of the eval split)
    decodings:       temperatures evaluated at each run's last point and for the base (0: greedy), besides
                     the run config's `eval.temperature` at every point
    metric:          "success_rate" (episodes solved) or "per_part_success" (mean reward over `parts`, for
                     multi-part tasks such as calc-chain)
    statistics:      the pre-named statistics
    title:           one line the report's heading shows
    kind:            "comparison" (this file); a go/no-go is `kind: gonogo` (`agentrl.study.gonogo`)
    also_played:     plays outside the plan that count as they ended (`PlayedRun`): every run counts
    evaluations:     further held-out sets each run's final weights and the base are evaluated on (`EvalSet`)
    base_seeds:      the base's sampled decodings (temperature > 0) are evaluated at each of these
                     `eval.seed`s, their value the mean over seeds (greedy once: it does not depend on one)
    references:      reference lines beside the base that no statistic uses (`Reference`: e.g. SFT on
                     scripted demonstrations), played after the base
    base_pass_at:    k > 0: the base's pass@k on the main set at the run config's training temperature
                     (`sampling.temperature`; k episodes per task, `eval.samples`; a task counts its best
                     episode), a reference line
    """

    task: str
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    env_step_budget: int
    statistics: tuple[Statistic, ...]
    overrides: tuple[str, ...] = ()
    checkpoints: int = 2
    eval_tasks: int = 16
    decodings: tuple[float, ...] = ()
    metric: str = "success_rate"
    title: str = ""
    kind: str = "comparison"
    also_played: tuple[PlayedRun, ...] = ()
    evaluations: tuple[EvalSet, ...] = ()
    base_seeds: tuple[int, ...] = (0,)
    base_pass_at: int = 0
    references: tuple[Reference, ...] = ()

    def arm(self, name: str) -> Arm:
        return next(arm for arm in self.arms if arm.name == name)

    def reference(self, name: str) -> Reference:
        return next(item for item in self.references if item.name == name)


def study_dir(name: str, root: Path = STUDIES_DIR) -> Path:
    return root / name


def study_mapping(path: Path, lists: dict[str, type]) -> dict[str, Any]:
    """The study file at `path` as a mapping whose `lists` keys hold typed items (`agentrl.typed.build`);
    a missing file, bad YAML, or a list that is not one stops with a `ConfigError` naming the fix."""
    if not path.is_file():
        raise ConfigError(f"no study file {path}; write one (docs/studies.md) or check the study's name")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of study keys (docs/studies.md)")
    for key, kind in lists.items():
        values = data.get(key) or []
        if not isinstance(values, list):
            raise ConfigError(f"study.{key} must be a list of mappings, got {type(values).__name__}")
        data = {**data, key: [build(kind, value, f"study.{key}[{i}]") for i, value in enumerate(values)]}
    return data


def load_spec(path: Path) -> StudySpec:
    """The study file at `path`, typed and checked (`ConfigError` naming the fix)."""
    data = study_mapping(
        path,
        {
            "arms": Arm,
            "statistics": Statistic,
            "also_played": PlayedRun,
            "evaluations": EvalSet,
            "references": Reference,
        },
    )
    spec = build(StudySpec, data, "study")
    check_spec(spec)
    return spec


def check_spec(spec: StudySpec) -> None:
    """The checks a study must pass before it is planned; each `ConfigError` names the fix."""
    names = [arm.name for arm in spec.arms]
    if spec.kind != "comparison":
        raise ConfigError(f"study.kind={spec.kind!r}: a comparison study is kind comparison (or gonogo)")
    if not names:
        raise ConfigError("study.arms is empty: name at least one arm, e.g. {name: grpo, overrides: [...]}")
    if len(set(names)) != len(names) or "base" in names:
        raise ConfigError(f"study.arms: names must be distinct and not 'base', got {names}")
    for arm in spec.arms:
        if not arm.overrides:
            raise ConfigError(
                f"study arm {arm.name!r} overrides nothing: give it the key=value overrides that make it "
                "differ (e.g. credit.estimator=gigpo), or put what every run shares in study.overrides"
            )
        bad = [item for item in arm.overrides if "=" not in item]
        if bad:
            raise ConfigError(f"study arm {arm.name!r}: overrides must be key=value, got {bad}")
    if len(set(spec.seeds)) < 2:
        raise ConfigError(
            f"study.seeds {list(spec.seeds)}: a band over seeds needs at least 2 distinct seeds, e.g. [0, 1]"
        )
    if spec.env_step_budget < 1 or spec.checkpoints < 1 or spec.eval_tasks < 1:
        raise ConfigError("study.env_step_budget, study.checkpoints and study.eval_tasks must be >= 1")
    if spec.metric not in METRICS:
        raise ConfigError(f"study.metric={spec.metric!r} is unknown; use one of {', '.join(METRICS)}")
    if not spec.statistics:
        raise ConfigError("study.statistics is empty: name what the study will report before it runs")
    sets = [item.name for item in spec.evaluations]
    if len(set(sets)) != len(sets) or "" in sets:
        raise ConfigError(f"study.evaluations: each set needs a distinct, non-empty name, got {sets}")
    for item in spec.evaluations:
        if item.tasks < 1 or not item.decodings:
            raise ConfigError(
                f"study.evaluations {item.name!r}: give it tasks >= 1 and at least one decoding, e.g. [0.0]"
            )
    taken = [*names, *(run.name for run in spec.also_played), "base"]
    for reference in spec.references:
        if reference.kind != "sft" or reference.demos < 1 or reference.name in taken:
            raise ConfigError(
                f"study.references {reference.name!r}: kind must be sft, demos >= 1, and its name distinct "
                f"from the arms, the plays and base ({', '.join(taken)})"
            )
        taken.append(reference.name)
    if not spec.base_seeds or spec.base_pass_at < 0:
        raise ConfigError("study.base_seeds needs at least one seed and study.base_pass_at must be >= 0")
    for statistic in spec.statistics:
        check_statistic(statistic, set(names))
        if statistic.set and statistic.set not in sets:
            raise ConfigError(
                f"study statistic {statistic.kind} of {statistic.arm!r}: set={statistic.set!r} is not one of "
                f"study.evaluations ({', '.join(sets) or 'none'}); name one, or leave `set` out for the main "
                "set"
            )
    for played in spec.also_played:
        if played.arm not in names or not played.why:
            raise ConfigError(
                f"study.also_played {played.name!r}: its arm must be one of {names} and `why` must say "
                "why it is outside the plan"
            )


def check_statistic(statistic: Statistic, arms: set[str]) -> None:
    if statistic.kind not in STATISTICS:
        raise ConfigError(
            f"study statistic kind {statistic.kind!r} is unknown; use one of {', '.join(STATISTICS)}"
        )
    for name in (statistic.arm, statistic.other):
        if name and name not in arms:
            raise ConfigError(
                f"study statistic {statistic.kind} names the arm {name!r}, which is not one of the study's "
                f"arms ({', '.join(sorted(arms))})"
            )
    if statistic.at not in DECODINGS:
        raise ConfigError(
            f"study statistic {statistic.kind} of {statistic.arm!r}: at={statistic.at!r} is unknown; use "
            f"{' or '.join(DECODINGS)}"
        )
    if statistic.kind in ("paired", "steps_to_final") and not statistic.other:
        raise ConfigError(
            f"study statistic {statistic.kind} of {statistic.arm!r} needs `other`: the arm it is compared "
            "with"
        )


def spec_hash(path: Path) -> str:
    """sha256 of the study file's bytes: what `plan` records and `run` must find again."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
