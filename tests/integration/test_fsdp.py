"""FSDP2 across 2 CPU processes (torchrun, gloo): one update equals the single-process update, and so do the
trainer log-probs it hands back (each rank computes its own samples'; every rank gets all of them)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

WORKER = Path(__file__).with_name("fsdp_worker.py")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_two_rank_fsdp2_update_equals_the_single_process_update(tmp_path: Path) -> None:
    reference, sharded = tmp_path / "reference.pt", tmp_path / "sharded.pt"
    subprocess.run([sys.executable, str(WORKER), str(reference)], check=True, timeout=300)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    rendezvous = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    subprocess.run([*torchrun, *rendezvous, str(WORKER), str(sharded)], check=True, timeout=300)
    single, double = torch.load(reference), torch.load(sharded)
    assert set(single["params"]) == set(double["params"])
    for name, value in single["params"].items():
        assert torch.allclose(value, double["params"][name], atol=1e-5, rtol=0), name
    for name in ("loss", "clip_frac", "approx_kl", "grad_norm", "tokens"):
        assert double["metrics"][name] == pytest.approx(single["metrics"][name], rel=1e-5, abs=1e-7), name
    assert_same_trainer_logprobs(single["logprobs"], double["logprobs"], kept=3)  # 5 samples: 3 + 2


@pytest.mark.slow
def test_two_ranks_train_grouped_samples_as_one_process_sharing_their_prefix(tmp_path: Path) -> None:
    """One process runs the groups' shared prompt once (update.shared_prefix); two FSDP2 ranks run every
    episode unshared (FSDP2 unshards a layer once per forward call); the updates are equal."""
    reference, sharded = tmp_path / "reference.pt", tmp_path / "sharded.pt"
    subprocess.run([sys.executable, str(WORKER), str(reference), "--grouped"], check=True, timeout=300)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    rendezvous = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    subprocess.run([*torchrun, *rendezvous, str(WORKER), str(sharded), "--grouped"], check=True, timeout=300)
    single, double = torch.load(reference), torch.load(sharded)
    for name, value in single["params"].items():
        assert torch.allclose(value, double["params"][name], atol=1e-5, rtol=0), name
    for name in ("loss", "clip_frac", "approx_kl", "grad_norm", "tokens", "sampler_kl", "ess"):
        assert double["metrics"][name] == pytest.approx(single["metrics"][name], rel=1e-5, abs=1e-7), name
    assert_same_trainer_logprobs(single["logprobs"], double["logprobs"], kept=3)


def assert_same_trainer_logprobs(single: Sequence[Any], double: Sequence[Any], kept: int) -> None:
    """Rank 0 holds every sample's trainer log-probs, each rank's own gathered (the two ranks ran every
    other sample), equal to one process's; the first mini batch's `kept` samples have them, the rest
    (after an optimiser step) None."""
    assert len(single) == len(double)
    assert [value is None for value in single] == [value is None for value in double]
    assert [value is not None for value in single] == [index < kept for index in range(len(single))]
    for index in range(kept):
        assert torch.allclose(single[index], double[index], atol=1e-5), index


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_the_two_rank_run_exactly(tmp_path: Path) -> None:
    """Two updates in a row equal one update, a sharded checkpoint, fresh processes, the restore and one
    more update (weights, AdamW moments, the warm-up schedule and each rank's RNG all come back)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]

    def two_ranks(*args: str) -> None:
        rendezvous = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
        subprocess.run([*torchrun, *rendezvous, str(WORKER), *args], check=True, timeout=300)

    run_dir = tmp_path / "run"
    two_ranks(str(tmp_path / "straight.pt"), "--updates", "2")
    two_ranks(str(tmp_path / "first.pt"), "--updates", "1", "--save", str(run_dir))
    saved = run_dir / "checkpoints" / "step-000001"
    assert (saved / "sharded").is_dir() and {p.name for p in saved.glob("rng-rank*.pt")} == {
        "rng-rank0.pt",
        "rng-rank1.pt",
    }
    two_ranks(str(tmp_path / "resumed.pt"), "--updates", "1", "--resume", str(run_dir))
    straight, resumed = torch.load(tmp_path / "straight.pt"), torch.load(tmp_path / "resumed.pt")
    for name, value in straight["params"].items():
        assert torch.allclose(value, resumed["params"][name], atol=1e-6, rtol=0), name
    for name in ("loss", "clip_frac", "approx_kl", "grad_norm"):
        assert resumed["metrics"][name] == pytest.approx(straight["metrics"][name], rel=1e-6, abs=1e-8), name
    alone = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path / "alone.pt"), "--resume", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert alone.returncode != 0 and "resume it with trainer.nproc=2" in alone.stderr
