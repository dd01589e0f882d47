"""Processes for data-parallel training: FSDP2 sharding, rank bookkeeping, and the weight gather for sampling.

What this is: `init_from_env()` joins the process group torchrun set up (gloo on CPU, NCCL on GPU) and
returns this rank's `DataParallel`; `shard_model` wraps every decoder layer and then the root with
`torch.distributed.fsdp.fully_shard` (FSDP2; bf16 parameters with fp32 gradient reduction on GPU, plain
fp32 on CPU); `full_state_dict` gathers the sharded weights into one state dict (on rank 0, or on every
rank when every rank samples: `trainer.dp_rollouts`), which is how a colocated sampling engine gets the
updated weights; `broadcast` ships Python objects (the step's training samples, a rollout order) from rank 0
to every rank and `gather_to_rank0` the other way (each rank's episodes); `off_loop` runs such a collective
in a worker thread, so that a rank waiting for the others keeps answering its env sessions.

`die_with_parent()` makes the kernel SIGKILL this process when its parent exits: torchrun starts each rank in
a session of its own, so without it a SIGKILL of `agentrl train` (or the OOM killer) would leave the ranks
running, still training and writing to the run's folder and store. `exit_rank(code)` ends a rank without
the interpreter's finalization, which a gloo worker thread can otherwise abort (see its docstring).

What this is not: the update (`update.ppo_update` takes the `DataParallel` and does the global
normalisation) or a launcher (`torchrun --nproc_per_node N ...`; `agentrl train trainer.nproc=N` re-executes
itself under torchrun).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist

from agentrl.errors import ConfigError
from agentrl.memory import load_libc
from agentrl.trainer.parallel import SINGLE_PROCESS, DataParallel

PR_SET_PDEATHSIG = 1  # prctl option, from <linux/prctl.h>
T = TypeVar("T")


LIBC = load_libc()  # loaded at import, so `die_with_parent` can run as a `preexec_fn` (after fork)


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this process when its parent exits (Linux); True when set. Also usable as a
    subprocess's `preexec_fn`: the child then dies with the process that started it."""
    return LIBC is not None and LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def init_from_env() -> DataParallel:
    """This process's `DataParallel`; joins the process group when torchrun started several ranks."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return SINGLE_PROCESS
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(process_group_backend(torch.cuda.is_available()))
    return DataParallel(rank=dist.get_rank(), world_size=dist.get_world_size())


def process_group_backend(cuda: bool) -> str:
    """gloo on CPU; on GPU, NCCL for CUDA tensors and gloo for CPU ones: `DataParallel.sum`/`max` reduce
    CPU tensors, which NCCL alone refuses, and object collectives then stay in CPU memory."""
    return "cpu:gloo,cuda:nccl" if cuda else "gloo"


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: shard each decoder layer, then the rest (embeddings, final norm, tied head) at the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    layers = decoder_layers(model)
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if torch.cuda.is_available()
        else MixedPrecisionPolicy()
    )
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of a causal LM (Llama/Qwen/Mistral layouts: `model.model.layers`)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ConfigError(
            f"cannot find the decoder layers of {type(model).__name__} (expected model.model.layers); "
            "FSDP2 sharding supports Llama-family layouts"
        )
    return list(layers)


def full_state_dict(model: torch.nn.Module, every_rank: bool = False) -> dict[str, torch.Tensor]:
    """The full, unsharded weights: every rank must call this. Rank 0 receives them on CPU and the others
    {}; with `every_rank`, every rank receives them, on the model's device. Both all-gather every shard
    (torch's rank-0-only path drops the result on the other ranks), so `every_rank` costs no more traffic."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=not every_rank)
    return {
        name: torch.as_tensor(value) for name, value in get_model_state_dict(model, options=options).items()
    }


def broadcast(obj: Any, parallel: DataParallel) -> Any:
    """`obj` from rank 0, on every rank (pickled; for the step's samples and small metadata)."""
    if parallel.world_size == 1:
        return obj
    box = [obj if parallel.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_to_rank0(obj: Any, parallel: DataParallel) -> list[Any]:
    """`obj` of every rank, in rank order, on rank 0 (pickled); the other ranks get []."""
    if parallel.world_size == 1:
        return [obj]
    box: list[Any] | None = [None] * parallel.world_size if parallel.rank == 0 else None
    dist.gather_object(obj, box, dst=0)
    return box if box is not None else []


async def off_loop(collective: Callable[..., T], *args: Any) -> T:
    """Run a blocking collective (`broadcast`, `gather_to_rank0`) in a worker thread, so that the event loop
    keeps serving (WebSocket keep-alives of the env client) while this rank waits for the others. On GPU
    the thread first selects this rank's device, which object collectives over NCCL run on."""

    def run() -> T:
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        return collective(*args)

    return await asyncio.to_thread(run)


def close(parallel: DataParallel) -> None:
    if parallel.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def exit_rank(code: int) -> NoReturn:
    """End this rank now, with `code`, once everything it writes is closed: logs and stdio are flushed, then
    `os._exit` skips the interpreter's finalization.

    Why: `destroy_process_group` does not stop ProcessGroupGloo's worker threads while FSDP's modules still
    reference the group, and such a thread may still be dropping its last reference to the final collective
    (whose tensors have Python objects) when the main thread finalizes the interpreter; it then takes the
    GIL during finalization and the process aborts ("terminate called without an active exception",
    SIGABRT, so torchrun reports a finished run as failed). Seen in 2 of 38 two-rank resumes on a loaded
    2-core machine; the core dump shows the thread in `~AsyncAllgatherCoalescedWork` -> `take_gil`."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
