"""A go/no-go as a study kind: measure a task before a comparison is run on it, against criteria named first.

A go/no-go study file (`studies/<name>/study.yaml` with `kind: gonogo`) names the task, the variants to
measure (the base model under some overrides, or a model trained partway: `train_env_steps` env steps of
the variant's run config, then its final weights), the held-out evaluations (`decodings`, `eval_tasks`),
whether to play one base batch at the training temperature (`batch`), and the criteria, each a named
measure with a bound, checked on the variants it names (`scope`, default all). Two rules say **go**:
- `rule: criteria` (the default): every criterion holds, a criterion holding when it holds on `any` (or
  `all`, its `across`) of its variants: e.g. "the untrained model's success in range" on the base alone, and
  "later parts carry signal" on the base or on a checkpoint partway through training;
- `rule: variant`: some variant passes every criterion that applies to it (e.g. "go at a temperature T iff
  all criteria hold on T's batch").
Otherwise **no-go**, with which criteria failed where.

Measures (`MEASURES`), read from a variant's record:
- `best_per_part_success`: the best held-out per-part success over the decodings;
- `part_spread`: at that best decoding, the largest distance of a part's success from part 1's;
- `later_part_signal_share`: on the batch, the share of later-part anchor groups with unequal returns to
  go (`agentrl.study.signal.part_start_signal`);
- `cosine_gigpo_vs_episode_term`, `cosine_grpo_vs_gigpo`: on the batch, how far GiGPO's step term moves its
  advantages, and how far GiGPO is from GRPO (`agentrl.study.signal.advantage_comparison`);
- `part_start_step_share`: on the batch, the share of part-start turns (the turn that chooses a part's
  answer) whose GiGPO step term is not 0: whether step-level credit reaches that turn at all
  (`agentrl.study.signal.step_term_reach`);
- `zero_variance_groups`: on the batch, the share of groups whose returns are all equal.

What this is: the spec and its checks, the pure measures and verdict, the runner (one record per variant
under `results/runs/`, rewritten as each part finishes, so an interrupted go/no-go resumes) and the report
(`results/summary.json`, `results/table.md`, a page's `<!-- study:NAME -->` block). What this is not: the
comparison study (`agentrl.study.spec`), or the measures themselves (`agentrl.study.signal`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentrl.errors import ConfigError
from agentrl.study.runner import Layout, read_record, write_record
from agentrl.typed import build

KIND = "gonogo"
RULES = ("criteria", "variant")
ACROSS = ("any", "all")


@dataclass(frozen=True)
class Variant:
    """One thing measured: the run config under `overrides`; with `train_env_steps` > 0, the model that
    run config trains to that many env steps (seed `train_seed`) instead of its starting model. With
    `evaluate` false only its batch is played (no held-out evaluation: criteria on the evaluations are then
    not its to meet, e.g. a checkpoint measured for signal only). `evaluations_from` ("STUDY/VARIANT"):
    take the held-out evaluations from another go/no-go's record instead of playing them again, allowed
    only when that variant is the same model on the same task and held-out set at the same decodings
    (seeded evaluations repeat to the last digit: go/no-gos 7 and 8); the record names where they came
    from."""

    name: str
    overrides: tuple[str, ...] = ()
    train_env_steps: int = 0
    train_seed: int = 0
    evaluate: bool = True
    evaluations_from: str = ""


@dataclass(frozen=True)
class Criterion:
    """A named measure and its bound: `at_least` (>=), `at_most` (<=) or `below` (<), one or two of them,
    checked on the variants in `scope` (empty: every variant); it holds when it holds on `across` of them
    ("any" or "all"). (Not `on`: YAML 1.1 reads that key as true.)"""

    name: str
    measure: str
    at_least: float | None = None
    at_most: float | None = None
    below: float | None = None
    scope: tuple[str, ...] = ()
    across: str = "any"


@dataclass(frozen=True)
class GoNoGoSpec:
    """What a go/no-go measures and what it must find (module docstring). `batch_tasks`: train tasks in the
    base batch (0: the run config's `train.tasks_per_step`), each played `train.group_size` times at the
    training temperature. `gigpo_options`: `key=value` options of the GiGPO the batch's comparison runs
    (e.g. gamma=0.5: the options the comparison's GiGPO arm will run with; empty: GiGPO's defaults)."""

    kind: str
    task: str
    variants: tuple[Variant, ...]
    criteria: tuple[Criterion, ...]
    overrides: tuple[str, ...] = ()
    eval_tasks: int = 48
    decodings: tuple[float, ...] = ()
    batch: bool = True
    batch_tasks: int = 0
    gigpo_options: tuple[str, ...] = ()
    rule: str = "criteria"
    title: str = ""


def spec_kind(path: Path) -> str:
    """The `kind` a study file declares ("comparison" when it declares none)."""
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
    except yaml.YAMLError:
        return "comparison"
    return str(data.get("kind", "comparison")) if isinstance(data, dict) else "comparison"


def load_gonogo(path: Path) -> GoNoGoSpec:
    """The go/no-go file at `path`, typed and checked (`ConfigError` naming the fix)."""
    from agentrl.study.spec import study_mapping

    data = study_mapping(path, {"variants": Variant, "criteria": Criterion})
    spec = build(GoNoGoSpec, data, "study")
    check_gonogo(spec)
    return spec


def check_gonogo(spec: GoNoGoSpec) -> None:
    names = [variant.name for variant in spec.variants]
    if not names:
        raise ConfigError("study.variants is empty: name what to measure, e.g. {name: base}")
    if len(set(names)) != len(names):
        raise ConfigError(f"study.variants: names must be distinct, got {names}")
    gigpo_options(spec.gigpo_options)
    for variant in spec.variants:
        study, sep, other = variant.evaluations_from.partition("/")
        if variant.evaluations_from and not (sep and study and other and variant.evaluate):
            raise ConfigError(
                f"variant {variant.name!r}: evaluations_from={variant.evaluations_from!r} must be "
                "STUDY/VARIANT "
                "(e.g. calc-chain-s4m-gonogo8/base) on a variant that is evaluated"
            )
    if spec.rule not in RULES:
        raise ConfigError(f"study.rule={spec.rule!r} is unknown; use one of {', '.join(RULES)}")
    if not spec.criteria:
        raise ConfigError("study.criteria is empty: name what the go/no-go must find before it runs")
    for criterion in spec.criteria:
        if criterion.measure not in MEASURES:
            raise ConfigError(
                f"criterion {criterion.name!r}: measure {criterion.measure!r} is unknown; use one of "
                f"{', '.join(MEASURES)}"
            )
        bounds = [criterion.at_least, criterion.at_most, criterion.below]
        if all(bound is None for bound in bounds):
            raise ConfigError(f"criterion {criterion.name!r} has no bound: give at_least, at_most or below")
        if any(bound is not None and not isinstance(bound, int | float) for bound in bounds):
            raise ConfigError(f"criterion {criterion.name!r}: bounds must be numbers")
        unknown = [name for name in criterion.scope if name not in names]
        if unknown:
            raise ConfigError(
                f"criterion {criterion.name!r} is on {unknown}, not variants of this study ({names})"
            )
        if criterion.across not in ACROSS:
            raise ConfigError(f"criterion {criterion.name!r}: across={criterion.across!r}; use any or all")
        needs = MEASURES[criterion.measure][1]
        blind = [
            v.name
            for v in spec.variants
            if not v.evaluate and (not criterion.scope or v.name in criterion.scope)
        ]
        if needs == "decodings" and blind:
            raise ConfigError(
                f"criterion {criterion.name!r} reads evaluations, but {blind} are not evaluated: give it a "
                "scope without them"
            )
        if needs == "batch" and not spec.batch:
            raise ConfigError(f"criterion {criterion.name!r} reads the batch: set study.batch to true")
        if needs == "decodings" and not spec.decodings:
            raise ConfigError(f"criterion {criterion.name!r} reads evaluations: list study.decodings")


# ---- measures and the verdict (pure) ---------------------------------------------------------------------


def best_evaluation(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The evaluation with the highest per-part success (the lower temperature on a tie)."""
    evaluations = record.get("evaluations") or []
    if not evaluations:
        return None
    return max(evaluations, key=lambda e: (e["per_part_success"], -e["temperature"]))


def best_per_part_success(record: Mapping[str, Any]) -> float | None:
    best = best_evaluation(record)
    return None if best is None else float(best["per_part_success"])


def part_spread(record: Mapping[str, Any]) -> float | None:
    best = best_evaluation(record)
    parts = [] if best is None else list(best.get("by_part_index") or [])
    return max((abs(value - parts[0]) for value in parts), default=None) if parts else None


def batch_value(*keys: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(record: Mapping[str, Any]) -> float | None:
        value: Any = record.get("batch")
        for key in keys:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
        return float(value)

    return read


MEASURES: dict[str, tuple[Callable[[Mapping[str, Any]], float | None], str]] = {
    "best_per_part_success": (best_per_part_success, "decodings"),
    "part_spread": (part_spread, "decodings"),
    "later_part_signal_share": (batch_value("part_start_signal", "share_with_signal"), "batch"),
    "cosine_gigpo_vs_episode_term": (batch_value("gigpo_episode_term_vs_gigpo", "cosine"), "batch"),
    "cosine_grpo_vs_gigpo": (batch_value("grpo_vs_gigpo", "cosine"), "batch"),
    "part_start_step_share": (batch_value("part_start_step_term", "share"), "batch"),
    "zero_variance_groups": (batch_value("zero_variance_groups"), "batch"),
}
"""Each measure's reader and what it reads ("batch" or "decodings")."""


def holds(criterion: Criterion, value: float | None) -> bool:
    """Whether `value` meets every bound of `criterion` (a value not measured, or NaN, does not)."""
    if value is None or math.isnan(value):
        return False
    return (
        (criterion.at_least is None or value >= criterion.at_least)
        and (criterion.at_most is None or value <= criterion.at_most)
        and (criterion.below is None or value < criterion.below)
    )


def bound_text(criterion: Criterion) -> str:
    parts = []
    if criterion.at_least is not None:
        parts.append(f">= {criterion.at_least:g}")
    if criterion.at_most is not None:
        parts.append(f"<= {criterion.at_most:g}")
    if criterion.below is not None:
        parts.append(f"< {criterion.below:g}")
    return " and ".join(parts)


def applies(criterion: Criterion, variant: str) -> bool:
    return not criterion.scope or variant in criterion.scope


def verdict(spec: GoNoGoSpec, records: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """Each variant's measures and criteria, each criterion's outcome and the go/no-go (pure: records in, the
    verdict out). A variant not measured yet meets nothing and is listed."""
    variants: dict[str, dict[str, Any]] = {}
    for variant in spec.variants:
        record = records.get(variant.name) or {}
        measures = {name: reader(record) for name, (reader, _) in MEASURES.items()}
        done = bool(record.get("done"))
        checked: list[dict[str, Any]] = [
            {
                "name": criterion.name,
                "measure": criterion.measure,
                "value": measures[criterion.measure],
                "bound": bound_text(criterion),
                "holds": done and holds(criterion, measures[criterion.measure]),
            }
            for criterion in spec.criteria
            if applies(criterion, variant.name)
        ]
        variants[variant.name] = {
            "done": done,
            "measures": measures,
            "criteria": checked,
            "passes": done and all(item["holds"] for item in checked),
        }
    criteria = []
    for criterion in spec.criteria:
        found = [
            item["holds"]
            for name, measured in variants.items()
            for item in measured["criteria"]
            if item["name"] == criterion.name and applies(criterion, name)
        ]
        met = any(found) if criterion.across == "any" else bool(found) and all(found)
        scope = ", ".join(criterion.scope) if criterion.scope else "every variant"
        pending = [name for name in variants if applies(criterion, name) and not variants[name]["done"]]
        decided = met or not pending or (criterion.across == "all" and not all(found))
        criteria.append(
            {
                "name": criterion.name,
                "across": criterion.across,
                "scope": scope,
                "holds": met,
                "decided": decided,
            }
        )
    passing = [name for name, found in variants.items() if found["passes"]]
    complete = all(found["done"] for found in variants.values())
    if spec.rule == "variant":
        go = bool(passing)
    else:
        go = complete and all(item["holds"] for item in criteria)
    return {
        "rule": spec.rule,
        "variants": variants,
        "criteria": criteria,
        "passing": passing,
        "complete": complete,
        "go": go,
    }


def settled(spec: GoNoGoSpec, records: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """Under `rule: criteria`, the criteria that can no longer hold whatever the variants not yet measured
    give (pure): one that failed on every variant it is on when none is left to measure, or, across "all",
    on any one of them. Measuring more cannot make the go/no-go a go, so `run` stops and the variants left
    are reported as not measured. [] when nothing is settled (and always under `rule: variant`)."""
    if spec.rule != "criteria":
        return []
    found = verdict(spec, records)["variants"]
    failed = []
    for criterion in spec.criteria:
        scope = [name for name in found if applies(criterion, name)]
        outcomes = [
            item["holds"] for name in scope if found[name]["done"] for item in found[name]["criteria"]
            if item["name"] == criterion.name
        ]  # fmt: skip
        left = [name for name in scope if not found[name]["done"]]
        if (criterion.across == "all" and not all(outcomes)) or (not left and not any(outcomes)):
            failed.append(criterion.name)
    return failed


def table(summary: Mapping[str, Any]) -> str:
    """The Markdown a page includes: one row per variant with every measure a criterion reads, one line per
    criterion and variant, each criterion's outcome and the verdict."""
    names = list(
        dict.fromkeys(item["measure"] for found in summary["variants"].values() for item in found["criteria"])
    )
    rows = [f"| variant | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    for variant, found in summary["variants"].items():
        shown = [fmt(found["measures"][name]) for name in names]
        rows.append(f"| {variant}{'' if found['done'] else ' (not measured)'} | {' | '.join(shown)} |")
    lines = [*rows, ""]
    for variant, found in summary["variants"].items():
        for item in found["criteria"]:
            mark = "holds" if item["holds"] else "fails"
            lines.append(
                f"- {variant}, {item['name']}: {item['measure']} {fmt(item['value'])} {item['bound']}: {mark}"
            )
    lines.append("")
    if summary["rule"] == "variant":
        which = ", ".join(summary["passing"]) or "none"
        reason = f"rule: a variant passes every criterion; passing: {which}"
    else:
        failed = [item["name"] for item in summary["criteria"] if not item["holds"] and item["decided"]]
        undecided = [item["name"] for item in summary["criteria"] if not item["decided"]]
        reason = "rule: every criterion holds; " + (
            f"failed: {', '.join(failed)}" if failed else "none failed"
        )
        if undecided:
            reason += f"; not decided (variants not measured): {', '.join(undecided)}"
    lines.append(f"**{'GO' if summary['go'] else 'NO-GO'}** ({reason})")
    return "\n".join(lines)


def fmt(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


# ---- plan, run, status, report ---------------------------------------------------------------------------


def plan(layout: Layout) -> dict[str, Any]:
    from agentrl.study.spec import spec_hash

    spec = load_gonogo(layout.spec)
    planned = {
        "study": layout.name,
        "kind": KIND,
        "spec_sha256": spec_hash(layout.spec),
        "runs": [variant.name for variant in spec.variants],
        "estimate_s": None,
    }
    layout.plan.write_text(json.dumps(planned, indent=1) + "\n")
    return planned


def run(layout: Layout, log: Callable[[str], None] = print) -> None:
    """Every variant not yet measured, one after another; each record rewritten as each part finishes."""
    from agentrl.study.runner import check_planned

    spec = check_planned(layout, load_gonogo)
    for variant in spec.variants:
        record = read_record(layout, variant.name) or {
            "variant": variant.name,
            "evaluations": [],
            "done": False,
        }
        if record.get("done"):
            continue
        decided = settled(spec, {v.name: read_record(layout, v.name) for v in spec.variants})
        if decided:
            log(f"go/no-go {layout.name}: no-go settled by {', '.join(decided)}; {variant.name} not measured")
            continue
        log(f"go/no-go {layout.name}: {variant.name}")
        measure_variant(spec, layout, variant, record, log)


def variant_overrides(spec: GoNoGoSpec, layout: Layout, variant: Variant, name: str) -> list[str]:
    return [
        f"name={name}",
        f"runs_dir={layout.train_runs}",
        f"store.url=sqlite:///{(layout.train_runs / 'store.db').resolve()}",
        *spec.overrides,
        *variant.overrides,
    ]


def measure_variant(
    spec: GoNoGoSpec, layout: Layout, variant: Variant, record: dict[str, Any], log: Callable[[str], None]
) -> None:
    import asyncio

    from agentrl.config import load_config

    started = time.perf_counter() - float(record.get("wall_s", 0.0))
    model = trained_model(spec, layout, variant, log) if variant.train_env_steps > 0 else None
    name = f"{layout.name}-{variant.name}-measure"
    overrides = [*variant_overrides(spec, layout, variant, name), *([f"model.name={model}"] if model else [])]
    config = load_config(spec.task, overrides)
    done_t = {float(item["temperature"]) for item in record["evaluations"]}

    def keep(part: str, value: Any) -> None:
        if part == "evaluation":
            record["evaluations"].append(value)
        else:
            record["batch"] = value
        record["wall_s"] = time.perf_counter() - started
        write_record(layout, variant.name, record)

    if variant.evaluations_from and not record["evaluations"]:
        record["evaluations"] = borrowed_evaluations(spec, layout, variant)
        record["evaluations_from"] = variant.evaluations_from
        write_record(layout, variant.name, record)
        done_t = {float(item["temperature"]) for item in record["evaluations"]}
        log(f"  {variant.name}: evaluations taken from {variant.evaluations_from}")
    todo = [t for t in spec.decodings if float(t) not in done_t] if variant.evaluate else []
    batch = spec.batch and "batch" not in record
    options = gigpo_options(spec.gigpo_options)
    asyncio.run(play(config, todo, spec.eval_tasks, batch, spec.batch_tasks, keep, options))
    record.update({"done": True, "model": str(model) if model else "", "overrides": overrides})
    record["wall_s"] = time.perf_counter() - started
    write_record(layout, variant.name, record)
    log(f"  {variant.name}: {json.dumps({k: v for k, v in verdict_inputs(record).items()})}")


def borrowed_evaluations(spec: GoNoGoSpec, layout: Layout, variant: Variant) -> list[dict[str, Any]]:
    """`variant`'s evaluations from the record `variant.evaluations_from` names, after checking that it is
    the same model on the same held-out set (`ConfigError` naming what differs)."""
    study, _, name = variant.evaluations_from.partition("/")
    other_layout = Layout(layout.root.parent / study)
    if not other_layout.spec.is_file():
        raise ConfigError(f"variant {variant.name!r}: evaluations_from names {study!r}, not a study here")
    other = load_gonogo(other_layout.spec)
    source = next((v for v in other.variants if v.name == name), None)
    if source is None:
        raise ConfigError(f"variant {variant.name!r}: {study} has no variant {name!r}")
    mine = (spec.task, spec.overrides, variant.overrides, variant.train_env_steps, variant.train_seed)
    theirs = (other.task, other.overrides, source.overrides, source.train_env_steps, source.train_seed)
    missing = [t for t in spec.decodings if float(t) not in {float(d) for d in other.decodings}]
    if mine != theirs or spec.eval_tasks != other.eval_tasks or missing:
        raise ConfigError(
            f"variant {variant.name!r}: {variant.evaluations_from} is another measurement (task, overrides, "
            f"training, eval_tasks or decodings differ: {mine}, {spec.eval_tasks}, missing {missing}); "
            "evaluate it here instead"
        )
    record = read_record(other_layout, name) or {}
    wanted = {float(t) for t in spec.decodings}
    found = [e for e in record.get("evaluations", []) if float(e["temperature"]) in wanted]
    if len(found) != len(wanted):
        raise ConfigError(
            f"variant {variant.name!r}: {variant.evaluations_from} has not finished its evaluations"
        )
    return found


def gigpo_options(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` GiGPO options as the estimator takes them (values read as YAML: 0.5 is a float),
    checked by building GiGPO's config (an unknown option is a `ConfigError` naming the valid ones)."""
    from agentrl.credit import make_config

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"study.gigpo_options: {item!r} is not key=value (e.g. gamma=0.5)")
        options[key.strip()] = yaml.safe_load(value)
    make_config("gigpo", **options)
    return options


def verdict_inputs(record: Mapping[str, Any]) -> dict[str, float | None]:
    return {name: reader(record) for name, (reader, _) in MEASURES.items()}


def trained_model(spec: GoNoGoSpec, layout: Layout, variant: Variant, log: Callable[[str], None]) -> Path:
    """The final weights of the variant's run trained to `train_env_steps` (resumed from its checkpoint when
    an earlier attempt was interrupted; reused when it finished)."""
    import asyncio

    from agentrl.config import load_config
    from agentrl.trainer import checkpoint
    from agentrl.trainer.train import train

    name = f"{layout.name}-{variant.name}-train"
    run_dir = layout.train_runs / name
    if (run_dir / "final").is_dir():
        return run_dir / "final"
    newest = checkpoint.latest(run_dir)
    overrides = [
        *variant_overrides(spec, layout, variant, name),
        f"train.seed={variant.train_seed}",
        f"train.env_step_budget={variant.train_env_steps}",
        "train.steps=1000000",
        "trainer.checkpoint_every=1",
        "eval.before=false",
        "eval.after=false",
        *([f"trainer.resume={run_dir}"] if newest is not None else []),
    ]
    log(f"  training {variant.name} to {variant.train_env_steps} env steps")
    asyncio.run(train(load_config(spec.task, overrides)))
    return run_dir / "final"


async def play(
    config: Any,
    temperatures: Sequence[float],
    tasks: int,
    batch: bool,
    batch_tasks: int,
    keep: Callable[[str, Any], None],
    options: Mapping[str, Any] | None = None,
) -> None:
    """The held-out evaluations at each temperature, then the batch, in one run (one model load)."""
    from dataclasses import replace

    import torch

    from agentrl.study.signal import advantage_comparison, per_task, success_summary
    from agentrl.tasks import load_tasks
    from agentrl.trainer.run import EVAL_SEED, open_run, play_heldout, play_tasks

    parts = int(config.env.kwargs.get("parts", 1))
    heldout = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[:tasks]
    async with open_run(config, kind="eval") as ctx:
        for temperature in temperatures:
            started = time.perf_counter()
            episodes = await play_heldout(ctx, heldout, replace(config.sampling, temperature=temperature))
            rows = per_task(episodes, heldout, parts)
            wall = round(time.perf_counter() - started, 1)
            keep(
                "evaluation",
                {
                    "temperature": float(temperature),
                    **success_summary(rows),
                    "wall_s": wall,
                    "per_task": rows,
                },
            )
        if batch:
            started = time.perf_counter()
            train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
            torch.manual_seed(EVAL_SEED)
            episodes = await play_tasks(
                ctx,
                train_tasks[: batch_tasks or config.train.tasks_per_step],
                config.train.group_size,
                config.sampling,
                seed=0,
            )
            keep(
                "batch",
                {
                    "temperature": config.sampling.temperature,
                    "tasks_per_step": batch_tasks or config.train.tasks_per_step,
                    "group_size": config.train.group_size,
                    **advantage_comparison(episodes, parts, options),
                    "wall_s": round(time.perf_counter() - started, 1),
                },
            )


def status(layout: Layout) -> list[str]:
    spec = load_gonogo(layout.spec)
    lines = [f"go/no-go {layout.name}: {'planned' if layout.plan.is_file() else 'not planned'}"]
    for variant in spec.variants:
        record = read_record(layout, variant.name)
        state = "not started" if record is None else "done" if record.get("done") else "partly measured"
        lines.append(f"  {variant.name}: {state}")
    return lines


def report(layout: Layout, pages: Sequence[Path] = ()) -> dict[str, Any]:
    """Write the go/no-go's summary and table from its records, and its block in each of `pages`."""
    from agentrl.cpu import speed_flags
    from agentrl.evidence import commit_of
    from agentrl.study.report import write_block

    spec = load_gonogo(layout.spec)
    records = {variant.name: read_record(layout, variant.name) for variant in spec.variants}
    summary = {
        "title": spec.title,
        "kind": KIND,
        "task": spec.task,
        **verdict(spec, records),
        "runs": records,
        "not_finished": [name for name, record in records.items() if not (record or {}).get("done")],
        "commit": commit_of(layout.root.resolve()),
        "cpu_flags": speed_flags(),
        "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    layout.results.mkdir(parents=True, exist_ok=True)
    (layout.results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    made = table(summary)
    (layout.results / "table.md").write_text(made + "\n")
    for page in pages:
        write_block(page, layout.name, made)
    return summary
