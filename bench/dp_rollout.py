"""Rollout seconds per step played by rank 0 alone and by every rank (`trainer.dp_rollouts`), same work, same
run; prints ONE JSON object and writes it to bench/results/dp_rollout.json (`--out`; '-': print only; a
`--quick` run prints only unless given `--out`).

    .venv/bin/python bench/dp_rollout.py                  # calc as configs/calc.yaml plays a step, 3 repeats
    .venv/bin/python bench/dp_rollout.py --quick          # 2 tasks x 2 episodes, 2 turns, 1 repeat
    .venv/bin/python bench/dp_rollout.py --repeats 4 engine.kind=hf   # more repeats; any run-config override

It starts one torchrun job of `--nproc` ranks (default 2) on this host. Rank 0 opens the run as
`agentrl train` does (the embedded env service, its engine), the other ranks open their clients of that
service and engines of their own (`agentrl/trainer/dp_rollouts.py`). Then, per repeat, the step's tasks
(`train.tasks_per_step` drawn for step = repeat + 1, `train.group_size` episodes each, seeded sampling) are
played once in each mode, the modes' order rotating between repeats so that a drift in the machine's load
cancels:
- `rank0`: rank 0 plays every episode while the other ranks wait: `trainer.dp_rollouts=false`;
- `dp`: every rank plays its share of the groups and rank 0 gathers them: `trainer.dp_rollouts=true`;
- `rank0_all_threads`: rank 0 alone with torch's threads raised to every core of the host (torchrun gives
  each of several local ranks one thread): what one process of `agentrl train trainer.nproc=1` would use.
Before every play each rank's engine reloads its weights (its prefix cache emptied), as after an update,
so no mode reuses another's cache. Keys: `seconds` per mode (per repeat, in play order), `mean_s`,
`episodes`, `completion_tokens` (the work: equal or nearly so across modes; the cached engine's bf16 logits
move slightly with the batch's composition), `tokens_per_s`; `dp_speedup` = summed `rank0` seconds / summed
`dp` seconds (`dp_speedup_per_repeat`: the same within each repeat, whose plays ran back to back) and
`dp_speedup_vs_all_threads` the same against `rank0_all_threads`; `cores`,
`threads_per_rank`, the overrides and the load average before and after (two ranks on a 2-core host share
its cores with each other, the env service and the sandboxes: quote the load with the figures).

What this is not: a training run (no update; every play samples the same initial weights) or a multi-host
measurement (one host; on GPUs each rank has a device of its own and nothing is shared but the env fleet).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

QUICK = ["train.tasks_per_step=2", "train.group_size=2", "rollout.max_turns=2"]
COMMON = ["rollout.seeded_sampling=true", "eval.before=false", "eval.after=false", "train.seed=0"]
MODES = ("rank0", "dp", "rank0_all_threads")


def rotation(repeat: int) -> list[str]:
    """The modes' order in repeat `repeat`: rotated by one and reversed every other repeat."""
    shift = repeat % len(MODES)
    order = list(MODES[shift:] + MODES[:shift])
    return order[::-1] if repeat % 2 else order


