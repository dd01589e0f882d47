"""Resumable checkpoints: everything a training run needs to continue exactly where it stopped.

What this is: `save(dir, step, ...)` writes `checkpoints/step-NNNNNN/` inside a run folder — the policy's
weights (safetensors through `save_pretrained`; adapters only for LoRA), the optimiser and LR-schedule
states, the RNG states (torch, numpy, Python), and `state.json` (step, run id, weights version) — into a
temporary folder renamed into place, so a kill mid-write never leaves a half checkpoint; older ones beyond
`keep` are deleted. `latest(run_dir)` finds the newest complete one and `load` restores it in place. The
task sampler needs no state: `tasks.sample_tasks` is a pure function of (seed, step).

What this is not: a sharded (FSDP2) checkpoint: with `trainer.nproc` > 1 runs are not resumable yet, and
`train.py` says so instead of writing a checkpoint it could not restore.
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

STATE_FILE = "state.json"
TRAINER_FILE = "trainer.pt"


@dataclass(frozen=True)
class CheckpointState:
    """What `state.json` holds."""

    step: int
    run_id: str
    weights_version: int


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def save(
    run_dir: Path,
    state: CheckpointState,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    keep: int = 2,
) -> Path:
    """Write the checkpoint of `state.step` atomically; keep only the newest `keep`."""
    target = step_dir(run_dir, state.step)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial)  # type: ignore[operator]
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
        },
        partial / TRAINER_FILE,
    )
    (partial / STATE_FILE).write_text(json.dumps(vars(state)))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in sorted(target.parent.glob("step-??????"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None."""
    found = sorted(
        path for path in (run_dir / "checkpoints").glob("step-??????") if (path / STATE_FILE).is_file()
    )
    return found[-1] if found else None


def read_state(checkpoint: Path) -> CheckpointState:
    return CheckpointState(**json.loads((checkpoint / STATE_FILE).read_text()))


def load(checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """Restore weights, optimiser, schedule and RNG states from `checkpoint` in place."""
    from safetensors.torch import load_file

    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights:
        raise ConfigError(f"{checkpoint} holds no *.safetensors weights; it is not an agentrl checkpoint")
    state_dict: dict[str, torch.Tensor] = {}
    for path in weights:
        state_dict.update(load_file(str(path)))
    if hasattr(model, "peft_config"):  # LoRA: the file holds the adapters only
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state_dict)
    else:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"}  # tied to the input embedding: save_pretrained leaves it out
        if set(missing) - tied or unexpected:
            raise ConfigError(
                f"{checkpoint} does not match the model: missing {missing}, unexpected {unexpected}"
            )
    trainer = torch.load(checkpoint / TRAINER_FILE, weights_only=False)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    torch.set_rng_state(trainer["rng"]["torch"])
    np.random.set_state(trainer["rng"]["numpy"])
    random.setstate(trainer["rng"]["python"])
