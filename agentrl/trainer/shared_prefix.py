"""A mini batch's micro batches, and their logits with the prefix a group shares run once.

Shared prefix (`update.shared_prefix`, on by default): the G episodes of a group start with the same first
prompt, so a micro batch is a pack of group members (`samples.plan_packs`) whose shared prefix runs through
the model once, with the autograd graph kept: its keys and values are expanded to the G suffix rows, which
attend to them at their true positions (`shared_prefix_logits`). Forward and backward then cost what the
distinct tokens cost, and the loss, gradients and metrics are those of the unshared batches (the loss is a
per-token function of log-probs that do not depend on how sequences are batched; tested to fp32 tolerance).
Samples outside any pack (no group, early divergence, `min_shared_tokens`) run as before. It falls back to
the unshared path, logging why, for models it is not made for (`shared_prefix_unsupported`) and with
several ranks: FSDP2's per-layer hooks assume one forward call per layer before the backward.

Trees (docs/tree_rollouts.md): the members of a tree share their tokens up to a branch point, and the turns
before it were trained by one member only, the one that played them (the others hold copies with no loss).
A pack whose prefix holds such trained tokens (`samples.trains_prefix`) also projects the prefix onto the
vocabulary (`prefix_and_row_logits`), and the owner's log-probs on the prefix come from those logits
(`pack_token_logprobs`), in its own row: the per-row loss terms are those of the unshared batch. A group of
several trees (`rollout.tree.trees`) shares only the first prompt across its trees; it is packed tree by
tree (`TrainSample.tree_key`), so that each tree's root prefix runs once per pack.

What this is: `local_packs` (this rank's micro batches), `collate_pack` (their tensors), `pack_logits` /
`forward_logits` (their logits), `pack_token_logprobs` (their log-probs at the loss columns' positions) and
the shared-prefix forward itself. What this is not: the loss or the optimiser step (`update.py`), or the
packing plan (`samples.plan_packs`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import TypeVar

import torch
from transformers import DynamicCache

from agentrl.trainer.configs import UpdateConfig
from agentrl.trainer.fused_head import head_token_logprobs, hidden_states_only
from agentrl.trainer.losses import sampled_token_logprobs
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.samples import (
    Pack,
    TrainSample,
    along_columns,
    collate,
    collate_shared,
    plan_packs,
    trains_prefix,
)
from agentrl.trainer.transformers_compat import (
    activation_checkpointing,
    cache_keyword,
    cache_tensors,
    only_last_logits,
    transformers_model,
)

LOG = logging.getLogger(__name__)
T = TypeVar("T")

SHARED_PREFIX_MODEL_TYPES = frozenset({"llama"})
"""Architectures the shared-prefix forward is tested on (tiny random Llama, SmolLM2): a plain full-attention
KV cache and rotary positions from `position_ids`."""


def local_packs(
    samples: Sequence[TrainSample], update_cfg: UpdateConfig, parallel: DataParallel
) -> list[Pack]:
    """This rank's micro batches of `samples`: with `shared_prefix` (one process only), the shared-prefix
    packs, then the samples in no pack, every world_size-th of them in chunks of `micro_batch_size`, as
    without sharing."""
    share = update_cfg.shared_prefix and parallel.world_size == 1
    packs = plan_packs(samples, update_cfg.micro_batch_size, update_cfg.min_shared_tokens) if share else []
    packed = {index for pack in packs for index in pack.indices}
    rest = parallel.shard([index for index in range(len(samples)) if index not in packed])
    return [*packs, *(Pack(tuple(chunk)) for chunk in _chunks(rest, update_cfg.micro_batch_size))]


def collate_pack(samples: Sequence[TrainSample], pack: Pack, pad_id: int) -> dict[str, torch.Tensor]:
    """The tensors of one micro batch: `collate_shared` for a shared-prefix pack, else `collate`."""
    members = [samples[index] for index in pack.indices]
    return collate_shared(members, pack.shared, pad_id) if pack.shared else collate(members, pad_id)


@dataclasses.dataclass(frozen=True)
class PackLogits:
    """A micro batch's logits: `rows` [B, S, V] of its input rows (the suffix rows of a pack) and, for a pack
    that trains its prefix (`samples.trains_prefix`), `prefix` [1, K, V] of the prefix; else None. With
    `head` (`update.fused_head`), `rows` and `prefix` are the hidden states ([B, S, H], [1, K, H]) that the
    head's weight `head` ([V, H]) projects, and the log-probs are taken chunk by chunk (`fused_head`)."""

    rows: torch.Tensor
    prefix: torch.Tensor | None = None
    head: torch.Tensor | None = None


def pack_logits(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], fused_head: bool = False
) -> PackLogits:
    """The logits of a collated batch: its rows', plus its prefix's where the pack trains prefix tokens;
    with `fused_head`, the hidden states and the head's weight in their place (`PackLogits`)."""
    if not fused_head:
        return _pack_logits(model, batch)
    with hidden_states_only(model) as weight:
        states = _pack_logits(model, batch)
    return dataclasses.replace(states, head=weight)