async def measure(task: str, overrides: list[str], repeats: int, work: Path) -> dict[str, Any]:
    """The torchrun side: every rank runs this; rank 0 returns the figures, the others {}."""
    import torch

    from agentrl.agent.rollout import collect_rollouts
    from agentrl.config import load_config
    from agentrl.tasks import load_tasks, sample_tasks
    from agentrl.trainer import distributed, dp_rollouts
    from agentrl.trainer.run import open_run

    places = [f"runs_dir={work / 'runs'}", f"store.url=sqlite:///{work / 'store.db'}"]
    config = load_config(task, [*overrides, *places])
    parallel = distributed.init_from_env()
    threads = torch.get_num_threads()
    if parallel.rank != 0:
        urls = await distributed.off_loop(distributed.broadcast, None, parallel)
        async with dp_rollouts.open_rollout_rank(config, urls) as mine:
            while (mode := await distributed.off_loop(distributed.broadcast, None, parallel)) is not None:
                mine.engine.load_weights(None)  # as after an update: the prefix cache starts empty
                if mode == "dp":
                    await dp_rollouts.serve_phase(mine.client, mine.engine, config, parallel)
        distributed.close(parallel)
        return {}
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    tokens: dict[str, int] = dict.fromkeys(MODES, 0)
    episodes: dict[str, int] = dict.fromkeys(MODES, 0)
    async with open_run(config, kind="train") as ctx:
        await distributed.off_loop(distributed.broadcast, [r.url for r in ctx.client.replicas], parallel)
        ranks = dp_rollouts.RolloutRanks(parallel)
        split = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)

        async def play(mode: str, step: int) -> tuple[float, list[Any]]:
            await distributed.off_loop(distributed.broadcast, mode, parallel)
            ctx.engine.load_weights(None)
            tasks = sample_tasks(split, config.train.tasks_per_step, config.train.seed, step)
            order = dp_rollouts.PlayOrder(tasks, config.train.group_size, config.sampling, seed=step)
            torch.set_num_threads((os.cpu_count() or 1) if mode == "rank0_all_threads" else threads)
            started = time.perf_counter()
            if mode == "dp":
                played = await ranks.play(ctx.client, ctx.engine, config, order)
                elapsed = time.perf_counter() - started
                await ranks.end_phase()
            else:
                played = await collect_rollouts(
                    ctx.client, ctx.engine, config.env.id, tasks, order.group_size, order.sampling,
                    config.rollout, seed=step, progress=False,
                )  # fmt: skip
                elapsed = time.perf_counter() - started
            torch.set_num_threads(threads)
            return elapsed, played

        await play("dp", step=0)  # warm-up, untimed: engines, kernels and the sandbox pool on every rank
        for repeat in range(repeats):
            for mode in rotation(repeat):
                elapsed, played = await play(mode, step=repeat + 1)
                seconds[mode].append(round(elapsed, 2))
                episodes[mode] += len(played)
                tokens[mode] += sum(len(turn.completion_ids) for e in played for turn in e.turns)
                print(mode, repeat, round(elapsed, 2), file=sys.stderr, flush=True)
        await distributed.off_loop(distributed.broadcast, None, parallel)
    distributed.close(parallel)
    total = {mode: sum(values) for mode, values in seconds.items()}
    return {
        "seconds": seconds,
        "mean_s": {mode: round(total[mode] / repeats, 2) for mode in MODES},
        "episodes": episodes,
        "completion_tokens": tokens,
        "tokens_per_s": {mode: round(tokens[mode] / total[mode], 1) for mode in MODES},
        "dp_speedup": round(total["rank0"] / total["dp"], 3),
        "dp_speedup_per_repeat": [
            round(alone / shared, 3) for alone, shared in zip(seconds["rank0"], seconds["dp"], strict=True)
        ],
        "dp_speedup_vs_all_threads": round(total["rank0_all_threads"] / total["dp"], 3),
        "ranks": parallel.world_size,
        "threads_per_rank": threads,
        "engine": config.engine.kind,
        "model": config.model.name,
        "tasks_per_step": config.train.tasks_per_step,
        "group_size": config.train.group_size,
        "max_turns": config.rollout.max_turns,
    }


def worker(options: argparse.Namespace, overrides: list[str]) -> None:
    from agentrl.trainer.distributed import die_with_parent, exit_rank

    die_with_parent()
    with tempfile.TemporaryDirectory(prefix="agentrl-dp-bench-") as folder:
        figures = asyncio.run(measure(options.task, overrides, options.repeats, Path(folder)))
    if figures:
        Path(options.worker).write_text(json.dumps(figures))
    exit_rank(0)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--task", default="calc", help="the run config (./configs/TASK.yaml)")
    parser.add_argument("--quick", action="store_true", help="2 tasks x 2 episodes, 2 turns, 1 repeat")
    parser.add_argument("--repeats", type=int, help="plays per mode (default 3, --quick 1)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (torchrun on this host)")
    harness.add_out_argument(parser, "dp_rollout")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="run-config overrides a.b=c")
    options = parser.parse_args()
    options.repeats = options.repeats or (1 if options.quick else 3)
    overrides = [*COMMON, *(QUICK if options.quick else []), *options.overrides]
    if options.worker:
        return worker(options, overrides)
    from agentrl.service.embedded import free_loopback_port
    from agentrl.trainer.distributed import die_with_parent

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="agentrl-dp-bench-") as folder:
        out = Path(folder) / "figures.json"
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={options.nproc}",
            "--master_addr=127.0.0.1", f"--master_port={free_loopback_port()}", __file__,
            "--task", options.task, "--repeats", str(options.repeats), "--worker", str(out), *overrides,
        ]  # fmt: skip
        env = {**os.environ, "AGENTRL_DB_URL": ""}
        subprocess.run(command, check=True, preexec_fn=die_with_parent, env=env, timeout=3600)
        figures = json.loads(out.read_text())
    result = {
        "task": options.task,
        "overrides": overrides,
        **figures,
        "cores": os.cpu_count(),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }
    baseline = "rank 0 playing every episode alone (and with every core's threads), rotated in this run"
    harness.emit("dp_rollout", result, baseline=baseline, out=harness.out_path(options, "dp_rollout"))


if __name__ == "__main__":
    main()
