"""AdamW with its two moments kept in bfloat16: 4 bytes of optimiser state a parameter instead of 8.

What this is: `BF16StateAdamW`, torch's AdamW update (decoupled weight decay, bias correction) computed in
fp32 from moments stored in bf16, each written back with stochastic rounding: a bf16 value has 8 bits of
mantissa, so Adam's second moment, which moves by (1 - beta2) = 0.1% of itself a step, would stand still
under round-to-nearest; rounded up or down with the probabilities that keep its expectation, it moves as the
fp32 moment does on average. `optim.state_dtype=bfloat16` picks it (`optim.make_optimizer`). For the 135M
model it takes 0.54 GB off the 2.15 GB fp32 training state.

What this is not: a default. The moments' rounding noise may change what a run learns; issue 54 asks for
its effect on calc-chain's learning (two seeds) before it could become one, and that is not measured yet.
Under FSDP2 it steps each rank's shards (`_local`), but no multi-rank run or sharded checkpoint has used it
yet. Nor an 8-bit optimiser (block-wise quantised moments need a kernel library this CPU build does not ship).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


def stochastic_bf16(values: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """fp32 `values` rounded to bf16 up or down at random, with the probability of each that makes the
    expectation `values` (add uniform noise below bf16's last bit, then truncate); inf and nan pass through
    round-to-nearest."""
    out = torch.empty(values.shape, dtype=torch.bfloat16, device=values.device)
    stochastic_bf16_into(out, values.contiguous(), generator)
    return out


def stochastic_bf16_into(out: torch.Tensor, values: torch.Tensor, generator: torch.Generator | None) -> None:
    """`stochastic_bf16` of contiguous fp32 `values` written into the bf16 tensor `out` of the same shape:
    the noisy bits shifted down to their high half and stored as bf16's 16 bits, in three passes and no
    fp32 temporary; the non-finite values (found by one sum) are rounded to nearest instead."""
    shifted = torch.randint(
        0, 1 << 16, values.shape, dtype=torch.int32, device=values.device, generator=generator
    )
    shifted.add_(values.view(torch.int32)).bitwise_right_shift_(16)
    out.view(torch.int16).copy_(shifted)  # the low 16 bits of each: bf16's sign, exponent and mantissa
    if not math.isfinite(float(values.sum())):  # an inf or a nan (or finite values summing past fp32's range)
        special = ~torch.isfinite(values)
        out[special] = values[special].to(torch.bfloat16)


class BF16StateAdamW(torch.optim.Optimizer):
    """AdamW (torch's update rule) with bf16 moments, rounded stochastically (module docstring)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self._generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, which casts floating state to each parameter's dtype, then the moments back to
        bf16 (exactly: they were bf16 values)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(torch.bfloat16)

    def _update(self, param: torch.nn.Parameter, group: dict[str, Any]) -> None:
        """One parameter's step; under FSDP2 on its local shard (the moments are shards too). A contiguous
        parameter steps `CHUNK` elements at a time, so the fp32 temporaries are those of a chunk, not of the
        whole tensor (the embedding's would be about 110 MB each); the moments are written back in place."""
        beta1, beta2 = group["betas"]
        state = self.state[param]
        assert param.grad is not None  # `step` updates only parameters with a gradient
        weights, grad = _local(param), _local(param.grad)
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(weights, dtype=torch.bfloat16)
            state["exp_avg_sq"] = torch.zeros_like(weights, dtype=torch.bfloat16)
        state["step"] += 1
        step = float(state["step"])
        rule = Rule(
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            decay=1 - group["lr"] * group["weight_decay"],
            scale=-group["lr"] / (1 - beta1**step),
            correction=1 - beta2**step,
            generator=self._generator if weights.device.type == "cpu" else None,
        )
        tensors = (weights, grad, state["exp_avg"], state["exp_avg_sq"])
        if not all(tensor.is_contiguous() for tensor in tensors):
            rule.apply(*tensors)
            return
        flat = [tensor.view(-1) for tensor in tensors]
        for start in range(0, flat[0].numel(), CHUNK):
            rule.apply(*(tensor[start : start + CHUNK] for tensor in flat))


CHUNK = 1 << 22  # elements a step updates at once: 16 MB of fp32 per temporary


@dataclass(frozen=True)
class Rule:
    """AdamW's update for one step of one parameter group, applied to a slice of a parameter."""

    beta1: float
    beta2: float
    eps: float
    decay: float  # 1 - lr * weight_decay
    scale: float  # -lr / (1 - beta1 ** step)
    correction: float  # 1 - beta2 ** step
    generator: torch.Generator | None

    def apply(
        self, weights: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor
    ) -> None:
        """`weights` stepped in place from `grad` and the bf16 moments, which are rewritten in place."""
        grad = grad.float()
        first = exp_avg.float().lerp_(grad, 1 - self.beta1)
        second = exp_avg_sq.float().mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        weights.mul_(self.decay)
        denominator = (second / self.correction).sqrt_().add_(self.eps)
        weights.addcdiv_(first, denominator, value=self.scale)
        stochastic_bf16_into(exp_avg, first, self.generator)
        stochastic_bf16_into(exp_avg_sq, second, self.generator)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a view: in-place updates reach the parameter), or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
