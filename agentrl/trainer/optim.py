"""The optimiser: AdamW (fused where torch has the kernel), its linear warm-up schedule, and one step of both
after clipping the gradients.

What this is: `make_optimizer(model, OptimConfig)` and `clip_and_step`, which the PPO and SFT updates call
once per mini batch. What this is not: the loop that accumulates the gradients (`update.py`) or the
optimiser state's checkpointing (`checkpoint.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.trainer.bf16_adamw import BF16StateAdamW
from agentrl.trainer.configs import OptimConfig
from agentrl.trainer.peak_memory import sub_phase


def make_optimizer(
    model: torch.nn.Module, config: OptimConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters, and a LambdaLR that warms the lr up linearly.

    The fused AdamW kernel (one pass per parameter, no temporaries) is used wherever torch has it: on CPU the
    default per-tensor loop is many times slower and dominated small updates (docs/benchmarks.md, "Figures
    behind design choices"). Its results equal the loop's to float32 rounding (`test_update.py`).
    """
    params = [param for param in model.parameters() if param.requires_grad]
    optimizer = adamw(params, config)
    warmup = config.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    )
    return optimizer, scheduler


def adamw(params: Sequence[torch.nn.Parameter], config: OptimConfig) -> torch.optim.Optimizer:
    """torch's fused AdamW over `params`, or its default implementation where there is no fused kernel;
    with `state_dtype=bfloat16`, `BF16StateAdamW` (the same rule, bf16 moments)."""
    settings: dict[str, Any] = {"lr": config.lr, "betas": config.betas, "weight_decay": config.weight_decay}
    if config.state_dtype == "bfloat16":
        return BF16StateAdamW(params, **settings)
    try:
        return torch.optim.AdamW(params, fused=True, **settings)
    except (RuntimeError, ValueError):  # a device or tensor type the fused kernel does not support
        return torch.optim.AdamW(params, **settings)


def clip_and_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    grad_clip: float,
) -> float:
    """Clip the accumulated gradients to norm `grad_clip` (<= 0: no clipping), step the optimiser and the
    schedule; return the gradient norm before clipping. Its memory is the `update_optimizer` phase."""
    with sub_phase("update_optimizer"):
        params = [param for param in model.parameters() if param.grad is not None]
        max_norm = grad_clip if grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)
        optimizer.step()
        scheduler.step()
    full = getattr(grad_norm, "full_tensor", None)  # a DTensor under FSDP2
    return float((full() if full is not None else grad_norm).item())
