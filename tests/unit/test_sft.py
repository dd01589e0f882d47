"""The pure parts of the cold start: SFT samples and their loss masks, the schedule, the NLL loss and update,
scripted completions, the held-out checks, the demos file, and rejection sampling's choice of episodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures_envs import GuessNumberEnv
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.prompting import render_first_prompt, render_observation_delta
from agentrl.agent.rollout import run_episode
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.config import EnvConfig, RunConfig, TasksConfig
from agentrl.demos import (
    Demos,
    Play,
    ScriptedPlay,
    check_demos,
    check_no_heldout,
    end_of_turn_id,
    episode_from_json,
    episode_to_json,
    load_demos,
    play_one,
    run_plays,
    scripted_completion,
    tokenizer_fingerprint,
    train_tasks,
    turn_text,
    verdict,
    write_demos,
)
from agentrl.env import make
from agentrl.env.core import StepResult
from agentrl.errors import ConfigError, InvalidTask
from agentrl.store.repository import create_run, open_store, record_episodes
from agentrl.trainer.configs import OptimConfig, SFTConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import collate
from agentrl.trainer.sft_update import nll_loss, sft_sample, sft_schedule, sft_update
from agentrl.types import Action, Episode, SessionStart, ToolCall, Turn


def turn(index: int, prompt: tuple[int, ...], completion: tuple[int, ...], invalid: bool = False) -> Turn:
    logprobs = tuple(-0.5 for _ in completion)
    return Turn(index, prompt, completion, logprobs, "t", Action("t"), "obs", 0.0, invalid, None)


def episode(task_id: str = "task", *turns: Turn, success: bool = True) -> Episode:
    body = turns or (turn(0, (1, 2, 3), (10, 11)), turn(1, (4, 5), (12, 13, 14)))
    return Episode("e", "env/A-v0", task_id, "g", 0, tuple(body), "terminated", success=success)


# ---- samples, schedule, loss ---------------------------------------------------------------------------


def test_the_loss_mask_covers_the_assistant_tokens_only() -> None:
    sample = sft_sample(episode(), max_length=100)
    assert sample.input_ids.tolist() == [1, 2, 3, 10, 11, 4, 5, 12, 13, 14]
    assert sample.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert sample.old_logprobs.tolist() == [0.0] * 10  # no sampler: nothing of the demo's log-probs is used
    assert sample.group_key == "demos:env/A-v0"  # an env's demonstrations share their first prompt


def test_an_invalid_turn_stays_as_context_but_is_not_trained_on() -> None:
    demo = episode("task", turn(0, (1, 2), (10, 11), invalid=True), turn(1, (3,), (12, 13)))
    sample = sft_sample(demo, max_length=100)
    assert sample.input_ids.tolist() == [1, 2, 10, 11, 3, 12, 13]
    assert sample.loss_mask.tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert sample.num_sampled_tokens == 2


def test_the_schedule_is_seeded_epochs_of_batches() -> None:
    steps = sft_schedule(5, epochs=2, batch_size=2, seed=3)
    assert [len(step) for step in steps] == [2, 2, 1, 2, 2, 1]
    assert sorted(i for step in steps[:3] for i in step) == [0, 1, 2, 3, 4]
    assert sorted(i for step in steps[3:] for i in step) == [0, 1, 2, 3, 4]
    assert steps == sft_schedule(5, epochs=2, batch_size=2, seed=3)
    assert steps != sft_schedule(5, epochs=2, batch_size=2, seed=4)


def test_sft_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="sft.epochs"):
        SFTConfig(epochs=0)
    with pytest.raises(ConfigError, match="sft.aggregation"):
        SFTConfig(aggregation="constant")


def test_the_nll_is_the_cross_entropy_of_the_masked_tokens() -> None:
    model = tiny_llama()
    sample = sft_sample(episode(), max_length=100)
    batch = collate([sample], pad_id=0)
    loss, metrics, _ = nll_loss(model, batch)
    logits = model(input_ids=batch["input_ids"]).logits[0, :-1]
    targets = batch["input_ids"][0, 1:]
    mask = batch["loss_mask"][0, 1:].bool()
    expected = torch.nn.functional.cross_entropy(logits[mask], targets[mask])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert metrics["nll"] == pytest.approx(expected.item(), rel=1e-5)
    assert 0.0 <= metrics["token_accuracy"] <= 1.0


def test_sft_update_steps_lower_the_nll_of_the_demonstration() -> None:
    model = tiny_llama()
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    samples = [sft_sample(episode(), max_length=100)] * 3
    update_cfg = UpdateConfig(micro_batch_size=2)
    nlls = [
        sft_update(model, optimizer, scheduler, samples, 0, update_cfg, OptimConfig(lr=1e-2))["nll"]
        for _ in range(4)
    ]
    assert nlls[-1] < nlls[0] and not model.training
    metrics = sft_update(model, optimizer, scheduler, samples, 0, update_cfg, OptimConfig())
    assert metrics["tokens"] == 15.0 and {"loss", "grad_norm", "token_accuracy"} <= set(metrics)


# ---- scripted completions and the scripted play ------------------------------------------------------


def test_a_scripted_turn_is_tokenised_as_an_engine_would_return_it() -> None:
    tokenizer = byte_tokenizer()
    eot = end_of_turn_id(tokenizer)
    call = turn_text(Action("", (ToolCall("move", {"direction": "up"}),)))
    assert call.startswith("<tool_call>\n{") and call.endswith("}\n</tool_call>")
    stopped = scripted_completion(tokenizer, call, ("</tool_call>",), eot)
    assert stopped.token_ids == tuple(tokenizer.encode(call, add_special_tokens=False))
    assert not stopped.ended_turn and stopped.logprobs == (0.0,) * len(stopped.token_ids)
    plain = scripted_completion(tokenizer, "right", ("</tool_call>",), eot)
    assert plain.token_ids[-1] == eot and plain.ended_turn and plain.text == "right"


class EnvClient:
    """An in-process stand-in for the env service: one env per session."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.closed = 0

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        observation, info = self.env.reset(seed=seed, options={"task": dict(task)})
        return SessionStart("s", observation, info, list(self.env.tools), list(self.env.examples))

    async def step(self, session_id: str, action: Action) -> StepResult:
        return self.env.step(action)

    async def close_session(self, session_id: str) -> None:
        self.closed += 1


