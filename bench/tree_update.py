"""Update seconds per episode with the shared-prefix update on maze trees against flat groups, and the tree's
prefix shared past its branch point (issue 42 part 5) against the first prompt only; prints ONE JSON object
and writes it to bench/results/tree_update.json (`--out`; a `--quick` run prints only unless given `--out`).

    .venv/bin/python bench/tree_update.py              # 1 task: a flat group of 4 and a tree of 4, 8 turns
    .venv/bin/python bench/tree_update.py --quick      # 6 turns, branch at 3, each setting timed once
    .venv/bin/python bench/tree_update.py --groups 2 --turns 10 --branch 5 --out -

The episodes are built as bench/shared_prefix.py builds them, on SmolLM2-135M-Instruct's tokenizer: the
maze's real first prompt (tools, few-shot examples, the task's first observation), one `move` tool call per
turn (a few words, the call, the end of turn), the observation the move produced in `MazeEnv`; log-probs and
advantages are synthetic (they do not change the cost). Flat: `--width` independent episodes of random moves
per task. Tree: one root played to `--branch`, its env forked (`Env.fork`) `--width` - 1 times, and every
branch (the root going on, and each fork) plays its own random moves from that state; a branch's turns
before the branch turn are the root's, copied with no loss (`samples.copied_turns`), as a tree rollout lays
them out (`agentrl/agent/tree.py`). Every episode ends at the goal or at `--turns` moves.

Settings, all one `ppo_update` (lr 0, so every update sees the same weights) on the same samples per kind,
`update.micro_batch_size` 2 and bf16 autocast as configs/maze.yaml (`--micro-batch-size`, `--fp32`):
`flat` (shared prefix on), `tree` (shared prefix on: a pack of a tree's members shares up to the branch
turn's prompt, the root's turns before it trained from the prefix's logits), `tree_first_prompt` (the same
tree samples with each pack's prefix cut before the first token any member trains, which is what the
shared-prefix update shared before part 5) and `tree_unshared` (`update.shared_prefix=false`). One untimed
warm-up update, then `--rounds` rounds, each timing every setting in order and then in reverse (ABBA);
`update_s` is the median. Per setting: `episodes`, `tokens` (the samples' tokens), `run_tokens` (what the
update's forward passes run: each pack's prefix once plus its padded rows, the other samples padded per
micro batch), `packs`, `shared_tokens_mean`, `update_s`, `update_s_per_episode`, `timed_s` (every timing).
Ratios, each within this run: `tree_over_first_prompt_speedup` (tree_first_prompt / tree update seconds),
`tree_shared_over_unshared_speedup` (tree_unshared / tree) and `update_s_per_episode_ratio` (flat / tree per
episode, the key bench/tree_rollout.py uses). `max_metric_rel_diff`: how far the tree's shared update's
metrics (grad_norm aside) are from the unshared one's under the update's precision (equality in fp32 is
tested in tests/integration/test_shared_prefix.py). The CPU's flags are in the `harness` block
(bench/harness.py).

What this is not: a rollout benchmark (bench/tree_rollout.py plays real trees with the engine and measures
env steps and decoded tokens) or a statement about learning.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import harness
import torch
from agentrl_maze.env import MazeEnv
from transformers import PreTrainedTokenizerBase

from agentrl.agent.prompting import render_first_prompt, render_observation_delta
from agentrl.cpu import native_cpu_bf16
from agentrl.env.core import Env
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.trainer import samples as samples_module
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.parallel import SINGLE_PROCESS
from agentrl.trainer.samples import TrainSample, shared_length
from agentrl.trainer.shared_prefix import local_packs
from agentrl.trainer.update import ppo_update
from agentrl.types import Action, Episode, ToolCall, Turn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_prefix import completion, samples_of, tasks, turn  # noqa: E402

DIRECTIONS = ("up", "down", "left", "right")
SETTINGS = ("flat", "tree", "tree_first_prompt", "tree_unshared")


def play_moves(
    env: Env, tokenizer: PreTrainedTokenizerBase, prompt: Sequence[int], start: int, until: int, seed: int
) -> tuple[list[Turn], list[int], bool]:
    """Random moves played in `env` as turns `start`..`until - 1`, the first prompted by `prompt`: (the turns,
    the next turn's prompt, whether the episode ended)."""
    rng = random.Random(seed)
    turns: list[Turn] = []
    for index in range(start, until):
        call = ToolCall("move", {"direction": rng.choice(DIRECTIONS)})
        sampled = completion(tokenizer, rng.randint(0, 3), call, 32)
        turns.append(turn(index, prompt, sampled, rng))
        result = env.step(Action("", (call,)))
        prompt = render_observation_delta(tokenizer, result.observation, completion_ended=True)
        if result.terminated or result.truncated:
            return turns, list(prompt), True
    return turns, list(prompt), False


def first_prompt(env: MazeEnv, tokenizer: PreTrainedTokenizerBase, task: dict[str, Any]) -> list[int]:
    observation, _ = env.reset(options={"task": task})
    return list(render_first_prompt(tokenizer, env.tools, env.examples, observation))


def flat_group(
    tokenizer: PreTrainedTokenizerBase, task: dict[str, Any], width: int, turns: int, seed: int
) -> list[Episode]:
    """`width` independent episodes of the task."""
    episodes = []
    for member in range(width):
        env = MazeEnv(max_steps=turns)
        played, _, _ = play_moves(
            env, tokenizer, first_prompt(env, tokenizer, task), 0, turns, seed * 100 + member
        )
        episodes.append(
            Episode(f"f{seed}-{member}", "maze", task["id"], f"flat-{seed}", 0, tuple(played), "terminated")
        )
    return episodes


def tree_group(
    tokenizer: PreTrainedTokenizerBase, task: dict[str, Any], width: int, turns: int, branch: int, seed: int
) -> list[Episode]:
    """A tree of the task: the root to `branch`, then `width` branches from the same forked state (only the
    root when it ended before the branch turn, as `play_tree` does)."""
    env = MazeEnv(max_steps=turns)
    head, prompt, ended = play_moves(
        env, tokenizer, first_prompt(env, tokenizer, task), 0, branch, seed * 100
    )
    envs = [env] if ended else [env, *(env.fork() for _ in range(width - 1))]
    episodes = []
    for member, branch_env in enumerate(envs):
        tail, _, _ = play_moves(branch_env, tokenizer, prompt, branch, turns, seed * 100 + 50 + member)
        links = {"parent_id": f"t{seed}-0", "branch_turn": branch} if member else {}
        episodes.append(
            Episode(
                f"t{seed}-{member}",
                "maze",
                task["id"],
                f"tree-{seed}",
                0,
                (*head, *tail),
                "terminated",
                **links,
            )  # fmt: skip
        )
    return episodes


def first_prompt_length(samples: Sequence[TrainSample]) -> int:
    """`shared_length` cut before the first token any sample trains: what packs shared before part 5."""
    trained = [int(sample.loss_mask.nonzero()[0, 0]) for sample in samples if sample.loss_mask.any()]
    return min([shared_length(samples), *(first - 1 for first in trained)])


@contextlib.contextmanager
def packs_cut_at_first_prompt() -> Iterator[None]:
    original = samples_module.shared_length
    samples_module.shared_length = first_prompt_length
    try:
        yield
    finally:
        samples_module.shared_length = original


def run_tokens(samples: Sequence[TrainSample], update: UpdateConfig) -> tuple[int, int, float]:
    """(tokens the update's forward passes run, packs, mean shared tokens per pack) of the samples."""
    packs = local_packs(samples, update, SINGLE_PROCESS)
    total = sum(pack.padded_tokens(samples) for pack in packs)
    shared = [pack.shared for pack in packs if pack.shared]
    return total, len(shared), round(statistics.mean(shared), 1) if shared else 0.0


def setting_update(name: str, base: UpdateConfig) -> tuple[UpdateConfig, Callable[[], Any]]:
    update = dataclasses.replace(base, shared_prefix=name != "tree_unshared")
    return update, packs_cut_at_first_prompt if name == "tree_first_prompt" else contextlib.nullcontext


def time_settings(
    model: torch.nn.Module, kinds: dict[str, list[TrainSample]], base: UpdateConfig, order: Sequence[str]
) -> tuple[dict[str, list[float]], dict[str, dict[str, float]]]:
    """Seconds of every update in `order` after one untimed warm-up, and each setting's metrics."""
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    metrics: dict[str, dict[str, float]] = {}

    def once(name: str) -> float:
        update, context = setting_update(name, base)
        samples = kinds["flat" if name == "flat" else "tree"]
        with context():
            started = time.perf_counter()
            metrics[name] = ppo_update(model, optimizer, scheduler, samples, 0, LossConfig(), update)
            return time.perf_counter() - started

    once("tree")
    for name in order:
        seconds[name].append(once(name))
        print(name, round(seconds[name][-1], 2), file=sys.stderr, flush=True)
    return seconds, metrics


def max_rel_diff(shared: dict[str, float], unshared: dict[str, float]) -> float:
    diffs = [
        abs(shared[key] - value) / max(abs(value), 1e-6)
        for key, value in unshared.items()
        if key != "grad_norm"
    ]
    return round(max(diffs), 6)


def figures(
    name: str, samples: Sequence[TrainSample], base: UpdateConfig, seconds: list[float]
) -> dict[str, Any]:
    update, context = setting_update(name, base)
    with context():
        total, packs, shared = run_tokens(samples, update)
    update_s = statistics.median(seconds)
    return {
        "episodes": len(samples),
        "tokens": sum(sample.num_tokens for sample in samples),
        "run_tokens": total,
        "packs": packs,
        "shared_tokens_mean": shared,
        "update_s": round(update_s, 3),
        "update_s_per_episode": round(update_s / len(samples), 3),
        "timed_s": [round(value, 3) for value in seconds],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1, help="tasks: one flat group and one tree each")
    parser.add_argument("--width", type=int, default=4, help="group size (the tree's width)")
    parser.add_argument("--turns", type=int, default=8, help="moves per episode at most")
    parser.add_argument("--branch", type=int, default=4, help="the tree's branch turn")
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds after the warm-up")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="update.micro_batch_size")
    parser.add_argument("--quick", action="store_true", help="6 turns, branch at 3, every setting timed once")
    parser.add_argument("--fp32", action="store_true", help="fp32 instead of bf16 autocast")
    harness.add_out_argument(parser, "tree_update")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    turns, branch = (6, 3) if args.quick else (args.turns, args.branch)
    order = SETTINGS if args.quick else (*SETTINGS, *reversed(SETTINGS)) * args.rounds
    bf16 = not args.fp32 and native_cpu_bf16()
    base = UpdateConfig(micro_batch_size=args.micro_batch_size, autocast_bf16=bf16)
    load_before = os.getloadavg()
    model, tokenizer = load_model(ModelConfig(name="smollm2-135m-instruct"))
    chosen = list(enumerate(tasks("tasks/maze/level1/train.jsonl", args.groups)))
    flat = [flat_group(tokenizer, task, args.width, turns, seed) for seed, task in chosen]
    trees = [tree_group(tokenizer, task, args.width, turns, branch, seed) for seed, task in chosen]
    kinds = {"flat": samples_of(flat), "tree": samples_of(trees)}
    with contextlib.redirect_stdout(sys.stderr):
        seconds, metrics = time_settings(model, kinds, base, order)
    settings = {
        name: figures(name, kinds["flat" if name == "flat" else "tree"], base, seconds[name])
        for name in SETTINGS
    }
    tree = settings["tree"]
    result = {
        "settings": settings,
        "tree_over_first_prompt_speedup": round(
            settings["tree_first_prompt"]["update_s"] / tree["update_s"], 3
        ),
        "tree_shared_over_unshared_speedup": round(
            settings["tree_unshared"]["update_s"] / tree["update_s"], 3
        ),
        "update_s_per_episode_ratio": round(
            settings["flat"]["update_s_per_episode"] / tree["update_s_per_episode"], 3
        ),
        "max_metric_rel_diff": max_rel_diff(metrics["tree"], metrics["tree_unshared"]),
        "model": "smollm2-135m-instruct",
        "env": "maze level1",
        "groups": args.groups,
        "width": args.width,
        "max_turns": turns,
        "branch_turn": branch,
        "micro_batch_size": args.micro_batch_size,
        "precision": "bf16-autocast" if bf16 else "fp32",
        "threads": torch.get_num_threads(),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "command": " ".join(["python bench/tree_update.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    baseline = "the tree_first_prompt, tree_unshared and flat settings' updates, ABBA in this run"
    harness.emit(
        "tree_update", result, baseline=baseline, out=harness.out_path(args, "tree_update"), argv=argv
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
