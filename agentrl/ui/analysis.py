"""Page data for the viewer's comparison pages and its credit and sampler panels: plain functions over the
store's readers that `app.py`'s handlers call.

    compare_context   /compare?run=A&run=B...   every metric of several runs overlaid, key config columns,
                                               the config diff
    heldout_context   /heldout?run_a=&step_a=&run_b=&step_b=   one held-out evaluation against another,
                                               task by task (default: a run's first against its last)
    step_credit       the step page's credit: estimator, returns as used, group summaries, anchor groups
    episode_credit    the episode page's credit: estimator and the episode's return as used
    episode_prompt    the episode page's first-prompt inputs (instructions, tools, few-shot examples)
    sampler_panel     the run page's task-sampler decisions (`task_draws`)

What this is not: a store reader (it calls `repository`) or a renderer (templates in `analysis_templates.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.agent.prompting import DEFAULT_INSTRUCTIONS, system_prompt
from agentrl.errors import ConfigError, NotFound
from agentrl.store import pages, repository
from agentrl.ui import charts, compare, credit_view, thinning, views

SAMPLER_STEPS = 20  # the run page's task-sampler panel shows the draws of the last this many steps
OPEN_ANCHOR_GROUPS = 4  # a step page with at most this many task groups shows their anchor groups unfolded


def find_run(store: repository.Store, ref: str) -> Mapping[str, Any]:
    """The run `ref` names (id, id prefix or name); NotFound otherwise."""
    try:
        return views.find_run(pages.find_runs(store, ref), ref)
    except ConfigError as exc:
        raise NotFound(str(exc)) from exc


def run_label(run: Mapping[str, Any]) -> str:
    """A run's name with the start of its id (names need not be unique)."""
    return f"{run['name']} ({str(run['id'])[:6]})"


def compare_context(store: repository.Store, refs: Sequence[str]) -> dict[str, Any]:
    """Several runs side by side: overlaid metric charts, each metric's last value, key config columns,
    the config diff."""
    runs = list({run["id"]: run for run in (find_run(store, ref) for ref in refs)}.values())
    if not runs:
        raise NotFound("no runs chosen: tick two or more runs on the runs list, then 'compare'")
    series = [
        (run_label(run), thinning.thin_series(views.metric_series(repository.load_metrics(store, run["id"]))))
        for run in runs
    ]
    return {
        "runs": [
            {**run, "label": label, **compare.key_columns(run["config"])}
            for run, (label, _) in zip(runs, series, strict=True)
        ],  # fmt: skip
        "charts": charts.overlay_charts(series),
        "last": compare.last_values([points for _, points in series]),
        "diff": compare.config_diff([run["config"] for run in runs]),
        "missing": compare.MISSING,
    }


def heldout_context(
    store: repository.Store, run_a: str, step_a: int | None, run_b: str | None, step_b: int | None
) -> dict[str, Any]:
    """Evaluation A against evaluation B, task by task (see `compare` for the pairing rules)."""
    first = find_run(store, run_a)
    second = find_run(store, run_b) if run_b else first
    side_a = evaluation(store, first, step_a, "first")
    side_b = evaluation(store, second, step_b, "last")
    pairs = compare.pair_tasks(side_a["outcomes"], side_b["outcomes"])
    return {
        "a": side_a,
        "b": side_b,
        "pairs": pairs,
        "counts": compare.paired_counts(pairs),
        "same_temperature": side_a["temperature"] == side_b["temperature"],
    }


def evaluation(
    store: repository.Store, run: Mapping[str, Any], step: int | None, default: str
) -> dict[str, Any]:
    """One side of a held-out comparison: the run, its eval steps, the chosen step (default its first or
    last), the sampling temperature and the per-task outcomes."""
    episodes = repository.load_split_episodes(store, run["id"], "eval")
    steps = compare.eval_steps(episodes)
    if not steps:
        raise NotFound(f"run {run['name']} has no held-out evaluation in this store")
    chosen = (steps[0] if default == "first" else steps[-1]) if step is None else step
    if chosen not in steps:
        raise NotFound(f"run {run['name']} evaluated at steps {steps}, not at step {chosen}")
    outcomes = compare.task_outcomes(e for e in episodes if e["step"] == chosen)
    return {
        "run": run,
        "label": run_label(run),
        "step": chosen,
        "steps": steps,
        "temperature": compare.eval_temperature(run["config"]),
        "outcomes": outcomes,
        "solved": compare.solved_count(outcomes),
    }


def step_credit(run: Mapping[str, Any], groups: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The step page's credit data over its whole task groups (whatever the filter keeps)."""
    settings = credit_view.credit_settings(run["config"])
    returns = {e["id"]: credit_view.episode_return(e, settings) for rows in groups.values() for e in rows}
    return {
        "credit": settings,
        "returns": returns,
        "summaries": credit_view.group_summaries(groups, returns),
        "open_anchors": len(groups) <= OPEN_ANCHOR_GROUPS,
        "anchor_sets": {
            group_id: credit_view.anchor_sets(rows, returns) for group_id, rows in groups.items()
        },
    }


def episode_credit(run: Mapping[str, Any], episode: Mapping[str, Any]) -> dict[str, Any]:
    """The episode page's credit data: the estimator and the episode's return as used."""
    settings = credit_view.credit_settings(run["config"])
    return {"credit": settings, "used": credit_view.episode_return(episode, settings)}


def episode_prompt(
    store: repository.Store, run: Mapping[str, Any], episode: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The episode's first-prompt inputs as the page shows them (None when the store has none): the
    instructions (the run's `rollout.instructions`, else agentrl's default), each tool and few-shot example
    as indented JSON, and the system message a chat template without native tools gets."""
    prompt_id = episode.get("prompt_id")
    inputs = None if prompt_id is None else repository.load_prompt(store, int(prompt_id))
    if inputs is None:
        return None
    given = compare.dig(run["config"], "rollout.instructions")
    instructions = None if given is compare.MISSING or not given else str(given)
    tools = list(inputs.get("tools") or [])
    return {
        "instructions": instructions or DEFAULT_INSTRUCTIONS,
        "default_instructions": instructions is None,
        "tools": [json.dumps(tool, indent=1, ensure_ascii=False) for tool in tools],
        "examples": [json.dumps(x, indent=1, ensure_ascii=False) for x in inputs.get("examples") or []],
        "system": system_prompt(tools, instructions),
    }


def sampler_panel(store: repository.Store, run_id: str, last: int = SAMPLER_STEPS) -> dict[str, Any]:
    """The task draws of the run's `last` steps that drew tasks and, per step, how many groups were drawn
    for each reason; "steps" counts every step with draws."""
    draws = repository.load_task_draws(store, run_id)
    steps = sorted({int(draw["step"]) for draw in draws})
    shown = set(steps[-last:])
    draws = [draw for draw in draws if int(draw["step"]) in shown]
    reasons = sorted({str(draw["reason"]) for draw in draws})
    per_step: dict[int, dict[str, int]] = {}
    for draw in draws:
        counts = per_step.setdefault(int(draw["step"]), dict.fromkeys(reasons, 0))
        counts[str(draw["reason"])] += 1
    return {"draws": draws, "reasons": reasons, "per_step": per_step, "steps": len(steps)}
