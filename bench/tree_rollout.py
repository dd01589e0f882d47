"""Tree rollouts against flat groups at the same group size, same tasks, same run; prints ONE JSON object and
writes it to bench/results/tree_rollout.json for maze, bench/results/tree_rollout_TASK.json for another
`--task` (`--out`).

    .venv/bin/python bench/tree_rollout.py                 # maze: 4 tasks, groups of 4, flat vs a tree at 5
    .venv/bin/python bench/tree_rollout.py --quick         # 2 tasks, groups of 4, 4 turns
    .venv/bin/python bench/tree_rollout.py --trees 5 2,4 --out -    # branch turns per tree; stdout only
    .venv/bin/python bench/tree_rollout.py --task swebench --trees 2   # swebench-local, real sandbox forks
    .venv/bin/python bench/tree_rollout.py --report bench/results/tree_rollout.json   # the markdown table

It opens the run as `agentrl train` does (`open_run`: the embedded env service, the task config's engine and
model) and plays the same step's tasks (`train.tasks_per_step` drawn for step 1, seeded sampling) once per
setting: `flat` (G independent episodes, `rollout.collect_rollouts`) and one tree per `--trees` entry
(`rollout.tree.branch_turns`, width from `train.group_size`; `agentrl/agent/tree.py`). Before each play the
engine reloads its weights, so its prefix cache starts empty and no setting reuses another's KV.

Per setting: `episodes` (leaves, infrastructure failures left out), `env_steps` (turns the env played: a
branch's copied prefix counted once, in the episode that played it), `episodes_per_1000_env_steps`,
`decoded_tokens` (completion tokens the engine sampled, copies left out) and `decoded_tokens_per_episode`,
`learning_signal_groups` (1 - `credit/zero_variance_groups`: groups whose returns are not all equal),
`success_rate`, `rollout_s`, and `update_s_per_episode`: one `ppo_update` (lr 0, the config's update with
`update.shared_prefix` on, every episode kept) over the setting's GRPO samples, divided by the episodes
(the first setting's update runs twice, the first untimed, to warm up). Per tree, against `flat`:
`episodes_per_env_step_ratio` (tree / flat),
`decoded_tokens_per_episode_ratio` (flat / tree: above 1 is fewer tokens), `update_s_per_episode_ratio`
(flat / tree). `fork_p50_ms` / `fork_p99_ms` per env kind are copied from bench/results/fork.json
(`bench/fork.py`) when it exists. Also the CPU's speed flags and the load average (2 shared cores).

What this is not: a training run (one rollout per setting, no weight change) or a statement about learning
(the credit gym, `bench/credit_gym.py --tree`, asks that). `report` renders the JSON as the markdown table
docs/tree_rollouts.md quotes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import harness

RESULTS = Path(__file__).with_name("results")
COMMON = ["rollout.seeded_sampling=true", "eval.before=false", "eval.after=false", "train.seed=0"]
DEFAULTS = ["train.tasks_per_step=4", "train.group_size=4"]
QUICK = ["train.tasks_per_step=2", "train.group_size=4", "rollout.max_turns=4"]


def episode_costs(episodes: Sequence[Any]) -> tuple[int, int]:
    """(env steps, decoded tokens) the episodes cost: a branch's copied prefix turns are its parent's, so
    they count once, in the episode that played them."""
    from agentrl.trainer.samples import copied_turns

    steps = tokens = 0
    for episode in episodes:
        own = episode.turns[copied_turns(episode) :]
        steps += len(own)
        tokens += sum(len(turn.completion_ids) for turn in own)
    return steps, tokens


def setting_figures(episodes: Sequence[Any], rollout_s: float, update_s: float) -> dict[str, Any]:
    from agentrl.credit.batch import episodes_to_batch
    from agentrl.credit.metrics import zero_variance_group_fraction

    usable = [episode for episode in episodes if not episode.is_infra_failure]
    steps, tokens = episode_costs(usable)
    groups: dict[str, int] = defaultdict(int)
    for episode in usable:
        groups[episode.group_id] += 1
    signal = 1.0 - zero_variance_group_fraction(episodes_to_batch(usable)) if usable else 0.0
    return {
        "episodes": len(usable),
        "infra_failures": len(episodes) - len(usable),
        "groups": len(groups),
        "env_steps": steps,
        "episodes_per_1000_env_steps": round(1000 * len(usable) / max(steps, 1), 1),
        "decoded_tokens": tokens,
        "decoded_tokens_per_episode": round(tokens / max(len(usable), 1), 1),
        "learning_signal_groups": round(signal, 3),
        "success_rate": round(sum(e.success for e in usable) / max(len(usable), 1), 3),
        "mean_turns": round(sum(len(e.turns) for e in usable) / max(len(usable), 1), 2),
        "rollout_s": round(rollout_s, 1),
        "update_s_per_episode": round(update_s / max(len(usable), 1), 3),
    }


def ratios(tree: dict[str, Any], flat: dict[str, Any]) -> dict[str, float]:
    """The tree against the flat group of the same run; every ratio above 1 favours the tree."""
    return {
        "episodes_per_env_step_ratio": round(
            tree["episodes_per_1000_env_steps"] / flat["episodes_per_1000_env_steps"], 3
        ),
        "decoded_tokens_per_episode_ratio": round(
            flat["decoded_tokens_per_episode"] / max(tree["decoded_tokens_per_episode"], 1e-9), 3
        ),
        "update_s_per_episode_ratio": round(
            flat["update_s_per_episode"] / max(tree["update_s_per_episode"], 1e-9), 3
        ),
    }


def time_update(ctx: Any, episodes: Sequence[Any], warm_up: bool) -> float:
    """Seconds of one shared-prefix `ppo_update` (lr 0) over the episodes' GRPO samples, after an untimed
    one when `warm_up` (the first setting's: the allocator and kernels are warm after it)."""
    from agentrl.trainer.configs import OptimConfig
    from agentrl.trainer.optim import make_optimizer
    from agentrl.trainer.run import pad_id
    from agentrl.trainer.step import compute_advantages, training_samples
    from agentrl.trainer.update import ppo_update

    config = ctx.config
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    advantages, _ = compute_advantages(usable, config)
    samples = training_samples(usable, advantages, config.rollout.max_context_tokens, keep_all=True)
    model = ctx.engine.module
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
    update = replace(config.update, shared_prefix=True)
    pad = pad_id(ctx.engine.tokenizer)
    model.train()
    seconds = []
    for _ in range(2 if warm_up else 1):
        started = time.perf_counter()
        ppo_update(model, optimizer, scheduler, samples, pad, config.loss, update)
        seconds.append(time.perf_counter() - started)
    model.eval()
    return seconds[-1]


async def measure(
    task: str, overrides: list[str], trees: list[tuple[int, ...]], work: Path
) -> dict[str, Any]:
    from agentrl.agent.rollout_config import TreeConfig
    from agentrl.agent.tree import collect_groups
    from agentrl.config import load_config
    from agentrl.tasks import load_tasks, sample_tasks
    from agentrl.trainer.run import open_run

    places = [f"runs_dir={work / 'runs'}", f"store.url=sqlite:///{work / 'store.db'}"]
    config = load_config(task, [*overrides, *places])
    split = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
    tasks = sample_tasks(split, config.train.tasks_per_step, config.train.seed, 1)
    settings: dict[str, Any] = {"flat": replace(config.rollout, tree=TreeConfig(enabled=False))}
    for turns in trees:
        name = "tree_" + "_".join(map(str, turns))
        settings[name] = replace(config.rollout, tree=TreeConfig(enabled=True, branch_turns=turns))
    figures: dict[str, Any] = {}
    async with open_run(config, kind="train") as ctx:
        for name, rollout in settings.items():
            ctx.engine.load_weights(None)  # the prefix cache starts empty
            started = time.perf_counter()
            episodes = await collect_groups(
                ctx.client, ctx.engine, config.env.id, tasks, config.train.group_size, config.sampling,
                rollout, seed=1, progress=False,
            )  # fmt: skip
            rollout_s = time.perf_counter() - started
            update_s = time_update(ctx, episodes, warm_up=name == "flat")
            figures[name] = setting_figures(episodes, rollout_s, update_s)
            if rollout.tree.enabled:
                figures[name]["branch_turns"] = list(rollout.tree.branch_turns)
                figures[name]["width"] = rollout.tree.width_for(config.train.group_size)
            print(name, json.dumps(figures[name]), file=sys.stderr, flush=True)
    for name in settings:
        if name != "flat":
            figures[name].update(ratios(figures[name], figures["flat"]))
    return {
        "settings": figures,
        "engine": config.engine.kind,
        "model": config.model.name,
        "env": config.env.id,
        "tasks_per_step": config.train.tasks_per_step,
        "group_size": config.train.group_size,
        "max_turns": config.rollout.max_turns,
        "max_new_tokens": config.sampling.max_new_tokens,
    }


def fork_latency() -> dict[str, Any]:
    """fork p50/p99 per env kind from bench/results/fork.json (bench/fork.py), or {} when absent."""
    path = RESULTS / "fork.json"
    if not path.is_file():
        return {}
    kinds = json.loads(path.read_text()).get("kinds", {})
    return {
        kind: {key: value[key] for key in ("fork_p50_ms", "fork_p99_ms", "capability", "samples")}
        for kind, value in kinds.items()
    }


def report(result: dict[str, Any]) -> str:
    """The JSON as a markdown table, one row per setting (what docs/tree_rollouts.md quotes)."""
    columns = [
        ("episodes", "episodes"),
        ("env_steps", "env steps"),
        ("episodes_per_1000_env_steps", "episodes / 1k env steps"),
        ("decoded_tokens_per_episode", "decoded tokens / episode"),
        ("learning_signal_groups", "groups with signal"),
        ("update_s_per_episode", "update s / episode"),
        ("episodes_per_env_step_ratio", "episodes_per_env_step_ratio"),
        ("decoded_tokens_per_episode_ratio", "decoded_tokens_per_episode_ratio"),
        ("update_s_per_episode_ratio", "update_s_per_episode_ratio"),
    ]
    lines = [
        "| setting | " + " | ".join(title for _, title in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for name, figures in result["settings"].items():
        cells = [str(figures.get(key, "—")) for key, _ in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    forks = result.get("fork_ms", {})
    if forks:
        lines += ["", "| env kind | fork capability | fork_p50_ms | fork_p99_ms |", "|---|---|---|---|"]
        for kind, value in forks.items():
            cells = [kind, value["capability"], value["fork_p50_ms"], value["fork_p99_ms"]]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def default_out(task: str) -> Path:
    """Where a run's JSON goes unless `--out` says: tree_rollout.json for maze (the page's first table),
    tree_rollout_TASK.json for any other task; pure."""
    return RESULTS / ("tree_rollout.json" if task == "maze" else f"tree_rollout_{task}.json")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--task", default="maze", help="the run config (./configs/TASK.yaml)")
    parser.add_argument("--quick", action="store_true", help="2 tasks, groups of 4, 4 turns")
    parser.add_argument("--trees", nargs="+", default=["5"], help="branch turns per tree setting")
    parser.add_argument("--out", help="the JSON's path ('-': stdout only; default: default_out(--task))")
    parser.add_argument("--report", type=Path, help="print the markdown table of this JSON and exit")
    parser.add_argument("overrides", nargs="*", help="run-config overrides a.b=c")
    options = parser.parse_args()
    if options.report:
        print(report(json.loads(options.report.read_text())))
        return
    overrides = [*COMMON, *(QUICK if options.quick else DEFAULTS), *options.overrides]
    trees = [tuple(int(turn) for turn in entry.split(",")) for entry in options.trees]
    os.environ["AGENTRL_DB_URL"] = ""
    with tempfile.TemporaryDirectory(prefix="agentrl-tree-bench-") as folder:
        figures = asyncio.run(measure(options.task, overrides, trees, Path(folder)))
    result = {
        "task": options.task,
        "overrides": overrides,
        **figures,
        "fork_ms": fork_latency(),
    }
    out = options.out or str(default_out(options.task))
    baseline = "flat groups of the same size on the same tasks, same run"
    harness.emit("tree_rollout", result, baseline=baseline, out=None if out == "-" else Path(out))


if __name__ == "__main__":
    main()
