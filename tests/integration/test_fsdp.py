"""FSDP2 across 2 CPU processes (torchrun, gloo): one update equals the single-process update."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

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
