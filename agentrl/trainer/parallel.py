"""`DataParallel`: this process's rank among the data-parallel ranks, and the few collectives the trainer
makes over them (sum, max, gather).

What this is: a frozen (rank, world_size) pair whose methods are no-ops for one process
(`SINGLE_PROCESS`), and torch.distributed calls otherwise. Modules that shard work or reduce metrics over
ranks take one of these.

What this is not: the process group's set-up or the FSDP2 wrapping (`distributed.py`), or a launcher
(torchrun starts the ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the data-parallel ranks (world_size 1: a plain single-process update)."""

    rank: int = 0
    world_size: int = 1

    def shard(self, samples: Sequence[T]) -> list[T]:
        """Every world_size-th sample, starting at this rank."""
        return list(samples[self.rank :: self.world_size])

    def sum(self, value: float) -> float:
        return self._reduce(value, "sum")

    def max(self, value: float) -> float:
        return self._reduce(value, "max")

    def gather(self, obj: Any) -> list[Any]:
        """`obj` from every rank, in rank order."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def _reduce(self, value: float, op: str) -> float:
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64)
        reduce_op = torch.distributed.ReduceOp.SUM if op == "sum" else torch.distributed.ReduceOp.MAX
        torch.distributed.all_reduce(tensor, op=reduce_op)
        return float(tensor.item())


SINGLE_PROCESS = DataParallel()
