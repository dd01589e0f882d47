"""A study's report: its summary JSON, learning-curve plot and Markdown table, from its run records alone.

What this is: `summarise` (pure: records in, the summary out: per-arm mean curves with 95% bands over seeds
and each pre-named statistic, `agentrl.study.spec.Statistic`), `table` (the Markdown a page includes),
`report` (writes `results/summary.json`, `results/table.md`, `results/curves.png` (each arm's mean with its
band), `results/seeds.png` (a panel per arm, a line per seed), `results/metrics/<run>.jsonl` (each training
run's metrics, copied from the uncommitted `runs/`) and `results/training.png` (their training reward, a
line per seed), and rewrites the
`<!-- study:NAME:start -->` ... `<!-- study:NAME:end -->` block of each page it is given, and the shorter
`<!-- study:NAME:headline:start -->` block, `headline`, of each README-like page). Every run counts:
a collapsed run is in every mean and band, and a run not finished yet is listed as such, never left out
silently (the summary says how many records each number rests on). A record converted from a file that
never counted env steps (the calc demo's) has `env_steps` None: the table says "not recorded" and the plots
leave that point out.

What this is not: the runner (`agentrl.study.runner`), or a judge of which statistic matters: the study file
named them before it ran.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.evidence import commit_of
from agentrl.study.runner import BASE, Layout, evaluation_key, planned_runs, precision_text, read_record
from agentrl.study.spec import Statistic, StudySpec, load_spec
from agentrl.study.stats import band, censored_steps, paired_band, sign_test_p, steps_to_threshold


def evaluations_on(
    record: Mapping[str, Any] | None, held_out: str
) -> list[tuple[float, int, int, Mapping[str, Any]]]:
    """(temperature, sampler seed, samples per task, the entry) of each of `record`'s final evaluations on
    held-out set `held_out` ("" the main one)."""
    return [
        (temperature, seed, samples, point)
        for point in (record or {}).get("decodings", ())
        for name, temperature, seed, samples in [evaluation_key(point)]
        if name == held_out
    ]


def base_values(base: Mapping[str, Any] | None, held_out: str = "") -> dict[float, float]:
    """The base's value at each temperature it was evaluated at on held-out set `held_out` ("" the main
    one): a sampled decoding's mean over the sampler seeds it was evaluated at; pass@k evaluations left
    out."""
    found: dict[float, list[float]] = {}
    for temperature, _, samples, point in evaluations_on(base, held_out):
        if samples == 1:
            found.setdefault(temperature, []).append(float(point["value"]))
    return {temperature: sum(values) / len(values) for temperature, values in found.items()}


def pass_at(base: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The base's pass@k on the main set (k, its temperature and value); None when it was not evaluated."""
    for temperature, _, samples, point in evaluations_on(base, ""):
        if samples > 1:
            return {"k": float(samples), "temperature": temperature, "value": float(point["value"])}
    return None


def best_decoding(values: Mapping[float, float]) -> tuple[float, float] | None:
    """(temperature, value) of the best of `values`; the lower temperature on a tie; None when empty."""
    if not values:
        return None
    temperature = max(sorted(values), key=lambda t: values[t])
    return temperature, values[temperature]