def _pack_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> PackLogits:
    if trains_prefix(batch):
        prefix, rows = prefix_and_row_logits(
            model, batch["prefix_ids"], batch["input_ids"], batch["attention_mask"]
        )
        return PackLogits(rows, prefix)
    return PackLogits(forward_logits(model, batch))


def pack_token_logprobs(
    logits: PackLogits, batch: dict[str, torch.Tensor], temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] log-probs and entropies of the batch's tokens (`losses.sampled_token_logprobs`) at the positions
    of its loss columns: the rows' ([B, S]), or for a pack that trains its prefix the whole sequences'
    ([B, K + S]: the prefix's values, read from its own logits, in every row; the loss mask keeps the
    owner's). Every row's position 0 holds 0, as it does unshared for the first token of a sequence; for a
    suffix row that token K is trained in no member (`samples.shared_length`)."""
    logprobs, entropy = _token_logprobs(logits.rows, logits.head, batch["input_ids"], temperature)
    if logits.prefix is None:
        return logprobs, entropy
    head_logprobs, head_entropy = _token_logprobs(
        logits.prefix, logits.head, batch["prefix_ids"], temperature
    )
    return along_columns(logprobs, head_logprobs), along_columns(entropy, head_entropy)


def _token_logprobs(
    found: torch.Tensor, head: torch.Tensor | None, ids: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies from logits, or from hidden states and the head's weight."""
    if head is None:
        return sampled_token_logprobs(found, ids, temperature)
    return head_token_logprobs(found, head, ids, temperature)


def forward_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, L, V] logits of a collated batch's rows (suffix rows for a shared-prefix pack; a pack that trains
    its prefix needs `pack_logits` for the prefix's)."""
    if "prefix_ids" in batch:
        return shared_prefix_logits(model, batch["prefix_ids"], batch["input_ids"], batch["attention_mask"])
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def shared_prefix_logits(
    model: torch.nn.Module, prefix_ids: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """[1, K] prefix ids, [G, S] suffix rows and their [G, S] padding mask -> [G, S, V] logits: row g's
    position j is the logit at position K + j of the full sequence prefix + row g, as a plain forward of it
    would give (to float rounding). Only the prefix's last position is projected onto the vocabulary."""
    return _prefix_then_rows(model, prefix_ids, input_ids, attention_mask, prefix_logits=False)[1]


def prefix_and_row_logits(
    model: torch.nn.Module, prefix_ids: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`shared_prefix_logits` plus the prefix's own [1, K, V] logits: (prefix logits, row logits)."""
    return _prefix_then_rows(model, prefix_ids, input_ids, attention_mask, prefix_logits=True)


def _prefix_then_rows(
    model: torch.nn.Module,
    prefix_ids: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix_logits: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix's logits (every position's with `prefix_logits`, else the last one's) and the rows'.

    The prefix runs once, in the caller's grad mode: its keys and values stay in the autograd graph, so the
    backward pass of every row flows into the one prefix pass. Each micro batch gets a fresh cache, expanded
    (a view) to the G rows; DynamicCache concatenates the rows' own keys and values onto it, out of place.
    """
    rows, length = input_ids.shape
    shared = prefix_ids.shape[1]
    keyword = cache_keyword(model)
    keep = {} if prefix_logits else only_last_logits(model)
    prefix = model(input_ids=prefix_ids, use_cache=True, **keep)
    cache = DynamicCache()
    for layer, (keys, values) in enumerate(cache_tensors(getattr(prefix, keyword))):
        cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), layer)
    mask = torch.cat([attention_mask.new_ones(rows, shared), attention_mask], dim=1)
    positions = torch.arange(shared, shared + length, device=input_ids.device).expand(rows, -1)
    suffix = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, **{keyword: cache})
    return prefix.logits, suffix.logits


def shared_prefix_unsupported(model: torch.nn.Module) -> str | None:
    """Why `shared_prefix_logits` cannot run on `model`, or None when it can."""
    base = transformers_model(model)
    config = getattr(base, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SHARED_PREFIX_MODEL_TYPES:
        return f"model_type {model_type!r} is not one it is tested on ({sorted(SHARED_PREFIX_MODEL_TYPES)})"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return "the model has sliding-window or linear-attention layers"
    if activation_checkpointing(base):
        return "gradient checkpointing turns the KV cache off in training"
    return None


def sharing_where_supported(
    update_cfg: UpdateConfig,
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    parallel: DataParallel,
) -> UpdateConfig:
    """`update_cfg` with `shared_prefix` off where it cannot run (the reason logged once)."""
    if not update_cfg.shared_prefix:
        return update_cfg
    reason = next(
        (why for why in map(shared_prefix_unsupported, filter(None, (model, ref_model))) if why is not None),
        None,
    )
    if parallel.world_size > 1:
        reason = "FSDP2 (trainer.nproc > 1) unshards each layer once per forward call; the prefix is a second"
    if reason is None:
        return update_cfg
    _log_once(f"update.shared_prefix: running every episode unshared: {reason}")
    return dataclasses.replace(update_cfg, shared_prefix=False)


@functools.cache
def _log_once(message: str) -> None:
    LOG.warning(message)


def _chunks(samples: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(samples), size):
        yield samples[start : start + size]