def bisect(task: Mapping[str, Any], observation: str, kwargs: Mapping[str, Any]) -> Generator[Any, str, None]:
    """Binary search on GuessNumber; the third guess is written as raw text, to check both kinds of turn."""
    low, high = 1, int(kwargs["high"])
    for number in range(8):
        guess = (low + high) // 2
        call = Action("", (ToolCall("guess", {"number": guess}),))
        answer = yield (turn_text(call) + "\n" if number == 2 else call)
        if answer == "correct":
            return
        low, high = (guess + 1, high) if answer == "higher" else (low, guess - 1)


def test_a_scripted_policy_plays_through_the_runner_with_its_tokens() -> None:
    tokenizer = byte_tokenizer()
    env = GuessNumberEnv(high=100)
    client = EnvClient(env)
    player = ScriptedPlay(client, bisect, {"high": 100}, tokenizer, end_of_turn_id(tokenizer))
    sampling = SamplingParams(max_new_tokens=80)
    played = asyncio.run(
        run_episode(player, player, "test/GuessNumber-v0", {"target": 71}, 0, "g", sampling, RolloutConfig(8))
    )
    assert played.stop_reason == "terminated" and played.turns[-1].reward == 1.0 and client.closed == 1
    solved = replace(played, success=True)  # GuessNumber reports no info["success"]; the maze does
    assert verdict(played, player.longest, 80) == "failed" and verdict(solved, player.longest, 80) == "kept"
    assert verdict(solved, player.longest, player.longest - 1) == "too_long"
    observation = played.first_observation or ""
    first = render_first_prompt(tokenizer, list(env.tools), list(env.examples), observation)
    assert list(played.turns[0].prompt_ids) == first
    for previous, current in zip(played.turns, played.turns[1:], strict=False):
        ended = previous.completion_ids[-1] == end_of_turn_id(tokenizer)
        assert list(current.prompt_ids) == render_observation_delta(tokenizer, previous.observation, ended)
    assert [t.action.tool_calls[0].arguments["number"] for t in played.turns][:3] == [50, 75, 62]
    assert played.turns[2].completion_ids[-1] == end_of_turn_id(tokenizer)  # text not ending on the stop


