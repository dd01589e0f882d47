"""Data-parallel rollouts (`trainer.dp_rollouts`): a run whose every rank plays its share of each step's
groups and of the held-out evaluations records what the same run in one process records: the same episodes
with the same advantages, the same metrics and the same final weights, to float tolerance (the update is
FSDP2's across ranks). Seeded sampling with the HF engine in fp32 makes each episode independent of
batching; a tiny random Llama and a pure-Python env (`dp_env.py`) keep it to a couple of minutes on CPU."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from dp_runs import (
    byte_sum_service,
    final_weights,
    nonces_per_round,
    run_train,
    step_metrics,
    stored_episodes,
    stored_trainer_logprobs,
    tiny_run_config,
    train_args,
)
from safetensors.torch import load_file

from agentrl.config import RunConfig, ServiceConfig, TrainerConfig
from agentrl.errors import ConfigError
from agentrl.trainer.dp_rollouts import check_placement, shares
from agentrl.trainer.parallel import DataParallel


def test_shares_are_contiguous_whole_groups_in_rank_order() -> None:
    assert shares(3, 2) == [range(0, 2), range(2, 3)]
    assert shares(1, 3) == [range(0, 1), range(1, 1), range(1, 1)]
    for count in range(9):
        for world in range(1, 5):
            blocks = shares(count, world)
            assert [i for block in blocks for i in block] == list(range(count))
            assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_ranks_on_several_nodes_need_a_service_every_node_reaches(monkeypatch: pytest.MonkeyPatch) -> None:
    two = DataParallel(rank=1, world_size=2)
    every_rank = TrainerConfig(nproc=2)  # dp_rollouts: the default
    embedded = RunConfig(trainer=every_rank)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    check_placement(embedded, two)  # one node: rank 0's embedded service on 127.0.0.1 serves every rank
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match="service.url"):
        check_placement(embedded, two)
    check_placement(RunConfig(trainer=every_rank, service=ServiceConfig(url="http://fleet:8700")), two)
    check_placement(RunConfig(trainer=TrainerConfig(nproc=2, dp_rollouts=False)), two)  # rank 0 alone


@pytest.mark.slow
def test_two_ranks_playing_their_shares_record_the_single_process_run(
    repo_root: Path, tmp_path: Path
) -> None:
    runs, db = tmp_path / "runs", tmp_path / "store.db"
    with byte_sum_service(tmp_path / "service.log") as service:
        config = tiny_run_config(tmp_path, service.url, train={"steps": 3})
        run_train(train_args(config, runs, db, "one", "trainer.nproc=1"), repo_root)
        run_train(train_args(config, runs, db, "two", "trainer.nproc=2"), repo_root)

    one, two = step_metrics(runs / "one"), step_metrics(runs / "two")
    assert sorted(one) == sorted(two) == [0, 1, 2, 3]
    assert one[1]["grad_norm"] > 0 and one[1]["credit/advantage_std"] > 0
    assert sum(one[step]["extra_groups_played"] for step in (1, 2, 3)) > 0  # phases of several rounds
    for step in one:
        assert two[step] == pytest.approx(one[step], rel=1e-5, abs=1e-6), step

    single, double = stored_episodes(db, "one"), stored_episodes(db, "two")
    assert len(single) == len(double) == len({row[:7] for row in single})
    for a, b in zip(single, double, strict=True):
        assert a[:7] == b[:7]  # step, split, task, env seed, reward, attempts, every turn's text
        assert [value is None for value in a[7]] == [value is None for value in b[7]]  # None: untrained
        advantages = [(x, y) for x, y in zip(a[7], b[7], strict=True) if x is not None]
        assert [y for _, y in advantages] == pytest.approx([x for x, _ in advantages], rel=1e-5, abs=1e-6)
    # the trainer's log-probs: each rank computed its own samples', rank 0 recorded all of them
    trainer_one, trainer_two = stored_trainer_logprobs(db, "one"), stored_trainer_logprobs(db, "two")
    assert trainer_one.keys() == trainer_two.keys()
    assert any(value is not None for turns in trainer_one.values() for value in turns)
    for key, turns in trainer_one.items():
        assert [value is None for value in turns] == [value is None for value in trainer_two[key]], key
        for mine, theirs in zip(turns, trainer_two[key], strict=True):
            if mine is not None:
                assert theirs == pytest.approx(mine, abs=1e-4), key
    per_step = Counter((row[0], row[1]) for row in double)  # every played episode stored exactly once
    for step in (1, 2, 3):
        assert per_step[(step, "train")] == one[step]["episodes"]
    assert per_step[(0, "eval")] == per_step[(3, "eval")] == 3

    with_one, with_two = final_weights(runs / "one"), final_weights(runs / "two")
    assert set(with_one) == set(with_two)
    for name, value in with_one.items():
        assert torch.allclose(value, with_two[name], atol=1e-5, rtol=0), name
    initial = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert any(not torch.equal(initial[name], value) for name, value in with_one.items())  # it trained

    # both ranks played: each rank's block of a round has a group-id nonce of its own
    assert nonces_per_round(db, "one") == {1}
    assert nonces_per_round(db, "two") == {2}


@pytest.mark.slow
def test_a_two_rank_run_resumed_from_its_checkpoint_continues_as_the_straight_run(
    repo_root: Path, tmp_path: Path
) -> None:
    """Every rank's engine gets the restored weights: step 3 after a resume equals the straight run's."""
    runs, db = tmp_path / "runs", tmp_path / "store.db"
    quiet = ["eval.before=false", "eval.after=false", "trainer.nproc=2", "trainer.checkpoint_every=1"]
    with byte_sum_service(tmp_path / "service.log") as service:
        config = tiny_run_config(tmp_path, service.url)
        run_train(train_args(config, runs, db, "straight", *quiet, "train.steps=3"), repo_root)
        run_train(train_args(config, runs, db, "resumed", *quiet, "train.steps=2"), repo_root)
        resume = f"trainer.resume={runs / 'resumed'}"
        run_train(train_args(config, runs, db, "resumed", *quiet, "train.steps=3", resume), repo_root)
    straight, resumed = step_metrics(runs / "straight"), step_metrics(runs / "resumed")
    assert sorted(resumed) == [1, 2, 3] and resumed[3]["grad_norm"] > 0
    assert resumed[3] == pytest.approx(straight[3], rel=1e-5, abs=1e-6)
    assert stored_episodes(db, "resumed") == stored_episodes(db, "straight")