def mean_curve(start: float, runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per evaluation point (the base at 0 first): the mean value over the runs with its band, and the mean
    env steps the runs had actually played there (None when a run's record did not count them)."""
    points: list[dict[str, Any]] = [
        {"env_steps": 0.0, "mean": start, "low": start, "high": start, "n": float(len(runs))}
    ]
    for index in range(max((len(run["points"]) for run in runs), default=0)):
        reached = [run for run in runs if len(run["points"]) > index]  # a play that ended early stops here
        values = [float(run["points"][index]["value"]) for run in reached]
        mean, low, high = band(values)
        played = [run["points"][index]["env_steps"] for run in reached]
        steps = None if None in played else sum(float(value) for value in played) / len(played)
        points.append({"env_steps": steps, "mean": mean, "low": low, "high": high, "n": float(len(values))})
    return points


def final_entry(
    run: Mapping[str, Any] | None, temperature: float | None, held_out: str = ""
) -> Mapping[str, Any] | None:
    """A run's final evaluation at `temperature` on held-out set `held_out` ("" the main one: its decodings,
    else its last point when that was evaluated at it; a named set: its decoding there, None its first), at
    sampler seed 0 and one episode per task; None when it was not evaluated there."""
    for found, seed, samples, point in evaluations_on(run, held_out):
        wanted = found == temperature or (temperature is None and bool(held_out))
        if seed == 0 and samples == 1 and wanted:
            return point
    if held_out or run is None:
        return None
    last = run["points"][-1] if run.get("points") else None
    if last is not None and (temperature is None or float(last["temperature"]) == temperature):
        return last
    return None


def final_at(run: Mapping[str, Any], temperature: float | None, held_out: str = "") -> float | None:
    """A run's final value at `temperature` on held-out set `held_out` (`final_entry`); None when it was not
    evaluated there."""
    found = final_entry(run, temperature, held_out)
    return None if found is None else float(found["value"])


def scored_tasks(entry: Mapping[str, Any] | None) -> dict[str, float]:
    """An evaluation's per-task rewards, infrastructure failures left out ({} without per-task outcomes)."""
    return {
        task["task_id"]: float(task["reward"])
        for task in (entry or {}).get("per_task", ())
        if task["success"] is not None
    }


def base_decoding(
    base: Mapping[str, Any] | None, at: str, held_out: str = "", temperature: float | None = None
) -> tuple[float, float] | None:
    """(temperature, value) the base is compared at on held-out set `held_out`: `temperature` when given,
    else its best decoding ("best") or the run config's evaluation temperature, the first it was evaluated at
    ("training"); None before it was evaluated there."""
    values = base_values(base, held_out)
    if temperature is not None:
        return (float(temperature), values[float(temperature)]) if float(temperature) in values else None
    if at == "best":
        return best_decoding(values)
    return next(iter(values.items()), None)


def statistic(
    spec: StudySpec, item: Statistic, base: Mapping[str, Any] | None, runs: Mapping[str, list[Any]]
) -> dict[str, Any]:
    """One pre-named statistic from the finished runs (module docstring)."""
    mine = runs.get(item.arm, [])
    out: dict[str, Any] = {"kind": item.kind, "arm": item.arm, "runs": len(mine)}
    if item.set:
        out["set"] = item.set
    if item.kind == "vs_base" and item.temperature is not None:
        out["temperature"] = item.temperature  # compared there, not at the base's best decoding
    if item.kind == "vs_base":
        compared = base_decoding(base, item.at, item.set, item.temperature)
        if compared is None or not mine:
            return {
                **out,
                "at": item.at,
                "result": None,
                "why": "the base or the arm has not been evaluated yet",
            }
        finals = [final_at(run, compared[0], item.set) for run in mine]
        values = [value for value in finals if value is not None]
        missing = [run.get("run", "") for run, value in zip(mine, finals, strict=True) if value is None]
        mean, low, high = band(values) if values else (float("nan"),) * 3
        return {
            **out,
            "at": item.at,
            "base_decoding": {"temperature": compared[0], "value": compared[1]},
            "seeds": [run["seed"] for run, value in zip(mine, finals, strict=True) if value is not None],
            "values": values,
            "mean": mean,
            "band": [low, high],
            "above_base": bool(values) and low > compared[1],
            "not_evaluated_there": missing,
            **worst_case(values, len(missing), compared[1]),
        }
    if item.kind == "change":
        return {**out, "at": item.at, "temperature": item.temperature, **change(item, base, mine)}
    theirs = runs.get(item.other, [])
    if item.kind == "paired":
        seeds = sorted({run["seed"] for run in mine} & {run["seed"] for run in theirs})
        first = [final_at(run_of(mine, seed), item.temperature, item.set) for seed in seeds]
        second = [final_at(run_of(theirs, seed), item.temperature, item.set) for seed in seeds]
        pairs = [(a, b) for a, b in zip(first, second, strict=True) if a is not None and b is not None]
        if not pairs:
            return {**out, "other": item.other, "result": None, "why": "no seed has finished both arms"}
        mean, low, high = paired_band([a for a, _ in pairs], [b for _, b in pairs])
        return {**out, "other": item.other, "seeds": seeds, "difference": mean, "band": [low, high]}
    if item.kind == "collapse_rate":
        return {**out, **collapse_rate(mine, base_decoding(base, "best", item.set), item)}
    start = base_values(base)
    start_value = next(iter(start.values()), 0.0) if start else 0.0
    if item.kind == "steps_to_final":
        ends = [float(run["points"][-1]["value"]) for run in theirs if run.get("points")]
        if not ends or not mine:
            return {**out, "other": item.other, "result": None, "why": "no run of either arm has finished"}
        threshold = sum(ends) / len(ends)
        found = threshold_steps(spec, mine, start_value, threshold)
        reached = sum(value is not None for value in found["per_seed"].values())
        return {
            **out,
            "other": item.other,
            "threshold": threshold,
            item.arm: found,
            "reached_share": reached / len(found["per_seed"]),
        }
    result = {
        **out,
        "threshold": item.threshold,
        item.arm: threshold_steps(spec, mine, start_value, item.threshold),
    }
    if item.other:
        result[item.other] = threshold_steps(spec, theirs, start_value, item.threshold)
    return result


def change(
    item: Statistic, base: Mapping[str, Any] | None, runs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Per run, its final value minus the base's where `vs_base` would compare them, and the tasks it gained
    and lost against the base's evaluation there (sampler seed 0) with their exact sign-test p; the 95% band
    over seeds of the changes, a run never evaluated there named and counted at 0 in `worst_case`."""
    compared = base_decoding(base, item.at, item.set, item.temperature)
    if compared is None or not runs:
        return {"result": None, "why": "the base or the arm has not been evaluated yet"}
    base_tasks = scored_tasks(final_entry(base, compared[0], item.set))
    found = [run_change(run, compared, base_tasks, item.set) for run in runs]
    measured = [row for row in found if row is not None]
    missing = [run.get("run", "") for run, row in zip(runs, found, strict=True) if row is None]
    changes = [row["change"] for row in measured]
    mean, low, high = band(changes) if changes else (float("nan"),) * 3
    out: dict[str, Any] = {
        "base_decoding": {"temperature": compared[0], "value": compared[1]},
        "per_run": measured,
        "seeds": [row["seed"] for row in measured],
        "changes": changes,
        "mean": mean,
        "band": [low, high],
        "above_zero": bool(changes) and low > 0,
        "not_evaluated_there": missing,
    }
    if missing:
        worst = band([*changes, *([-compared[1]] * len(missing))])
        out["worst_case"] = {"mean": worst[0], "band": [worst[1], worst[2]], "above_zero": worst[1] > 0}
    return out


def run_change(
    run: Mapping[str, Any], compared: tuple[float, float], base_tasks: Mapping[str, float], held_out: str
) -> dict[str, Any] | None:
    """One run's row of a `change` statistic (pure); None when it was not evaluated at `compared`'s
    decoding."""
    entry = final_entry(run, compared[0], held_out)
    if entry is None:
        return None
    mine = scored_tasks(entry)
    gained, lost = gained_lost(base_tasks, mine)
    value = float(entry["value"])
    return {
        "run": run.get("run", ""),
        "seed": run["seed"],
        "value": value,
        "change": value - compared[1],
        "tasks": len(base_tasks.keys() & mine.keys()),
        "gained": gained,
        "lost": lost,
        "p": sign_test_p(gained, lost),
    }


def collapse_rate(
    runs: Sequence[Mapping[str, Any]], compared: tuple[float, float] | None, item: Statistic
) -> dict[str, Any]:
    """The share of `runs` whose final value (at `item.temperature` on `item.set`) is below the base's best
    decoding `compared` there; a run never evaluated there counts as collapsed (at the metric's floor)."""
    if compared is None or not runs:
        return {"result": None, "why": "the base or the arm has not been evaluated yet"}
    finals = {str(run.get("run", "")): final_at(run, item.temperature, item.set) for run in runs}
    below = sorted(name for name, value in finals.items() if value is None or value < compared[1])
    return {
        "base_decoding": {"temperature": compared[0], "value": compared[1]},
        "collapsed": below,
        "rate": len(below) / len(finals),
    }


def worst_case(values: Sequence[float], missing: int, base: float) -> dict[str, Any]:
    """With runs never evaluated at the compared decoding: the band if each of them scored 0 there (the
    metric's floor), so that every started run counts in one number; {} when none is missing."""
    if not missing:
        return {}
    mean, low, high = band([*values, *([0.0] * missing)])
    return {"worst_case": {"mean": mean, "band": [low, high], "above_base": low > base}}


def run_of(runs: Sequence[Mapping[str, Any]], seed: int) -> Mapping[str, Any]:
    return next(run for run in runs if run["seed"] == seed)


def threshold_steps(
    spec: StudySpec, runs: Sequence[Mapping[str, Any]], start: float, threshold: float
) -> dict[str, Any]:
    """Per seed, the env steps at which its curve (the base at 0 first) reaches `threshold`, censored at the
    budget when it never does."""
    per_seed = {
        str(run["seed"]): steps_to_threshold(
            [(0.0, start), *((float(p["env_steps"]), float(p["value"])) for p in run["points"])], threshold
        )
        for run in runs
    }
    return {"per_seed": per_seed, **censored_steps(list(per_seed.values()), float(spec.env_step_budget))}


def summarise(spec: StudySpec, records: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The study's summary from its run records (`records[run]`, None for a run not started)."""
    base = records.get(BASE)
    start = base_values(base)
    train_t = next(iter(start), None)
    runs: dict[str, list[Any]] = {arm.name: [] for arm in spec.arms}
    for planned in planned_runs(spec):
        record = records.get(planned.name)
        if planned.arm is not None and record is not None and record.get("done"):
            runs[planned.arm].append(record)
    curves = {
        arm: mean_curve(start.get(train_t, 0.0) if train_t is not None else 0.0, found)
        for arm, found in runs.items()
    }
    return {
        "title": spec.title,
        "task": spec.task,
        "metric": spec.metric,
        "env_step_budget": spec.env_step_budget,
        "seeds": list(spec.seeds),
        "base": {
            "decodings": {str(t): v for t, v in start.items()},
            "best": best_decoding(start),
            **base_extras(spec, base),
        },
        "runs": {name: record for name, record in records.items()},
        "finished": {arm: len(found) for arm, found in runs.items()},
        "not_finished": [
            run.name for run in planned_runs(spec) if not (records.get(run.name) or {}).get("done")
        ],
        "curves": curves,
        "statistics": [statistic(spec, item, base, runs) for item in spec.statistics],
        "code_commits": code_commits(records),
        "machines": machines(records),
    }


def code_commits(records: Mapping[str, Mapping[str, Any] | None]) -> dict[str, list[str]]:
    """Each code commit the study's runs were played on, with the runs played (wholly or partly) on it; a run
    recorded before runs kept their commit is under "unrecorded"; {} when no run kept one (an older study's
    summary and table are unchanged)."""
    if not any(record and record.get("commits") for record in records.values()):
        return {}
    found: dict[str, list[str]] = {}
    for name, record in records.items():
        if record is None:
            continue
        for commit in record.get("commits") or ["unrecorded"]:
            found.setdefault(commit, []).append(name)
    return found


def machines(records: Mapping[str, Mapping[str, Any] | None]) -> dict[str, list[str]]:
    """Each CPU and precision the study's runs were played on (`runner.machine`), with the runs played on it;
    {} when no run kept one (an older study's summary and table are unchanged)."""
    found: dict[str, list[str]] = {}
    for name, record in records.items():
        for entry in (record or {}).get("machines") or []:
            flags = ", ".join(entry["flags"])
            key = f"{entry['cpu']} ({flags}; {precision_text(entry)})"
            found.setdefault(key, []).append(name)
    return found


def machines_line(summary: Mapping[str, Any]) -> str:
    """The table's line on the CPUs the runs were played on, each with its runs when there are several."""
    found = summary.get("machines") or {}
    if len(found) == 1:
        return f"All runs played on one kind of CPU: {next(iter(found))}."
    return (
        "The runs span CPUs: " + "; ".join(f"{key}: {', '.join(runs)}" for key, runs in found.items()) + "."
    )


def commits_line(summary: Mapping[str, Any]) -> str:
    """The table's line on the code the runs were played on: one commit, or each commit with its runs."""
    found = summary.get("code_commits") or {}
    if len(found) == 1:
        return f"All runs played on one code commit, {next(iter(found))[:12]}."
    return (
        "The runs span code commits: "
        + "; ".join(f"{commit[:12]}: {', '.join(runs)}" for commit, runs in found.items())
        + "."
    )


def base_extras(spec: StudySpec, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """The base on each further held-out set (`StudySpec.evaluations`) and its pass@k, when the study has
    them ({} otherwise: an older study's summary is unchanged)."""
    extras: dict[str, Any] = {}
    if spec.evaluations:
        extras["sets"] = {
            item.name: {str(t): v for t, v in base_values(base, item.name).items()}
            for item in spec.evaluations
        }
    if spec.base_pass_at > 0:
        extras["pass_at"] = pass_at(base)
    return extras


def sets_table(summary: Mapping[str, Any]) -> list[str]:
    """With further held-out sets: one row per (set, temperature), a column for the base, each reference line
    and each arm (its finished runs' mean final value there with its 95% band over seeds and their number:
    every run counts, collapsed ones included); with the base's pass@k, one line after. [] without them."""
    sets = summary["base"].get("sets") or {}
    pass_k = summary["base"].get("pass_at")
    if not sets and pass_k is None:
        return []
    runs = summary["runs"]
    references = [name for name, record in runs.items() if record and record.get("demos") is not None]
    arms = list(summary.get("finished") or {})
    lines = [
        "",
        "| held-out set | T | base | " + " | ".join([*references, *arms]) + " |",
        "|---|---|---|" + "---|" * (len(references) + len(arms)),
    ]
    for name, values in sets.items():
        for temperature in sorted({float(t) for t in values} | set(run_temperatures(runs, name))):
            shown = [shown_value(final_at(runs[ref], temperature, name)) for ref in references]
            shown += [arm_cell(arm_finals(runs, arm, temperature, name)) for arm in arms]
            base = values.get(str(temperature))
            lines.append(f"| {name} | {temperature:g} | {shown_value(base)} | " + " | ".join(shown) + " |")
    if pass_k is not None:
        lines.extend(
            [
                "",
                f"Reference line: the base's pass@{pass_k['k']:g} at T={pass_k['temperature']:g} on the main "
                f"set: {pass_k['value']:.3f}.",
            ]
        )
    return lines


def shown_value(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def arm_finals(runs: Mapping[str, Any], arm: str, temperature: float, held_out: str) -> list[float]:
    """The final values of `arm`'s finished runs on held-out set `held_out` at `temperature`."""
    found = [
        final_at(record, temperature, held_out)
        for record in runs.values()
        if record and record.get("arm") == arm and record.get("done")
    ]
    return [value for value in found if value is not None]


def arm_cell(values: Sequence[float]) -> str:
    """An arm's cell: its runs' mean and 95% band with their number ("" with none, no band with one)."""
    if not values:
        return ""
    mean, low, high = band(values)
    return f"{mean:.3f}" + (f" [{low:.3f}, {high:.3f}]" if len(values) > 1 else "") + f" ({len(values)})"


def run_temperatures(runs: Mapping[str, Any], held_out: str) -> list[float]:
    """The temperatures any run was evaluated at on held-out set `held_out`."""
    return [temperature for record in runs.values() for temperature, *_ in evaluations_on(record, held_out)]


def table(summary: Mapping[str, Any]) -> str:
    """The Markdown a page includes: one row per evaluation point of each run (the base first), its value on
    the learning curve (the run config's eval temperature, the training one unless the study sets another),
    at its last point its value at the base's best decoding and the tasks that
    gained and lost against the base there; then one line per statistic."""
    base = summary["runs"].get(BASE)
    decodings = {float(t): v for t, v in summary["base"]["decodings"].items()}
    train_t = next(iter(decodings), None)
    best = summary["base"]["best"]
    best_t = None if best is None else float(best[0])
    base_tasks = per_task_at(base, best_t)
    shown_t = "" if train_t is None else f" (T={train_t:g})"
    shown_best = "" if best_t is None else f" (T={best_t:g})"
    rows = [
        f"| run | env steps | on the curve{shown_t} | at the best decoding{shown_best} "
        "| tasks gained / lost there |",
        "|---|---|---|---|---|",
    ]
    for name, record in summary["runs"].items():
        if record is None:
            rows.append(f"| {name} | | not started | | |")
        elif name == BASE:
            rows.append(f"| {name} | 0 | {value_at(decodings, train_t)} | {value_at(decodings, best_t)} | |")
        elif record.get("demos") is not None:
            rows.append(reference_row(name, record, train_t, best_t))
        else:
            rows.extend(run_rows(name, record, best_t, base_tasks))
    lines = [*rows, *sets_table(summary), ""]
    for item in summary["statistics"]:
        lines.append(f"- {statistic_line(item)}")
    if summary.get("code_commits"):
        lines.extend(["", commits_line(summary)])
    if summary.get("machines"):
        lines.extend(["", machines_line(summary)])
    return "\n".join(lines)


def reference_row(name: str, record: Mapping[str, Any], train_t: float | None, best_t: float | None) -> str:
    """A reference line's row (`StudySpec.references`): its demonstrations' env steps and its final values
    on the main set at the training temperature and at the base's best decoding."""
    shown = [final_at(record, t) if t is not None and record.get("done") else None for t in (train_t, best_t)]
    values = ["" if value is None else f"{value:.3f}" for value in shown]
    label = f"{name} (reference: SFT on {record['demos']['kept']} demonstrations)"
    if not record.get("done"):
        label += " (not finished)"
    return f"| {label} | {int(record['demos']['env_steps']):,} | {values[0]} | {values[1]} | |"


def value_at(values: Mapping[float, float], temperature: float | None) -> str:
    return "" if temperature is None or temperature not in values else f"{values[temperature]:.3f}"


def per_task_at(record: Mapping[str, Any] | None, temperature: float | None) -> dict[str, float]:
    """A record's per-task rewards in its decoding at `temperature` (infrastructure failures left out)."""
    for point in (record or {}).get("decodings", ()):
        if temperature is not None and float(point["temperature"]) == temperature:
            return scored_tasks(point)
    return {}


def gained_lost(base: Mapping[str, float], after: Mapping[str, float]) -> tuple[int, int]:
    """Tasks scored in both with a higher reward after than the base's, and with a lower one (pure)."""
    shared = base.keys() & after.keys()
    return sum(after[task] > base[task] for task in shared), sum(after[task] < base[task] for task in shared)


def run_rows(
    name: str, record: Mapping[str, Any], best_t: float | None, base_tasks: Mapping[str, float]
) -> list[str]:
    """A trained run's rows: each evaluation point, the last with its value at the best decoding."""
    points = record.get("points") or []
    label = name if record.get("done") else f"{name} (not finished)"
    if not points:
        return [f"| {label} | {steps_text(record.get('env_steps', 0))} | | | |"]
    rows = []
    for index, point in enumerate(points):
        shown, counts = "not evaluated", ""
        if index == len(points) - 1 and record.get("done"):
            mine = per_task_at(record, best_t)
            found = final_at(record, best_t)
            if found is not None:
                shown = f"{found:.3f}"
                counts = "{} / {}".format(*gained_lost(base_tasks, mine)) if mine and base_tasks else ""
        steps = steps_text(point["env_steps"])
        rows.append(f"| {label} | {steps} | {float(point['value']):.3f} | {shown} | {counts} |")
    return rows


def steps_text(value: float | None) -> str:
    """Env steps as the table shows them; "not recorded" for a record converted from a file without them."""
    return "not recorded" if value is None else f"{int(value):,}"


def statistic_line(item: Mapping[str, Any]) -> str:
    """One statistic in words."""
    if item.get("result", "") is None:
        return f"{item['kind']} {item['arm']}: not computed ({item['why']})"
    on = f" on {item['set']}" if item.get("set") else ""
    if item["kind"] == "vs_base":
        base = item["base_decoding"]
        where = "its best decoding" if item["at"] == "best" else "the training temperature"
        if item.get("temperature") is not None:
            where = "a named decoding"
        verdict = "above the base" if item["above_base"] else "not above the base"
        missing = item.get("not_evaluated_there") or []
        left_out = ""
        if missing:
            worst = item["worst_case"]
            left_out = (
                f"; {', '.join(missing)} never evaluated there: counted at 0, {worst['mean']:.3f} "
                f"[{worst['band'][0]:.3f}, {worst['band'][1]:.3f}] over {len(item['values']) + len(missing)} "
                f"runs, {'above' if worst['above_base'] else 'not above'} the base"
            )
        return (
            f"{item['arm']} vs the base{on} at {where} (T={base['temperature']:g}, {base['value']:.3f}): "
            f"{item['mean']:.3f} {band_words(item['band'], len(item['values']))} over {len(item['values'])} "
            f"runs, {verdict}{left_out}"
        )
    if item["kind"] == "change":
        return change_line(item, on)
    if item["kind"] == "paired":
        return (
            f"{item['arm']} minus {item['other']}{on}, paired by seed ({len(item['seeds'])}): "
            f"{item['difference']:+.3f} {band_words(item['band'], len(item['seeds']), '+', 'seed')}"
        )
    if item["kind"] == "collapse_rate":
        base = item["base_decoding"]
        return (
            f"{item['arm']}{on}: {len(item['collapsed'])} of {item['runs']} runs below the base's best "
            f"(T={base['temperature']:g}, {base['value']:.3f}), collapse rate {item['rate']:.2f}"
            + (f" ({', '.join(item['collapsed'])})" if item["collapsed"] else "")
        )
    if item["kind"] == "steps_to_final":
        found = item[item["arm"]]
        return (
            f"{item['arm']}: env steps to {item['other']}'s final mean ({item['threshold']:.3f}): "
            f"{found['mean_lower_bound']:.0f} ({found['censored']} censored), "
            f"{item['reached_share']:.2f} of seeds reach it"
        )
    parts = []
    for arm in (item["arm"], item.get("other")):
        if arm and arm in item:
            found = item[arm]
            parts.append(f"{arm} {found['mean_lower_bound']:.0f} ({found['censored']} censored)")
    return f"env steps to {item['threshold']:g}: " + ", ".join(parts)


def band_words(band: Sequence[float], count: int, sign: str = "", unit: str = "run") -> str:
    """A 95% band as `[low, high]`, or that there is none when it rests on one value (one `unit`: its
    width is zero there, which would read as certainty)."""
    if count < 2:
        return f"(one {unit}: no band)"
    return f"[{band[0]:{sign}.3f}, {band[1]:{sign}.3f}]"


def change_line(item: Mapping[str, Any], on: str) -> str:
    """A `change` statistic in words: the band over seeds, then each run's change, tasks gained and lost,
    and their exact sign-test p."""
    base = item["base_decoding"]
    where = f"T={base['temperature']:g} (base {base['value']:.3f})"
    if item.get("temperature") is None:
        named = {"best": "its best decoding", "training": "the training temperature"}[item["at"]]
        where = f"{named} (T={base['temperature']:g}, base {base['value']:.3f})"
    rows = item["per_run"]
    counts = sorted({row["tasks"] for row in rows})
    tasks = f"the same {counts[0]} tasks" if len(counts) == 1 else "the tasks both scored"
    low, high = item["band"]
    verdict = "above 0" if item["above_zero"] else "not above 0"
    each = "; ".join(
        f"{row['run']} {row['change']:+.3f}, {row['gained']} / {row['lost']}, p {row['p']:.3g}"
        for row in rows
    )
    line = (
        f"{item['arm']} minus the base{on} at {where}, run by run on {tasks}: {item['mean']:+.3f} "
        f"[{low:+.3f}, {high:+.3f}] over {len(rows)} runs, {verdict}; per run (change, tasks gained / lost, "
        f"exact sign-test p): {each}"
    )
    missing = item.get("not_evaluated_there") or []
    if missing:
        worst = item["worst_case"]
        line += (
            f"; {', '.join(missing)} never evaluated there: counted at 0, {worst['mean']:+.3f} "
            f"[{worst['band'][0]:+.3f}, {worst['band'][1]:+.3f}]"
        )
    return line


def plot(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: Path, title: str, ylabel: str) -> None:
    """The mean value against env steps, one line and a 95% band per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for name, curve in curves.items():
        drawn = [point for point in curve if point["env_steps"] is not None]
        left_out = len(curve) - len(drawn)
        label = name if not left_out else f"{name} ({left_out} point(s) without env steps not drawn)"
        x = [point["env_steps"] for point in drawn]
        axes.plot(x, [point["mean"] for point in drawn], marker="o", label=label)
        axes.fill_between(x, [p["low"] for p in drawn], [p["high"] for p in drawn], alpha=0.2)
    axes.set_xlabel("environment steps (assistant turns)")
    axes.set_ylabel(ylabel)
    axes.set_ylim(-0.02, 1.02)
    axes.set_title(title, fontsize=9)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def seed_lines(summary: Mapping[str, Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per arm, per run (finished or not: every run counts): its curve as (env steps, value) points, the
    base's value at the curve's temperature first (at 0 env steps); a point whose env steps were not
    recorded is left out."""
    curves = summary.get("curves") or {}
    lines: dict[str, dict[str, list[tuple[float, float]]]] = {
        arm: {} for arm in summary.get("finished") or {}
    }
    for name, record in summary["runs"].items():
        if not record or record.get("arm") not in lines or not record.get("points"):
            continue
        start = curves[record["arm"]][0]["mean"] if curves.get(record["arm"]) else 0.0
        points = [
            (float(point["env_steps"]), float(point["value"]))
            for point in record["points"]
            if point["env_steps"] is not None  # a converted record that never counted them: not drawn
        ]
        lines[record["arm"]][name] = [(0.0, float(start)), *points]
    return lines


def plot_seeds(
    lines: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
    path: Path,
    title: str,
    ylabel: str,
    unit_range: bool = True,
) -> None:
    """One panel per arm, one line per run (a seed), on one y scale for all panels (from 0 to 1 where
    `unit_range`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(lines) or ["(no arm)"]
    columns = min(len(arms), 2)
    rows = (len(arms) + columns - 1) // columns
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False, sharey=True
    )
    for index, arm in enumerate(arms):
        panel = axes[index // columns][index % columns]
        for name, curve in (lines.get(arm) or {}).items():
            panel.plot([x for x, _ in curve], [y for _, y in curve], marker="o", linewidth=1, label=name)
        panel.set_title(arm, fontsize=9)
        if unit_range:
            panel.set_ylim(-0.02, 1.02)
        panel.set_xlabel("environment steps", fontsize=8)
        panel.set_ylabel(ylabel, fontsize=8)
        if lines.get(arm):
            panel.legend(fontsize=6)
    for index in range(len(arms), rows * columns):
        axes[index // columns][index % columns].axis("off")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def copy_training_metrics(layout: Layout) -> dict[str, Path]:
    """Copy each training run's `metrics.jsonl` (an arm's seed, a reference's steps; not an evaluation's)
    from the uncommitted `runs/` into `results/metrics/<run>.jsonl`, so the figures a page quotes from a
    run's training are committed; every copy there by run name, those made on an earlier machine too (a
    fresh clone has no `runs/`)."""
    prefix = f"{layout.name}-"
    for run_dir in sorted(layout.train_runs.glob(f"{prefix}*")):
        name = run_dir.name[len(prefix) :]
        source = run_dir / "metrics.jsonl"
        if "-eval-" in name or not source.is_file():
            continue
        target = layout.results / "metrics" / f"{name}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    return {path.stem: path for path in sorted((layout.results / "metrics").glob("*.jsonl"))}


def training_lines(
    summary: Mapping[str, Any], metrics: Mapping[str, Path], key: str = "reward_mean"
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per arm, per run with a copied metrics file: `key` of each training step against the env steps
    played by its end (steps that logged neither are left out)."""
    lines: dict[str, dict[str, list[tuple[float, float]]]] = {
        arm: {} for arm in summary.get("finished") or {}
    }
    for name, record in summary["runs"].items():
        if not record or record.get("arm") not in lines or name not in metrics:
            continue
        rows = [json.loads(line) for line in metrics[name].read_text().splitlines() if line.strip()]
        lines[record["arm"]][name] = [
            (float(row["env_steps_total"]), float(row[key]))
            for row in rows
            if row.get("env_steps_total") is not None and row.get(key) is not None
        ]
    return lines


def headline(summary: Mapping[str, Any], name: str, width: int = 110) -> str:
    """The few lines a README carries for study `name`: how many runs finished, then each paired statistic
    in words (the full table, collapse rates included, lives in the page `report --page` writes)."""
    import textwrap

    finished, arms = sum(summary["finished"].values()), len(summary["finished"])
    planned = arms * len(summary["seeds"])
    lines = [f"Study `studies/{name}/`: {finished} of {planned} trained runs finished."]
    for item in summary["statistics"]:
        if item["kind"] == "paired":
            lines.append(statistic_line(item) + ("" if item.get("result", "") is None else "."))
    return "\n".join(
        textwrap.fill(line, width=width, initial_indent="- " if i else "", subsequent_indent="  ")
        for i, line in enumerate(lines)
    )


def report(layout: Layout, pages: Sequence[Path] = (), headlines: Sequence[Path] = ()) -> dict[str, Any]:
    """Write the study's summary, table and plot from its records, and its block in each of `pages`."""
    from agentrl.cpu import cpu_flags

    spec = load_spec(layout.spec)
    records = {run.name: read_record(layout, run.name) for run in planned_runs(spec)}
    summary = {
        **summarise(spec, records),
        "commit": commit_of(layout.root.resolve()),
        "cpu_flags": sorted(cpu_flags() & {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
        "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    layout.results.mkdir(parents=True, exist_ok=True)
    (layout.results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    made = table(summary)
    (layout.results / "table.md").write_text(made + "\n")
    plot(
        summary["curves"],
        layout.results / "curves.png",
        spec.title or layout.name,
        spec.metric.replace("_", " "),
    )
    plot_seeds(
        seed_lines(summary),
        layout.results / "seeds.png",
        spec.title or layout.name,
        spec.metric.replace("_", " "),
    )
    plot_seeds(
        training_lines(summary, copy_training_metrics(layout)),
        layout.results / "training.png",
        f"{spec.title or layout.name}: training reward",
        "mean training reward",
        unit_range=False,
    )
    for page in pages:
        write_block(page, layout.name, made)
    for page in headlines:
        write_block(page, layout.name, headline(summary, layout.name), kind="headline")
    return summary


def write_block(page: Path, name: str, block: str, kind: str = "") -> None:
    """Replace study `name`'s generated block in `page` (a page without the markers stops with them); kind
    "headline" the block `headline` writes."""
    from agentrl.evidence import replace_block

    start, end = markers(name, kind)
    page.write_text(replace_block(page.read_text(), block, start, end, where=str(page)))


def markers(name: str, kind: str = "") -> tuple[str, str]:
    """The comment lines a page puts around a study's generated table (kind "headline": its headline)."""
    if kind:
        option = f"--{kind} PAGE"
        return (
            f"<!-- study:{name}:{kind}:start (agentrl study report {name} {option}) -->",
            f"<!-- study:{name}:{kind}:end -->",
        )
    return f"<!-- study:{name}:start (agentrl study report {name}) -->", f"<!-- study:{name}:end -->"