def test_a_task_the_env_refuses_is_skipped_and_a_stopped_policy_is_not_kept() -> None:
    class Refusing(EnvClient):
        async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
            raise InvalidTask("the env rejected the task")

    def nothing(
        task: Mapping[str, Any], observation: str, kwargs: Mapping[str, Any]
    ) -> Generator[Any, str, None]:
        yield from ()

    tokenizer = byte_tokenizer()
    config = RunConfig(env=EnvConfig(id="test/GuessNumber-v0"))
    play = Play(0, {"target": 3}, 0, bisect)
    refused = asyncio.run(
        play_one(Refusing(GuessNumberEnv()), config, play, tokenizer, end_of_turn_id(tokenizer))
    )
    assert refused.reason == "rejected" and refused.episode is None
    stopped = asyncio.run(
        play_one(EnvClient(GuessNumberEnv()), config, replace(play, policy=nothing), tokenizer, 0)
    )
    assert stopped.reason == "policy_stopped"


def test_the_maze_scripted_policy_solves_train_boards(repo_root: Path) -> None:
    from agentrl.demos import scripted_policy_of

    policy = scripted_policy_of("agentrl/Maze-v0")
    env = make("agentrl/Maze-v0")
    tasks = [json.loads(line) for line in (repo_root / "tasks/maze/level3/train.jsonl").open()][:10]
    for task in tasks:
        observation, _ = env.reset(seed=0, options={"task": task})
        plan = policy(task, observation, {})
        action = next(plan)
        while True:
            result = env.step(action)
            if result.terminated or result.truncated:
                break
            action = plan.send(result.observation)
        assert result.info["success"], task["id"]


# ---- the held-out checks -----------------------------------------------------------------------------


