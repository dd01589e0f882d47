"""Demonstrations for a supervised warm start (`agentrl demos`): episodes with their tokens exactly as the
runner renders them, from a plugin's scripted policy or from the successful episodes of an earlier run.

What this is: a demonstrating policy is played through the real env service by the runner's own episode loop
(`agentrl.agent.rollout.run_episode`), with `ScriptedPlay` standing in for both the engine and the client:
each completion is the policy's next turn, tokenised as an engine would have sampled it (the turn's text,
then the end-of-turn token unless the text ends with a stop string, as a real completion does), and every
observation the env returns is handed back to the policy. So the first prompt, the observation tokens and
the chat template between turns are exactly what RL samples with, and SFT trains on those very tokens.
Two sources (`--policy`):

- `scripted`: the env class's optional `scripted_policy` (the `ScriptedPolicy` contract of
  `agentrl.env.scripted`, which `agentrl envs check` plays too; docs/cold_start.md).
  Played on train-split tasks in a seeded order until `--n` episodes succeed.
- `run:RUN` (a run id or name in the store): rejection sampling. The successful training episodes of that
  run (never its held-out evaluation episodes), deduplicated, are replayed turn by turn (their text) on the
  same task and env seed; the store keeps no token ids, so replaying re-creates them with the runner's
  rendering, and an episode whose replay does not succeed again is dropped.

Only episodes that succeed, whose completions each fit `sampling.max_new_tokens` (RL could not sample a
longer one) and that did not fail for infrastructure reasons are kept. Demonstrations come from the train
split only: the train and held-out ids must be disjoint (`check_no_heldout`), and `agentrl sft` checks the
file again before training.

Output (runs/<name>/): `demos.jsonl` (one `Episode` per line, token ids included), `demos.json` (the
manifest: env, policy, tokenizer fingerprint, counts), `metrics.jsonl`, and the played episodes in the run
store (a run named <task>-demos-<time>) for `agentrl ui`.

What this is not: the SFT run (`agentrl/trainer/sft.py`) or a policy library (policies live with their envs).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Generator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.prompting import end_of_turn_text, render_first_prompt
from agentrl.agent.rollout import episode_seed, run_concurrently, run_episode
from agentrl.agent.session import SessionClient
from agentrl.client import EnvClient
from agentrl.config import RunConfig, to_dict
from agentrl.env.core import StepResult, tool_spec
from agentrl.env.scripted import ScriptedPolicy, ScriptedTurn, ScriptedTurns
from agentrl.env.scripted import scripted_policy_of as env_scripted_policy
from agentrl.env.scripted import turn_text as turn_text  # re-exported: the text of a turn, as demos write it
from agentrl.errors import ConfigError, InvalidTask, PolicyStopped
from agentrl.models import load_tokenizer
from agentrl.store.repository import (
    create_run,
    finish_run,
    json_info,
    list_runs,
    load_episodes,
    open_store,
    record_metrics,
)
from agentrl.store.writer import StoreWriter
from agentrl.tasks import Task, load_tasks
from agentrl.trainer.run import make_run_dir, start_service
from agentrl.types import Action, Episode, SessionStart, Turn
from agentrl.wire import action_from_json, action_to_json

LOG = logging.getLogger(__name__)
DEMOS_FILE = "demos.jsonl"
MANIFEST_FILE = "demos.json"
FORMAT_VERSION = 1

REASONS = ("kept", "failed", "too_long", "policy_stopped", "infra_error", "rejected")
"""Why a played episode was kept or not: kept; failed (did not succeed, or ran out of turns or context);
too_long (a completion longer than sampling.max_new_tokens); policy_stopped (the policy's plan ended before
the episode did); infra_error (still an infrastructure failure after rollout.infra_attempts plays);
rejected (the env refused the task at reset, `InvalidTask`: that task is skipped, the others are played)."""


# ---- turns as completions ------------------------------------------------------------------------------


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id of the template's end-of-turn token (ChatML's <|im_end|>)."""
    found = tokenizer.convert_tokens_to_ids(end_of_turn_text(tokenizer))
    assert isinstance(found, int)
    return found


