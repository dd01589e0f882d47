"""Resumable checkpoints: everything a training run needs to continue exactly where it stopped.

What this is: `save(dir, step, ...)` writes `checkpoints/step-NNNNNN/` inside a run folder — the policy's
weights (safetensors through `save_pretrained`; adapters only for LoRA), the optimiser and LR-schedule
states, the RNG states (torch, numpy, Python), and `state.json` (step, run id, weights version, the env
steps played so far) — into a temporary folder renamed into place, so a kill mid-write never leaves a half
checkpoint; older ones beyond `keep` are deleted. `latest(run_dir)` finds the newest complete one and
`load` restores it in place. The task sampler keeps no state here: `uniform` and `filtered` draws are pure
functions of (seed, step), and the `adaptive` posterior is rebuilt from the store's `task_draws` rows up to
the checkpoint's step.

With `trainer.nproc` > 1 (an FSDP2-sharded policy) every rank calls `save`/`load` together: the weights
and optimiser state go through `torch.distributed.checkpoint` (each rank writes its own shards under
`sharded/`, in parallel, never gathering the model on one rank), each rank's RNG state into
`rng-rank<R>.pt`, and rank 0 writes the schedule, `state.json` and the rename. Resuming needs the same world
size (the RNG streams are per rank) and, across nodes, a run folder on a filesystem every node sees.

What this is not: the engine's copy of the weights (after a sharded load, the trainer gathers them into
rank 0's engine as after any update), or a model export (`final/` is written by `train.py`).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.errors import ConfigError
from agentrl.models import has_adapters
from agentrl.trainer.parallel import SINGLE_PROCESS, DataParallel

STATE_FILE = "state.json"
TRAINER_FILE = "trainer.pt"
SHARDED_DIR = "sharded"  # torch.distributed.checkpoint files of a multi-process checkpoint


@dataclass(frozen=True)
class CheckpointState:
    """What `state.json` holds. `env_steps`: the env steps of the run's training rollouts up to `step`, what
    `train.env_step_budget` counts (0 in checkpoints written before it was kept)."""

    step: int
    run_id: str
    weights_version: int
    env_steps: int = 0


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def save(
    run_dir: Path,
    state: CheckpointState,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    keep: int = 2,
    parallel: DataParallel = SINGLE_PROCESS,
) -> Path:
    """Write the checkpoint of `state.step` atomically; keep only the newest `keep`. With several ranks,
    every rank must call this (it is collective)."""
    target = step_dir(run_dir, state.step)
    partial = target.with_name(target.name + ".partial")
    if parallel.rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    if parallel.world_size == 1:
        model.save_pretrained(partial)  # type: ignore[operator]
        trainer = {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
        }
        torch.save(trainer, partial / TRAINER_FILE)
    else:
        _save_shards(partial, model, optimizer, parallel)
        if parallel.rank == 0:
            torch.save({"scheduler": scheduler.state_dict()}, partial / TRAINER_FILE)
    if parallel.rank == 0:
        (partial / STATE_FILE).write_text(json.dumps({**vars(state), "world_size": parallel.world_size}))
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        for old in sorted(target.parent.glob("step-??????"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(parallel)  # nobody moves on (or resumes) before the checkpoint is complete
    return target


def _save_shards(partial: Path, model: torch.nn.Module, optimizer: Any, parallel: DataParallel) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _barrier(parallel)  # rank 0 has created the folder
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(partial / SHARDED_DIR))
    torch.save(rng_state(), partial / f"rng-rank{parallel.rank}.pt")
    _barrier(parallel)


def rng_state() -> dict[str, Any]:
    """The RNG states to restore: torch's CPU generator, the current CUDA device's (GPU sampling draws from
    it), numpy's and Python's."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _barrier(parallel: DataParallel) -> None:
    if parallel.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None."""
    found = sorted(
        path for path in (run_dir / "checkpoints").glob("step-??????") if (path / STATE_FILE).is_file()
    )
    return found[-1] if found else None


def read_state(checkpoint: Path) -> CheckpointState:
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    return CheckpointState(
        step=saved["step"],
        run_id=saved["run_id"],
        weights_version=saved["weights_version"],
        env_steps=saved.get("env_steps", 0),
    )


def saved_world_size(checkpoint: Path) -> int:
    """How many ranks wrote `checkpoint` (1 for checkpoints older than this field)."""
    return int(json.loads((checkpoint / STATE_FILE).read_text()).get("world_size", 1))


def load(
    checkpoint: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    parallel: DataParallel = SINGLE_PROCESS,
) -> None:
    """Restore weights, optimiser, schedule and RNG states from `checkpoint` in place (collective with
    several ranks). The world size must be the one that wrote it."""
    written_by = saved_world_size(checkpoint)
    if written_by != parallel.world_size:
        raise ConfigError(
            f"{checkpoint} was written by {written_by} process(es); resume it with trainer.nproc={written_by}"
        )
    if parallel.world_size > 1:
        _load_shards(checkpoint, model, optimizer, parallel)
        scheduler.load_state_dict(torch.load(checkpoint / TRAINER_FILE, weights_only=False)["scheduler"])
        return
    _load_weights(checkpoint, model)
    trainer = torch.load(checkpoint / TRAINER_FILE, weights_only=False)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])


def _load_shards(checkpoint: Path, model: torch.nn.Module, optimizer: Any, parallel: DataParallel) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    # dcp.load fills these nested dicts in place (each rank reads the shards it owns)
    dcp.load(
        {"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(checkpoint / SHARDED_DIR)
    )
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
    set_rng_state(torch.load(checkpoint / f"rng-rank{parallel.rank}.pt", weights_only=False))


def _load_weights(checkpoint: Path, model: torch.nn.Module) -> None:
    """The safetensors weights of a one-process checkpoint (adapters only for LoRA)."""
    from safetensors.torch import load_file

    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights:
        raise ConfigError(f"{checkpoint} holds no *.safetensors weights; it is not an agentrl checkpoint")
    state_dict: dict[str, torch.Tensor] = {}
    for path in weights:
        state_dict.update(load_file(str(path)))
    if has_adapters(model):  # LoRA: the file holds the adapters only
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state_dict)
    else:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"}  # tied to the input embedding: save_pretrained leaves it out
        if set(missing) - tied or unexpected:
            raise ConfigError(
                f"{checkpoint} does not match the model: missing {missing}, unexpected {unexpected}"
            )