def write_suite(root: Path, train: list[str], heldout: list[str]) -> None:
    suite = root / "s"
    suite.mkdir(parents=True)
    for split, ids in (("train", train), ("heldout", heldout)):
        (suite / f"{split}.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def config_for(root: Path, **tasks: Any) -> RunConfig:
    return RunConfig(env=EnvConfig(id="env/A-v0"), tasks=TasksConfig(suite="s", root=str(root), **tasks))


def test_held_out_task_ids_are_refused() -> None:
    check_no_heldout(["a", "b"], {"c"}, "demos")
    with pytest.raises(ConfigError, match=r"demos include 1 held-out task\(s\) \(c\)"):
        check_no_heldout(["a", "c"], {"c", "d"}, "demos")


def test_the_train_split_must_not_share_tasks_with_the_held_out_split(tmp_path: Path) -> None:
    write_suite(tmp_path, ["a", "b"], ["c"])
    assert sorted(train_tasks(config_for(tmp_path))) == ["a", "b"]
    with pytest.raises(ConfigError, match="both 'heldout'"):
        train_tasks(config_for(tmp_path, train_split="heldout"))
    leaky = tmp_path / "leaky"
    write_suite(leaky, ["a", "c"], ["c"])
    with pytest.raises(ConfigError, match="held-out task"):
        train_tasks(config_for(leaky))


def test_sft_refuses_demonstrations_of_held_out_tasks_or_another_env_or_tokenizer(tmp_path: Path) -> None:
    write_suite(tmp_path, ["a", "b"], ["c"])
    config = config_for(tmp_path)
    tokenizer = byte_tokenizer()
    manifest = {"env_id": "env/A-v0", "tokenizer": tokenizer_fingerprint(tokenizer), "model": "m"}
    check_demos(Demos(tmp_path, manifest, [episode("a"), episode("b")]), config, tokenizer)
    with pytest.raises(ConfigError, match="held-out task"):
        check_demos(Demos(tmp_path, manifest, [episode("a"), episode("c")]), config, tokenizer)
    with pytest.raises(ConfigError, match="demonstrates env/B-v0"):
        check_demos(Demos(tmp_path, {**manifest, "env_id": "env/B-v0"}, [episode("a")]), config, tokenizer)
    other = byte_tokenizer(chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(ConfigError, match="another tokenizer"):
        check_demos(Demos(tmp_path, manifest, [episode("a")]), config, other)


# ---- the demos file and rejection sampling -----------------------------------------------------------


def test_demos_round_trip_through_their_file(tmp_path: Path) -> None:
    demo = episode("a", turn(0, (1, 2), (3,)), replace(turn(1, (4,), (5, 6)), info={"x": [1, 2]}))
    path = write_demos(tmp_path, [demo], {"env_id": "env/A-v0"})
    loaded = load_demos(tmp_path)
    assert loaded.path == path and loaded.manifest == {"env_id": "env/A-v0"}
    assert episode_to_json(loaded.episodes[0]) == episode_to_json(demo)
    assert episode_from_json(episode_to_json(demo)).turns[1].completion_ids == (5, 6)
    with pytest.raises(ConfigError, match="no demonstrations"):
        load_demos(tmp_path / "missing")


def test_rejection_sampling_takes_successful_training_episodes_of_train_tasks_once(tmp_path: Path) -> None:
    write_suite(tmp_path, ["a", "b"], ["c"])
    url = f"sqlite:///{tmp_path}/store.db"
    config = replace(config_for(tmp_path), store=replace(RunConfig().store, url=url))
    store = open_store(url)
    run_id = create_run(store, "rl-run", "t", {})
    good = episode("a", turn(0, (1,), (2,)), replace(turn(1, (3,), (4,)), text="u"), success=True)
    record_episodes(store, run_id, 1, "train", [good, good, episode("b", success=False), episode("c")])
    record_episodes(store, run_id, 0, "eval", [episode("b")])  # held-out evaluation: never a demo
    store.engine.dispose()
    plays = run_plays(config, "rl-run", train_tasks(config))
    assert [(play.task["id"], play.seed) for play in plays] == [("a", 0)]
    replay = plays[0].policy({"id": "a"}, "", {})  # driven as the runner drives it: next, then send
    assert next(replay) == "t" and replay.send("an observation") == "u"
    assert run_plays(config, run_id, train_tasks(config))[0].task["id"] == "a"
    with pytest.raises(ConfigError, match="no run with that id or name"):
        run_plays(config, "nope", train_tasks(config))


def test_a_demonstration_of_several_segments_trains_each_as_the_engine_saw_it() -> None:
    """A demonstration played under a context policy (`rollout.context`) holds several token sequences:
    `sft_samples` lays out one per segment, whose first turn holds its whole prompt."""
    from dataclasses import replace

    from agentrl.trainer.sft_update import sft_samples

    demo = episode()
    assert [len(s.input_ids) for s in sft_samples(demo, 100)] == [len(sft_sample(demo, 100).input_ids)]
    turns = list(demo.turns)
    turns[-1] = replace(turns[-1], segment=1, prompt_ids=(*turns[0].prompt_ids, *turns[-1].prompt_ids))
    samples = sft_samples(replace(demo, turns=tuple(turns)), 100)
    assert len(samples) == 2
    assert samples[1].input_ids.tolist() == [*turns[-1].prompt_ids, *turns[-1].completion_ids]
    assert samples[1].loss_mask.sum() == (0 if turns[-1].invalid else len(turns[-1].completion_ids))
