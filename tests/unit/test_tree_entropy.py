"""Tree rollouts branching on entropy (`rollout.tree.branch_on=entropy`, `agentrl/agent/tree.py`): a scripted
engine that reports each turn's first-token entropy from a script, the in-memory forking counter env of
`test_tree_rollout.py`, and one tree on the real cached engine with a tiny random Llama (seconds)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
import torch
from test_rollout import SAMPLING, TOKENIZER, ScriptedEngine
from test_tree_rollout import REPLIES, TASK, CyclingEngine, ForkingCounter
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.engines.configs import EngineConfig
from agentrl.agent.engines.sampler import token_entropy
from agentrl.agent.rollout_config import RolloutConfig, TreeConfig
from agentrl.agent.tree import BRANCH_INFO_KEYS, collect_groups, fires, play_tree, window_end
from agentrl.config import RunConfig
from agentrl.errors import ConfigError
from agentrl.typed import build
from agentrl.types import Episode

ASSISTANT = "<|im_start|>assistant"


class EntropyEngine(CyclingEngine):
    """`CyclingEngine` whose completions report the first-token entropy `script(turn)`, the turn read off the
    prompt (its assistant headers, one per turn played so far plus the one to complete)."""

    def __init__(self, script: Callable[[int], float]) -> None:
        super().__init__(REPLIES)
        self.script = script

    async def generate(self, prompt_ids: Sequence[int], params: Any) -> Completion:
        completion = await super().generate(prompt_ids, params)
        turn = TOKENIZER.decode(list(prompt_ids)).count(ASSISTANT) - 1
        return replace(completion, first_token_entropy=self.script(turn))


def by_turn(*values: float) -> Callable[[int], float]:
    return lambda turn: values[turn]


def entropy_config(max_turns: int = 4, max_context_tokens: int = 2048, **tree: Any) -> RolloutConfig:
    entropy = TreeConfig(True, branch_on="entropy", **tree)
    return RolloutConfig(max_turns=max_turns, max_context_tokens=max_context_tokens, tree=entropy)


def play(
    config: RolloutConfig, engine: Any, client: ForkingCounter | None = None, width: int = 2
) -> list[Episode]:
    client = client or ForkingCounter()
    return asyncio.run(play_tree(client, engine, "test/Counter-v0", TASK, 7, "g", SAMPLING, config, width))


def test_the_rule_fires_above_the_threshold_or_at_the_windows_end() -> None:
    assert fires(2.1, 1.0, 1, 3, 1.0) == "threshold"
    assert fires(2.0, 1.0, 1, 3, 1.0) is None  # a rise of exactly the threshold does not fire
    assert fires(0.1, 1.0, 3, 3, 1.0) == "window_end"
    assert fires(0.9, 1.0, 2, 3, -0.5) == "threshold"  # a negative threshold fires on a small drop
    assert window_end(5, 1) == 5 and window_end(5, 3) == 3  # two later branch points need turns 4 and 5


def test_a_branch_fires_at_the_first_turn_whose_entropy_rises_above_the_threshold() -> None:
    client = ForkingCounter()
    engine = EntropyEngine(by_turn(1.0, 1.5, 2.5, 9.0))
    leaves = play(entropy_config(entropy_threshold=1.0), engine, client)
    root, branch = leaves
    assert root.parent_id is None and branch.parent_id == root.episode_id and branch.branch_turn == 2
    for leaf in leaves:  # the branch turn records what decided it; turn 3 (9.0) was never a candidate
        assert {key: leaf.turns[2].info[key] for key in BRANCH_INFO_KEYS} == {
            "branch_entropy": 2.5,
            "branch_entropy_initial": 1.0,
            "branch_fallback": False,
        }
        assert not set(BRANCH_INFO_KEYS) & {key for turn in (0, 1, 3) for key in leaf.turns[turn].info}
    # the env saw turns 0-1 once and turn 2 once per branch: no sampled turn was played twice or dropped
    assert client.steps == 2 + 2 * 2 and engine.calls == client.steps
    assert sorted(client.closed) == sorted(["s0", *client.forked])


def test_siblings_share_the_exact_prefix_and_sample_their_own_branch_turn_from_one_state() -> None:
    engine = EntropyEngine(by_turn(0.0, 5.0, 0.0, 0.0))
    root, branch = play(entropy_config(max_turns=3), engine)
    assert branch.branch_turn == 1 and branch.turns[:1] == root.turns[:1]  # same tokens, rewards, states
    assert root.turns[1].prompt_ids == branch.turns[1].prompt_ids  # the same prompt at the forked state
    turn_1_prompts = [prompt for prompt in engine.prompts if TOKENIZER.decode(prompt).count(ASSISTANT) == 2]
    assert len(turn_1_prompts) == 2 and turn_1_prompts[0] == turn_1_prompts[1]  # both from one context
    # turn 0 was add(1) (total 1); each sibling's own turn 1 from that total: the root's add(2) (sampled
    # before the fork), the fork's add(1) (the engine's fourth reply: the root's turn 2 came before it)
    assert [root.turns[1].state_key, branch.turns[1].state_key] == ["3", "2"]


def test_a_path_whose_entropy_never_rises_enough_branches_at_its_windows_last_turn() -> None:
    leaves = play(entropy_config(max_turns=5, max_turn=3), EntropyEngine(lambda turn: 1.0))
    assert [leaf.branch_turn for leaf in leaves] == [None, 3]
    assert all(leaf.turns[3].info["branch_fallback"] is True for leaf in leaves)
    assert all(len(leaf.turns) == 5 for leaf in leaves)


def test_two_branch_points_per_path_make_width_squared_leaves_each_at_its_own_turn() -> None:
    # windows with max_turns 5: the first point in turns 1..3 (fires at 2 on the rise), the second in
    # 3..4 after it (no rise: the fallback at 4)
    engine = EntropyEngine(by_turn(1.0, 1.0, 3.0, 1.0, 1.0))
    leaves = play(entropy_config(max_turns=5, branch_points=2, entropy_threshold=1.0), engine, width=2)
    assert len(leaves) == 4
    by_id = {leaf.episode_id: leaf for leaf in leaves}
    assert [leaf.branch_turn for leaf in leaves] == [None, 4, 2, 4]  # depth first: root, its fork, ...
    for leaf in leaves[1:]:
        parent = by_id[leaf.parent_id]  # type: ignore[index]
        assert leaf.turns[: leaf.branch_turn] == parent.turns[: leaf.branch_turn]
    for leaf in leaves:
        assert (
            leaf.turns[2].info["branch_fallback"] is False and leaf.turns[4].info["branch_fallback"] is True
        )


def test_collect_groups_makes_exactly_group_size_leaves_per_task() -> None:
    tasks = [TASK, {"id": "t2", "target": 3}]
    config = entropy_config(max_turns=5, branch_points=2)
    engine = EntropyEngine(lambda turn: float(turn % 2))
    played = asyncio.run(collect_groups(ForkingCounter(), engine, "e", tasks, 4, SAMPLING, config, 0))
    assert [episode.task_id for episode in played] == ["t1"] * 4 + ["t2"] * 4
    assert all(len(episode.turns) == 5 for episode in played)


def test_an_engine_that_reports_no_entropy_is_refused_at_the_first_turn() -> None:
    with pytest.raises(ConfigError, match="engine.kind cached or hf"):
        play(entropy_config(), ScriptedEngine(REPLIES))


def test_a_failed_fork_ends_the_branch_as_an_infrastructure_failure_with_its_played_turns() -> None:
    client = ForkingCounter(fail_fork=True)  # with re-plays off; re-plays: tests/unit/test_tree_replay.py
    config = replace(entropy_config(), infra_attempts=1)
    (leaf,) = play(config, EntropyEngine(by_turn(0.0, 5.0, 0.0, 0.0)), client)
    assert leaf.stop_reason == "infra_error" and len(leaf.turns) == 1  # turn 1 was sampled, never played


def test_entropy_tree_configs_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="branch_on='tokens' is unknown"):
        TreeConfig(True, branch_on="tokens")
    with pytest.raises(ValueError, match="must be >= 1"):
        TreeConfig(True, branch_on="entropy", min_turn=0)
    with pytest.raises(ValueError, match="cannot hold 3 branch point"):
        TreeConfig(True, branch_on="entropy", branch_points=3, min_turn=2, max_turn=3)
    with pytest.raises(ValueError, match="finite"):
        TreeConfig(True, branch_on="entropy", entropy_threshold=math.inf)
    with pytest.raises(ValueError, match="cannot hold 2 branch point"):
        entropy_config(max_turns=2, branch_points=2)
    with pytest.raises(ValueError, match="must be below rollout.max_turns"):
        entropy_config(max_turns=3, max_turn=3)
    assert TreeConfig(True, branch_on="entropy", branch_points=2).width_for(9) == 3
    with pytest.raises(ValueError, match="2 branch point\\(s\\) per path of width w cannot make"):
        TreeConfig(True, branch_on="entropy", branch_points=2).width_for(8)
    tree = {"enabled": True, "branch_on": "entropy"}
    with pytest.raises(ConfigError, match="engine.kind=vllm does not report"):
        build(RunConfig, {"engine": {"kind": "vllm"}, "rollout": {"tree": tree}}, "")
    with pytest.raises(ConfigError, match="branch_on='x' is unknown"):
        build(RunConfig, {"rollout": {"tree": {"branch_on": "x"}}}, "")
    RunConfig(rollout=entropy_config(), engine=EngineConfig(kind="cached"))


def test_a_tree_on_the_cached_engine_branches_on_the_entropy_it_reports() -> None:
    """A tiny random Llama: its turns are not tool calls (the counter env answers each as invalid), but the
    entropies are the engine's own and the tree is whole."""
    engine = CachedEngine(tiny_llama(), byte_tokenizer(), CachedEngineConfig(precision="float32"))
    sampling = SamplingParams(max_new_tokens=6, stop=(), seed=None)
    config = entropy_config(max_turns=3, max_context_tokens=4096)

    async def run() -> list[Episode]:
        try:
            return await play_tree(ForkingCounter(), engine, "e", TASK, 7, "g", sampling, config, 2)
        finally:
            await engine.aclose()

    leaves = asyncio.run(run())
    assert len(leaves) == 2 and all(len(leaf.turns) == 3 for leaf in leaves)
    branch = leaves[1].branch_turn
    assert branch in (1, 2) and leaves[0].turns[:branch] == leaves[1].turns[:branch]
    fork = leaves[1]
    info = fork.turns[branch].info  # type: ignore[index]
    assert (info["branch_entropy"] - info["branch_entropy_initial"] > 0) != info["branch_fallback"]
    # the values are the model's first-token entropies at the branch turn's context and at turn 0's
    context = [token for turn in fork.turns[:branch] for token in (*turn.prompt_ids, *turn.completion_ids)]
    at_branch = [*context, *fork.turns[branch].prompt_ids]  # type: ignore[index]
    assert info["branch_entropy"] == pytest.approx(model_entropy(engine, at_branch), abs=1e-4)
    assert info["branch_entropy_initial"] == pytest.approx(
        model_entropy(engine, fork.turns[0].prompt_ids), abs=1e-4
    )


def model_entropy(engine: CachedEngine, prompt: Sequence[int]) -> float:
    """The entropy of the model's next-token distribution after `prompt`, at temperature 1."""
    with torch.no_grad():
        logits = engine.model(torch.tensor([list(prompt)])).logits[0, -1]
    return float(token_entropy(logits[None], torch.tensor([1.0]))[0])
