"""The trainer's config sections (`loss.*`, `optim.*`, `update.*`, `sft.*`), importable without torch.

What this is: frozen dataclasses, each default in one place, validated when built (a `ConfigError` says
what to change). `agentrl.config` composes them into the run config without loading torch.

What this is not: the code that reads them: the losses (`losses.py`), the optimiser (`optim.py`), the PPO
update (`update.py`) and SFT's update (`sft_update.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrl.errors import ConfigError

Aggregation = Literal["token_mean", "seq_mean_token_mean", "constant"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean_token_mean", "constant")


@dataclass(frozen=True)
class LossConfig:
    """The policy loss.

    clip_low, clip_high: the PPO ratio is clipped to [1 - clip_low, 1 + clip_high] (asymmetric "clip-higher",
                         DAPO arXiv 2503.14476).
    kl_coef:             weight of the k3 KL to a reference policy (needs a reference model).
    entropy_coef:        weight of an entropy bonus (subtracted from the loss).
    aggregation:         token_mean (every sampled token weighs the same), seq_mean_token_mean (each
                         sequence's token mean, then the mean over sequences), constant (each sequence's token
                         sum divided by `constant_normaliser`, then the mean over sequences; Dr.GRPO).
    constant_normaliser: the constant of `aggregation="constant"` (typically the generation budget).
    tis_cap:             truncated importance sampling, for a sampler whose log-probs differ from the
                         trainer's (bf16 kernels, another engine): when > 0, the PPO ratio is taken against
                         the trainer's own log-probs of the sampling weights, and each token's advantage is
                         weighted by min(pi_trainer / pi_sampler, tis_cap) (Yao et al. 2025); 0: off.
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    aggregation: Aggregation = "token_mean"
    constant_normaliser: float = 1024.0
    tis_cap: float = 0.0

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(f"loss.aggregation {self.aggregation!r} is unknown; use one of {AGGREGATIONS}")
        if self.constant_normaliser <= 0:
            raise ConfigError("loss.constant_normaliser must be > 0")
        if self.tis_cap < 0:
            raise ConfigError("loss.tis_cap must be >= 0 (0 turns truncated importance sampling off)")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its schedule.

    lr:           the learning rate (after warm-up)
    weight_decay: AdamW's decoupled weight decay
    betas:        AdamW's (beta1, beta2)
    grad_clip:    the global gradient norm is clipped to this; <= 0 disables clipping
    warmup_steps: optimiser steps over which the lr ramps up linearly from lr / warmup_steps; 0: none
    state_dtype:  float32 (torch's AdamW) | bfloat16 (the two moments in bf16, stochastically rounded:
                  half the optimiser's memory; its effect on learning is not measured yet, so not the
                  default: `agentrl/trainer/bf16_adamw.py`)
    """

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    warmup_steps: int = 0
    state_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.state_dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"optim.state_dtype={self.state_dtype!r} is unknown; use float32 or bfloat16")


@dataclass(frozen=True)
class UpdateConfig:
    """How one update walks its samples.

    ppo_epochs:       passes over the samples.
    micro_batch_size: samples per forward/backward (memory bound).
    mini_batches:     optimiser steps per epoch (the samples are split into this many contiguous slices).
    autocast_bf16:    run forward passes under CPU bfloat16 autocast where the CPU multiplies bf16 natively
                      (AMX / AVX-512 BF16); ignored elsewhere, where emulated bf16 is far slower than fp32.
    shared_prefix:    run the prefix a group's episodes share (their first prompt; a tree's members, up to
                      their branch point) once per micro batch instead of once per episode
                      (`agentrl/trainer/shared_prefix.py`); same loss and gradients.
    min_shared_tokens: groups sharing fewer leading tokens than this run unshared.
    activation_checkpointing: recompute each decoder layer's activations in the backward pass instead of
                      keeping them (less memory; each layer's forward runs twice); turns the shared-prefix
                      update off (it needs the KV cache that checkpointing turns off).
    recompute_mlp:    recompute each decoder layer's MLP in the backward pass instead of keeping its inner
                      activations (`agentrl/trainer/recompute.py`): most of what checkpointing saves, at the
                      cost of the MLPs' forward once more; attention and the shared-prefix update unchanged.
    fused_head:       project the hidden states onto the vocabulary a chunk of positions at a time inside
                      the log-prob computation, so the [B, L, vocab] logits and their gradient are never
                      whole (`agentrl/trainer/fused_head.py`; one process, Llama-family heads); the head's
                      matmul runs once more in the backward pass.
    return_free_memory: give the pages the allocator keeps free back to the operating system after the
                      engine's caches are dropped and again after the update (`agentrl.memory.
                      return_free_memory`), so the update does not sit on top of what the rollouts freed
                      and the next rollouts not on top of what the update freed; the pages are faulted in
                      again when next used (on plan 3b's step 1.02x the update's seconds, docs/memory.md).
    """

    ppo_epochs: int = 1
    micro_batch_size: int = 4
    mini_batches: int = 1
    autocast_bf16: bool = False
    shared_prefix: bool = True
    min_shared_tokens: int = 32
    activation_checkpointing: bool = False
    recompute_mlp: bool = False
    fused_head: bool = False
    return_free_memory: bool = True

    def __post_init__(self) -> None:
        if min(self.ppo_epochs, self.micro_batch_size, self.mini_batches, self.min_shared_tokens) < 1:
            raise ConfigError(
                "update.ppo_epochs, update.micro_batch_size, update.mini_batches and "
                "update.min_shared_tokens must be >= 1"
            )


@dataclass(frozen=True)
class SFTConfig:
    """`agentrl sft`: supervised fine-tuning on demonstrations (`agentrl demos`).

    demos:      the demonstrations file `agentrl demos` wrote (runs/<name>/demos.jsonl); `--demos PATH`.
    epochs:     passes over the demonstrations.
    batch_size: demonstrations (episodes) per optimiser step; `update.micro_batch_size` of them per
                forward/backward.
    lr:         the SFT run's learning rate (it replaces `optim.lr`, which is the RL run's; `optim.*` gives
                the rest: warm-up, clipping, weight decay).
    aggregation: how token losses are averaged: token_mean (every demonstrated token weighs the same) or
                seq_mean_token_mean (every demonstration weighs the same).
    """

    demos: str | None = None
    epochs: int = 3
    batch_size: int = 8
    lr: float = 5e-5
    aggregation: Aggregation = "token_mean"

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ConfigError("sft.epochs and sft.batch_size must be >= 1")
        if self.lr <= 0:
            raise ConfigError(f"sft.lr must be > 0, got {self.lr}")
        if self.aggregation not in ("token_mean", "seq_mean_token_mean"):
            raise ConfigError(
                f"sft.aggregation must be token_mean or seq_mean_token_mean, got {self.aggregation!r}"
            )