def scripted_completion(
    tokenizer: PreTrainedTokenizerBase, text: str, stop: Sequence[str], eot_id: int
) -> Completion:
    """`text` as an engine would have returned it: its tokens, then the end-of-turn token unless the text
    ends with a stop string (sampling stops there, and the runner appends the end of turn itself); the
    log-probs are 0 (no sampler)."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    stopped = any(text.endswith(marker) for marker in stop if marker)
    if not stopped:
        ids.append(eot_id)
    return Completion(tuple(ids), tuple(0.0 for _ in ids), text, "stop", not stopped)


class ScriptedPlay:
    """One episode of a demonstrating policy: the runner's client (forwarding to the real env client and
    keeping each observation for the policy) and its engine (each completion is the policy's next turn).
    `longest` is the longest completion in tokens."""

    def __init__(
        self,
        client: SessionClient,
        policy: ScriptedPolicy,
        env_kwargs: Mapping[str, Any],
        tokenizer: PreTrainedTokenizerBase,
        eot_id: int,
    ) -> None:
        self.client = client
        self.policy = policy
        self.env_kwargs = env_kwargs
        self.tokenizer = tokenizer
        self.eot_id = eot_id
        self.longest = 0
        self._observation = ""
        self._turns: ScriptedTurns | None = None

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        start = await self.client.create_session(env_id, task, seed)
        self._observation, self._turns = start.observation, ScriptedTurns(self.policy, task, self.env_kwargs)
        return start

    async def step(self, session_id: str, action: Action) -> StepResult:
        result = await self.client.step(session_id, action)
        self._observation = result.observation
        return result

    async def close_session(self, session_id: str) -> None:
        await self.client.close_session(session_id)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        assert self._turns is not None  # the runner opens the session before it generates
        text = self._turns.next_turn(self._observation)
        if text is None:
            raise PolicyStopped
        completion = scripted_completion(self.tokenizer, text, params.stop, self.eot_id)
        self.longest = max(self.longest, len(completion.token_ids))
        return completion


def replay_policy(texts: Sequence[str]) -> ScriptedPolicy:
    """A policy that writes `texts`, one per turn, whatever it observes (rejection sampling's replay)."""

    def replay(
        task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
    ) -> Generator[ScriptedTurn, str, None]:
        for text in texts:  # noqa: UP028 (`yield from` would hand the sent observations to the tuple)
            yield text

    return replay


# ---- where policies and tasks come from --------------------------------------------------------------


@dataclass(frozen=True)
class Play:
    """One episode to play: its order, task, env seed and policy."""

    index: int
    task: Task
    seed: int
    policy: ScriptedPolicy


@dataclass(frozen=True)
class Outcome:
    """A played episode (None when the policy stopped first) and why it was kept or not (`REASONS`)."""

    index: int
    episode: Episode | None
    reason: str


def parse_policy(text: str) -> tuple[str, str | None]:
    """`scripted` -> ("scripted", None); `run:RUN` -> ("run", RUN)."""
    if text == "scripted":
        return "scripted", None
    kind, sep, run = text.partition(":")
    if kind == "run" and sep and run:
        return "run", run
    raise ConfigError(f"--policy {text!r}: use scripted (the env's scripted policy) or run:RUN_ID")


def scripted_policy_of(env_id: str) -> ScriptedPolicy:
    """The `scripted_policy` of the env class registered as `env_id` (importing the installed plugins)."""
    policy = env_scripted_policy(env_id)
    if policy is None:
        raise ConfigError(
            f"{env_id} has no scripted policy (an optional `scripted_policy` on the env class; "
            "docs/cold_start.md): use --policy run:RUN_ID to take the successful episodes of a run"
        )
    return policy


def heldout_task_ids(config: RunConfig) -> set[str]:
    """The ids of the run's held-out evaluation tasks (`tasks.eval_split`)."""
    tasks = config.tasks
    return {str(task["id"]) for task in load_tasks(tasks.root, tasks.suite, tasks.eval_split)}


def check_no_heldout(task_ids: Iterable[str], heldout: set[str], what: str) -> None:
    """`ConfigError` when any of `task_ids` is a held-out task: demonstrations of held-out tasks would make
    the held-out evaluation measure memorised answers."""
    leaked = sorted(set(task_ids) & heldout)
    if leaked:
        shown = ", ".join(leaked[:5]) + (" ..." if len(leaked) > 5 else "")
        raise ConfigError(
            f"{what} include {len(leaked)} held-out task(s) ({shown}); demonstrations must come from the "
            "train split only"
        )


def train_tasks(config: RunConfig) -> dict[str, Task]:
    """The train split by id, checked to share no task with the held-out split."""
    tasks = config.tasks
    if tasks.train_split == tasks.eval_split:
        raise ConfigError(
            f"tasks.train_split and tasks.eval_split are both {tasks.eval_split!r}; demonstrations need "
            "a train split apart from the held-out one"
        )
    train = {str(task["id"]): task for task in load_tasks(tasks.root, tasks.suite, tasks.train_split)}
    check_no_heldout(train, heldout_task_ids(config), f"the {tasks.train_split} split of {tasks.suite}")
    return train


def scripted_plays(config: RunConfig, train: Mapping[str, Task]) -> list[Play]:
    """Every train task once, in an order drawn from `train.seed`, with the env's scripted policy."""
    policy = scripted_policy_of(config.env.id)
    tasks = list(train.values())
    order = np.random.default_rng(config.train.seed).permutation(len(tasks))
    return [
        Play(position, tasks[int(index)], episode_seed(config.train.seed, position), policy)
        for position, index in enumerate(order)
    ]


def run_plays(config: RunConfig, run: str, train: Mapping[str, Task]) -> list[Play]:
    """The successful training episodes of `run` (an id or a name in the store) as replays, deduplicated;
    episodes of tasks not in this config's train split (held-out ones included) are never taken."""
    store = open_store(config.store.url)
    try:
        matches = [row for row in list_runs(store) if run in (row["id"], row["name"])]
        if not matches:
            raise ConfigError(f"--policy run:{run}: no run with that id or name in {store.url}")
        rows = load_episodes(store, matches[0]["id"])
    finally:
        store.engine.dispose()
    plays: list[Play] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for row in rows:
        if row["split"] != "train" or not row["success"] or row["stop_reason"] == "infra_error":
            continue
        if row["env_id"] != config.env.id:
            raise ConfigError(f"run {run} played {row['env_id']}, but this config's env is {config.env.id}")
        texts = tuple(str(turn["text"]) for turn in row["turns"])
        key = (str(row["task_id"]), texts)
        task = train.get(key[0])
        if task is None or key in seen:
            continue
        seen.add(key)
        plays.append(Play(len(plays), task, int(row["seed"]), replay_policy(texts)))
    return plays


# ---- playing -----------------------------------------------------------------------------------------


def verdict(episode: Episode, longest: int, max_new_tokens: int) -> str:
    """Why a played episode is kept or not (`REASONS`)."""
    if episode.is_infra_failure:
        return "infra_error"
    if longest > max_new_tokens:
        return "too_long"
    return "kept" if episode.success else "failed"


async def play_one(
    client: SessionClient, config: RunConfig, play: Play, tokenizer: PreTrainedTokenizerBase, eot_id: int
) -> Outcome:
    """One demonstration through the runner's episode loop, re-played on a new session after an
    infrastructure failure (up to `rollout.infra_attempts` plays)."""
    group_id = f"demo-{play.task.get('id', play.index)}-{uuid.uuid4().hex[:8]}"
    attempts = max(1, config.rollout.infra_attempts)
    for attempt in range(1, attempts + 1):
        player = ScriptedPlay(client, play.policy, config.env.kwargs, tokenizer, eot_id)
        try:
            episode = await run_episode(
                player, player, config.env.id, play.task, play.seed, group_id, config.sampling, config.rollout
            )
        except PolicyStopped:
            return Outcome(play.index, None, "policy_stopped")
        except InvalidTask as exc:
            LOG.warning("agentrl demos: skipping task %s: %s", play.task.get("id"), exc)
            return Outcome(play.index, None, "rejected")
        if not episode.is_infra_failure or attempt == attempts:
            break
    episode = replace(episode, attempts=attempt)
    return Outcome(play.index, episode, verdict(episode, player.longest, config.sampling.max_new_tokens))


async def play_until(
    client: SessionClient,
    config: RunConfig,
    plays: Sequence[Play],
    wanted: int,
    tokenizer: PreTrainedTokenizerBase,
    concurrency: int = 4,
) -> list[Outcome]:
    """Play `plays` in order, `concurrency` at a time, until `wanted` are kept (or none is left); every
    outcome in play order."""
    eot_id = end_of_turn_id(tokenizer)
    pending = iter(plays)
    outcomes: list[Outcome] = []

    async def worker() -> None:
        while sum(outcome.reason == "kept" for outcome in outcomes) < wanted:
            play = next(pending, None)
            if play is None:
                return
            outcomes.append(await play_one(client, config, play, tokenizer, eot_id))

    await run_concurrently(worker() for _ in range(max(1, concurrency)))
    return sorted(outcomes, key=lambda outcome: outcome.index)


def kept_episodes(outcomes: Sequence[Outcome], wanted: int) -> list[Episode]:
    """The first `wanted` kept episodes in play order."""
    kept = [outcome.episode for outcome in outcomes if outcome.reason == "kept"]
    return [episode for episode in kept if episode is not None][:wanted]


def demo_metrics(outcomes: Sequence[Outcome], kept: Sequence[Episode]) -> dict[str, float]:
    """Counts by reason, the policy's success rate over the episodes it finished, and the kept episodes'
    mean turns and tokens."""
    finished = [outcome.episode for outcome in outcomes if outcome.episode is not None]
    turns = [turn for episode in kept for turn in episode.turns]
    metrics = {
        f"demos/{reason}": float(sum(outcome.reason == reason for outcome in outcomes)) for reason in REASONS
    }
    return {
        **metrics,
        "demos/played": float(len(outcomes)),
        "demos/policy_success_rate": float(np.mean([e.success for e in finished])) if finished else 0.0,
        "demos/turns_mean": float(np.mean([len(e.turns) for e in kept])) if kept else 0.0,
        "demos/completion_tokens_mean": float(np.mean([len(t.completion_ids) for t in turns]))
        if turns
        else 0.0,
        "demos/tokens_mean": float(np.mean([sum(t.num_tokens for t in e.turns) for e in kept]))
        if kept
        else 0.0,
    }


# ---- the file format ---------------------------------------------------------------------------------


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short digest of how this tokenizer renders and tokenises a probe prompt: demonstrations rendered
    with another tokenizer or chat template would train on tokens the run never sees."""
    probe_tool = tool_spec("probe", "probe", {"text": {"type": "string"}})
    ids = render_first_prompt(tokenizer, [probe_tool], [], "Probe: walk @ to G, 12 * 34 = 408.")
    probe = json.dumps([len(tokenizer), str(tokenizer.chat_template), ids])
    return hashlib.sha256(probe.encode()).hexdigest()[:16]


def episode_to_json(episode: Episode) -> dict[str, Any]:
    """An episode as plain JSON data, token ids included (the inverse of `episode_from_json`)."""
    return {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "task_id": episode.task_id,
        "group_id": episode.group_id,
        "seed": episode.seed,
        "stop_reason": episode.stop_reason,
        "initial_state_key": episode.initial_state_key,
        "success": episode.success,
        "error": episode.error,
        "attempts": episode.attempts,
        "first_observation": episode.first_observation,
        "turns": [
            {
                "index": turn.index,
                "prompt_ids": list(turn.prompt_ids),
                "completion_ids": list(turn.completion_ids),
                "completion_logprobs": list(turn.completion_logprobs),
                "text": turn.text,
                "action": action_to_json(turn.action),
                "observation": turn.observation,
                "reward": turn.reward,
                "invalid": turn.invalid,
                "state_key": turn.state_key,
                "terminated": turn.terminated,
                "truncated": turn.truncated,
                "info": json_info(turn.info),
            }
            for turn in episode.turns
        ],
    }


def episode_from_json(data: Mapping[str, Any]) -> Episode:
    turns = tuple(
        Turn(
            index=int(turn["index"]),
            prompt_ids=tuple(turn["prompt_ids"]),
            completion_ids=tuple(turn["completion_ids"]),
            completion_logprobs=tuple(turn["completion_logprobs"]),
            text=turn["text"],
            action=action_from_json(turn["action"]),
            observation=turn["observation"],
            reward=float(turn["reward"]),
            invalid=bool(turn["invalid"]),
            state_key=turn["state_key"],
            terminated=bool(turn["terminated"]),
            truncated=bool(turn["truncated"]),
            info=dict(turn["info"] or {}),
        )
        for turn in data["turns"]
    )
    return Episode(
        episode_id=data["episode_id"],
        env_id=data["env_id"],
        task_id=data["task_id"],
        group_id=data["group_id"],
        seed=int(data["seed"]),
        turns=turns,
        stop_reason=data["stop_reason"],
        initial_state_key=data["initial_state_key"],
        success=bool(data["success"]),
        error=data["error"],
        attempts=int(data["attempts"]),
        first_observation=data["first_observation"],
    )


@dataclass(frozen=True)
class Demos:
    """A demonstrations file: its manifest and episodes."""

    path: Path
    manifest: Mapping[str, Any]
    episodes: list[Episode] = field(default_factory=list)


def write_demos(folder: Path, episodes: Sequence[Episode], manifest: Mapping[str, Any]) -> Path:
    """`demos.jsonl` and `demos.json` in `folder`; the path of the first."""
    path = folder / DEMOS_FILE
    with path.open("w") as handle:
        for episode in episodes:
            handle.write(json.dumps(episode_to_json(episode), default=str) + "\n")
    (folder / MANIFEST_FILE).write_text(json.dumps(dict(manifest), indent=2, default=str) + "\n")
    return path


def load_demos(path: str | Path) -> Demos:
    """The demonstrations at `path` (a demos.jsonl, or the folder `agentrl demos` wrote it to)."""
    file = Path(path)
    if file.is_dir():
        file = file / DEMOS_FILE
    manifest_file = file.parent / MANIFEST_FILE
    if not file.is_file() or not manifest_file.is_file():
        raise ConfigError(
            f"no demonstrations at {path} (want {DEMOS_FILE} with its {MANIFEST_FILE}); write them with "
            "`agentrl demos --task NAME --policy scripted` and pass --demos runs/<name>/demos.jsonl"
        )
    manifest = json.loads(manifest_file.read_text())
    episodes = [episode_from_json(json.loads(line)) for line in file.open() if line.strip()]
    return Demos(file, manifest, episodes)


def check_demos(demos: Demos, config: RunConfig, tokenizer: PreTrainedTokenizerBase) -> None:
    """`ConfigError` unless the demonstrations fit this run: the same env, the same tokenizer and chat
    template, at least one episode, and no held-out task of this run's eval split."""
    env_id = demos.manifest.get("env_id")
    if env_id != config.env.id:
        raise ConfigError(f"{demos.path} demonstrates {env_id}, but this run's env is {config.env.id}")
    if demos.manifest.get("tokenizer") != tokenizer_fingerprint(tokenizer):
        raise ConfigError(
            f"{demos.path} was rendered with another tokenizer or chat template (model "
            f"{demos.manifest.get('model')!r}) than model.name={config.model.name}; write the "
            "demonstrations again with this model, so SFT trains on the tokens this run samples"
        )
    if not demos.episodes:
        raise ConfigError(f"{demos.path} holds no demonstrations")
    check_no_heldout(
        (episode.task_id for episode in demos.episodes),
        heldout_task_ids(config),
        f"the demonstrations in {demos.path}",
    )


# ---- the command -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemosResult:
    """What `make_demos` wrote: the demos file, how many were kept out of how many played, the metrics."""

    path: Path
    kept: int
    played: int
    metrics: Mapping[str, float]


async def make_demos(config: RunConfig, policy: str, wanted: int, concurrency: int = 4) -> DemosResult:
    """`agentrl demos`: play demonstrations of `config`'s env on train tasks until `wanted` are kept, and
    write them (module docstring)."""
    if wanted < 1:
        raise ConfigError(f"--n must be >= 1, got {wanted}")
    _, run = parse_policy(policy)
    train = train_tasks(config)
    plays = scripted_plays(config, train) if run is None else run_plays(config, run, train)
    if not plays:
        raise ConfigError(
            f"--policy {policy}: no successful training episode of a train-split task to replay"
        )
    tokenizer = load_tokenizer(config.model)
    run_dir = make_run_dir(config, "demos")
    store = open_store(config.store.url)
    run_id = create_run(store, run_dir.name, config.task, to_dict(config))
    status = "failed"
    started = time.perf_counter()
    try:
        async with AsyncExitStack() as stack:
            writer = stack.enter_context(StoreWriter(store))
            service_url = config.service.url or start_service(stack, config, run_dir)
            client = await stack.enter_async_context(EnvClient(service_url, config=config.service.client))
            outcomes = await play_until(client, config, plays, wanted, tokenizer, concurrency)
            played = [outcome.episode for outcome in outcomes if outcome.episode is not None]
            writer.record_episodes(run_id, 0, "train", played)
        kept = kept_episodes(outcomes, wanted)
        metrics = {**demo_metrics(outcomes, kept), "demos_s": time.perf_counter() - started}
        manifest = {
            "format": FORMAT_VERSION,
            "task": config.task,
            "env_id": config.env.id,
            "env_kwargs": dict(config.env.kwargs),
            "suite": config.tasks.suite,
            "split": config.tasks.train_split,
            "policy": policy,
            "model": config.model.name,
            "tokenizer": tokenizer_fingerprint(tokenizer),
            "instructions": config.rollout.instructions,
            "max_new_tokens": config.sampling.max_new_tokens,
            "episodes": len(kept),
            "task_ids": sorted({episode.task_id for episode in kept}),
            "run_id": run_id,
            "metrics": metrics,
        }
        path = write_demos(run_dir, kept, manifest)
        with (run_dir / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps({"step": 0, **metrics}) + "\n")
        record_metrics(store, run_id, 0, metrics)
        status = "finished"
    finally:
        finish_run(store, run_id, status)
        store.engine.dispose()
    return DemosResult(path, len(kept), len(outcomes), metrics)


def run_demos(config: RunConfig, policy: str, wanted: int, concurrency: int = 4) -> DemosResult:
    return asyncio.run(make_demos(config, policy, wanted, concurrency))
