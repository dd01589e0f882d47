"""A hand-written Llama forward pass over an explicit KV cache, reusing a transformers model's weights.

What this is: `LlamaWeights.from_model` (the HF module's weights, QKV and gate/up fused, in the compute
dtype), `forward` (one batched step: T new tokens per row appended at each row's own position, K/V written
into a caller-owned cache tensor, logits for one chosen position per row) and `best_dtype` (bf16 when the
CPU has native bf16 matmuls, else fp32). The cache is one tensor `[2, layers, rows, kv_heads, capacity,
head_dim]`; a row's tokens occupy positions `[0, length)`, rows of different lengths are padded on the right
and hidden by a boolean attention mask, so one decode step serves every running sequence. When every row
starts with the same tokens (a shared prompt prefix), a decode step attends to that prefix once for the whole
batch and merges it with each row's own part by log-sum-exp; that uses PyTorch's private CPU flash-attention
op (`aten._scaled_dot_product_flash_attention_for_cpu`), the public SDPA returns no log-sum-exp.

`forward(..., exact=True)` is the batch-invariant variant (`engine.cached.deterministic`): a row's logits and
K/V are then a function of its own tokens and positions only, whatever the other rows, the padding, the
number of tokens per call, or whether earlier positions came from a prefill or a decode step. Measured on
this CPU (torch 2.x, AVX-512 BF16), what breaks that in the default path and what the exact path does:
- oneDNN-prepacked matmuls (`pack_weight`) gave bit-identical rows for any row count from 2 up and any row
  position, in bf16 and fp32, but a lone bf16 row (M = 1) rounded differently; unpacked fp32 `F.linear` was
  not invariant at all. The exact path needs packed weights (`LlamaWeights.from_model(pack=True)`) and
  multiplies a lone row as two (`linear_rows`).
- masked attention over a batch's longest row changed a row's output with the padded key length: the CPU
  flash-attention kernel walks keys in blocks of 512 (one block of all keys when there are fewer), and its
  vector loops over a block end differently with the block's length. The exact path (`_exact`) pads the
  key length to a multiple of `EXACT_KEYS` (512), so every block of every call has one shape, and keys past
  a row's last position are masked: a wholly masked block adds exact zeros to the online softmax. In
  float32 a call's query rows are padded to a multiple of `QUERY_ROW_STEP`, in bf16 to a multiple of
  `BF16_ROW_STEP`: a call with fewer than 4 query rows (a decode step's 3 grouped heads) rounds
  differently. The shared-prefix cascade depends on which rows share the prefix, so the exact path does not
  use it. Measured without AMX: on AMX CPUs the kernel may pack bf16 blocks for calls of 64 or more query
  rows, which tests/integration/test_engine_cached.py (the real model, prefill against decode) would catch.

The math follows `transformers.models.llama.modeling_llama` step by step (RMSNorm in fp32, rotary from the
model's own `rotary_emb`, grouped-query attention through `torch.nn.functional.scaled_dot_product_attention`,
SiLU-gated MLP), so fp32 results agree with the HF model up to float rounding.

What this is not: a general model runner. Only `model_type == "llama"` is accepted (SmolLM2 is one); there
is no dropout (sampling never trains), no sliding window and no paged memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from agentrl.agent.engines.configs import Rounding
from agentrl.cpu import native_cpu_bf16
from agentrl.errors import ModelError

SUPPORTED_MODEL_TYPES = frozenset({"llama"})
EXACT_KEYS = 512
"""The exact path attends over a multiple of this many keys: PyTorch's CPU flash attention walks keys in
blocks of 512 (of fewer when a call has fewer keys), so every block then has one shape."""
QUERY_ROW_STEP = 32
"""In float32 the exact path pads a flash-attention call's query rows to a multiple of this: the CPU kernel
rounds a row differently when its block of (up to 32) query rows has fewer than 4 rows (measured), so every
block must be full."""
BF16_ROW_STEP = 4
"""In bf16 the exact path pads a call's query rows to a multiple of this: with the real model's grouped
heads, a decode step's 3 query rows per KV head (fewer than 4) rounded differently from the same rows inside
a prefill in 1-3% of positions (measured); padded to 4, none differed in 1,360 positions."""


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer; `qkv` is q_proj, k_proj and v_proj stacked, `gate_up` is gate_proj and up_proj."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o_proj: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class LlamaWeights:
    """Everything `forward` reads, in the compute dtype, plus the shapes it needs."""

    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor
    lm_head: torch.Tensor
    rotary: torch.nn.Module
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    dtype: torch.dtype

    @staticmethod
    def from_model(
        model: Any, dtype: torch.dtype, pack: bool | None = None, rounding: Rounding = "nearest"
    ) -> LlamaWeights:
        """The weights of a `LlamaForCausalLM`, copied into fused `dtype` tensors (no autograd).

        pack: prepack the matmul weights for oneDNN (`pack_weight`); None packs where it pays (bf16 on a CPU
        with native bf16). Packed tensors are opaque: only `linear` reads them.
        rounding: how fp32 becomes bf16: "nearest", or "dither" (`round_bf16`, each tensor with the same
        thresholds at every call, so rebuilding after an update moves the copy by the update in expectation).
        """
        check_supported(model)
        config = model.config
        inner = model.model  # type: ignore[attr-defined]
        if pack is None:
            pack = dtype == torch.bfloat16 and native_cpu_bf16()
        packer = pack_weight if pack else _identity
        cast = Caster(dtype, rounding)
        with torch.no_grad():
            layers = tuple(_layer_weights(layer, cast, packer) for layer in inner.layers)
            head_dim = int(
                getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            )
            return LlamaWeights(
                embed=cast(inner.embed_tokens.weight),
                layers=layers,
                final_norm=cast(inner.norm.weight),
                lm_head=packer(cast(model.lm_head.weight)),  # type: ignore[attr-defined]
                rotary=inner.rotary_emb,
                heads=int(config.num_attention_heads),
                kv_heads=int(config.num_key_value_heads),
                head_dim=head_dim,
                eps=float(config.rms_norm_eps),
                dtype=dtype,
            )

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def decode_tensors(self) -> list[torch.Tensor]:
        """The tensors one decode step reads in full (embedding rows are gathered, so only lm_head counts).
        Build the weights with `pack=False` to read them outside `linear`."""
        tensors = [self.final_norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.input_norm, layer.qkv, layer.o_proj, layer.post_norm, layer.gate_up, layer.down]
        return tensors


def check_supported(model: PreTrainedModel) -> None:
    """Raise `ModelError` unless `model` is a Llama-family causal LM this module can run."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES or not hasattr(model, "model"):
        raise ModelError(
            f"the cached engine runs Llama-architecture models only (got model_type={model_type!r}); "
            f"use engine kind 'hf' or build engines with make_engine(), which falls back to HFEngine"
        )
    if getattr(model.config, "hidden_act", "silu") != "silu" or getattr(model.config, "mlp_bias", False):
        raise ModelError("the cached engine needs a SiLU MLP without bias; use engine kind 'hf'")


def new_cache(weights: LlamaWeights, rows: int, capacity: int) -> torch.Tensor:
    """[2, layers, rows, kv_heads, capacity, head_dim] zeros in the compute dtype."""
    shape = (2, weights.num_layers, rows, weights.kv_heads, capacity, weights.head_dim)
    return torch.zeros(shape, dtype=weights.dtype)


def forward(
    weights: LlamaWeights,
    ids: torch.Tensor,
    starts: torch.Tensor,
    cache: torch.Tensor,
    logits_at: torch.Tensor,
    shared: int = 0,
    exact: bool = False,
) -> torch.Tensor:
    """[B, V] float32 logits at token `logits_at[b]` of each row, after appending `ids` to the cache.

    ids:       [B, T] new tokens; row b's tokens go to positions starts[b] .. starts[b] + T - 1 (rows may be
               right-padded: padding writes K/V past the row's real length, where nothing reads it)
    starts:    [B] tokens already cached per row
    cache:     [2, layers, B, kv_heads, capacity, head_dim], a view of the caller's cache; written in place
    logits_at: [B] index in 0..T-1 of the token whose next-token logits are returned
    shared:    leading positions holding the same tokens in every row (a shared prompt prefix); decode
               steps (T = 1) then attend to them once for the whole batch, reading row 0's copy
    exact:     batch-invariant attention (`_exact`; `shared` is ignored; the cache capacity must be a
               multiple of `EXACT_KEYS`): with weights built with `pack=True`, row b's results depend on
               its own ids and cached K/V only
    """
    batch, steps = ids.shape
    positions = starts[:, None] + torch.arange(steps)[None, :]  # [B, T]
    length = int(positions.max()) + 1
    if exact:  # whole key blocks; keys past a row's last position are masked
        length = -(-length // EXACT_KEYS) * EXACT_KEYS
    if length > cache.shape[4]:
        raise ModelError(f"KV cache capacity {cache.shape[4]} is too small for position {length - 1}")
    visible = torch.arange(length)[None, None, :] <= positions[:, :, None]  # [B, T, L]
    hidden = F.embedding(ids, weights.embed).float()  # the residual stream stays fp32
    rope = _rotary(weights, hidden, positions)
    slots = cache_slots(positions, weights.kv_heads, cache.shape[4])
    attend = _masked(visible[:, None])
    groups = weights.heads // weights.kv_heads
    if exact:
        attend = _exact(visible, groups, weights.dtype)
    elif steps == 1 and batch > 1 and 0 < shared <= int(starts.min()):
        own_mask = _additive(visible[:, None, :, shared:], weights.dtype)
        attend = functools.partial(_cascade, shared=shared, mask=own_mask)
    project = linear_rows if exact else linear
    for index, layer in enumerate(weights.layers):
        normed = rms_norm(hidden, layer.input_norm, weights.eps)
        hidden += _attention(weights, layer, normed, rope, cache[:, index], slots, length, attend, project)
        normed = rms_norm(hidden, layer.post_norm, weights.eps)
        gate, up = project(normed, layer.gate_up).chunk(2, dim=-1)
        hidden += project(F.silu(gate) * up, layer.down)  # in place, bf16 promoted: no fp32 copy first
    last = hidden[:, 0] if steps == 1 else hidden[torch.arange(batch), logits_at]  # [B, H]
    return project(rms_norm(last, weights.final_norm, weights.eps), weights.lm_head).float()


def teacher_forced_logprobs(
    weights: LlamaWeights,
    contexts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    temperature: float,
) -> list[list[float]]:
    """Per row, log_softmax(logits / T) of each completion token after its context, under `weights`, computed
    as the engine samples: the contexts prefilled (right-padded), then the completion fed one decode step at
    a time. For measuring what the sampler's own copy of the weights says about given tokens."""
    rows = len(contexts)
    longest = max((len(c) for c in completions), default=0)
    lengths = torch.tensor([len(c) for c in contexts])
    cache = new_cache(weights, rows, int(lengths.max()) + longest + 1)
    padded = torch.zeros(rows, int(lengths.max()), dtype=torch.long)
    for row, context in enumerate(contexts):
        padded[row, : len(context)] = torch.tensor(list(context))
    out: list[list[float]] = [[] for _ in range(rows)]
    with torch.inference_mode():
        logits = forward(weights, padded, torch.zeros(rows, dtype=torch.long), cache, lengths - 1)
        for step in range(longest):
            tokens = torch.tensor([c[step] if step < len(c) else 0 for c in completions])
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            for row, completion in enumerate(completions):
                if step < len(completion):
                    out[row].append(float(logprobs[row, tokens[row]]))
            at_first = torch.zeros(rows, dtype=torch.long)
            logits = forward(weights, tokens[:, None], lengths + step, cache, at_first)
    return out


def linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, or oneDNN's linear when `weight` was prepacked by `pack_weight` (same values)."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [None], "")
    return F.linear(inputs, weight, bias)


def linear_rows(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`linear` that multiplies a lone row ([1, H] or [1, 1, H]) as two copies of it: oneDNN's bf16 kernel
    rounds M = 1 differently from M >= 2 (measured on the down projection), so without this a request
    decoded alone would differ from the same request in a batch."""
    if inputs.numel() != inputs.shape[-1]:
        return linear(inputs, weight, bias)
    return linear(torch.cat([inputs, inputs], dim=-2), weight, bias)[..., :1, :]


def cache_slots(positions: torch.Tensor, kv_heads: int, capacity: int) -> torch.Tensor:
    """[B * T * KVH] rows of a layer's K (or V) cache viewed as [B * KVH * C, D] that receive each new
    token's head, in the order of K reshaped from [B, T, KVH, D]: (b * KVH + h) * C + positions[b, t]."""
    batch, steps = positions.shape
    heads = torch.arange(kv_heads)
    rows = torch.arange(batch)[:, None, None] * kv_heads + heads[None, None, :]  # [B, 1, KVH]
    return (rows * capacity + positions[:, :, None]).reshape(batch * steps * kv_heads)


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm on an fp32 `hidden`, returned in the weight's dtype."""
    scaled = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    return weight * scaled.to(weight.dtype)


Rope = tuple[torch.Tensor, torch.Tensor]
"""(cos, signed sin), each [B, T, 1, D] in the compute dtype (see `_rotary`)."""


def _rotary(weights: LlamaWeights, hidden: torch.Tensor, positions: torch.Tensor) -> Rope:
    """The model's rotary tables at `positions`, the first half of sin negated, so that HF's
    `x * cos + rotate_half(x) * sin` becomes `x * cos + roll(x, D / 2) * signed_sin`: the same products and
    sums (IEEE negation is exact), one roll instead of chunk, neg and cat."""
    cos, sin = weights.rotary(hidden, positions)  # [B, T, D]
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos.to(weights.dtype)[:, :, None], signed_sin.to(weights.dtype)[:, :, None]


def _apply_rotary(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """[B, T, heads, D] rotated; q and k heads are rotated in one call."""
    cos, signed_sin = rope
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


def _attention(
    weights: LlamaWeights,
    layer: LayerWeights,
    normed: torch.Tensor,
    rope: Rope,
    layer_cache: torch.Tensor,
    slots: torch.Tensor,
    length: int,
    attend: Attend,
    project: Callable[..., torch.Tensor] = linear,
) -> torch.Tensor:
    """[B, T, H] self-attention output; writes this step's K/V into `layer_cache` [2, B, KVH, C, D]."""
    batch, steps, _ = normed.shape
    heads, kv_heads, head_dim = weights.heads, weights.kv_heads, weights.head_dim
    qkv = project(normed, layer.qkv, layer.qkv_bias)
    query_key = qkv[..., : (heads + kv_heads) * head_dim].view(batch, steps, heads + kv_heads, head_dim)
    rotated = _apply_rotary(query_key, rope)  # [B, T, Hq + KVH, D]
    q, k = rotated[:, :, :heads], rotated[:, :, heads:]
    v = qkv[..., (heads + kv_heads) * head_dim :]
    # One index_copy_ per tensor into the [B * KVH * C, D] view (the layer's cache rows are contiguous).
    layer_cache[0].view(-1, head_dim).index_copy_(0, slots, k.reshape(-1, head_dim))
    layer_cache[1].view(-1, head_dim).index_copy_(0, slots, v.reshape(-1, head_dim))
    keys, values = layer_cache[0, :, :, :length], layer_cache[1, :, :, :length]
    # Grouped-query attention without copying K/V: the query heads sharing a KV head become extra query
    # rows of that head ([B, KVH, G*T, D]); heads are ordered so head h reads KV head h // G, as in HF.
    folded = q.transpose(1, 2).reshape(batch, kv_heads, heads // kv_heads * steps, head_dim)
    out = (
        attend(folded, keys, values)
        .to(q.dtype)
        .reshape(batch, heads, steps, head_dim)
        .transpose(1, 2)
        .reshape(batch, steps, heads * head_dim)
    )
    return project(out, layer.o_proj, layer.o_bias)


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(queries [B, KVH, G*T, D], keys [B, KVH, L, D], values) -> [B, KVH, G*T, D]."""


def _masked(visible: torch.Tensor) -> Attend:
    """Plain attention under a boolean mask [B, 1, T, L] (repeated over the G query heads of a KV head)."""

    def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        groups = queries.shape[2] // visible.shape[2]
        mask = visible if groups == 1 or visible.shape[2] == 1 else visible.repeat(1, 1, groups, 1)
        return F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask, scale=queries.shape[-1] ** -0.5
        )

    return attend


def _cascade(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, shared: int, mask: torch.Tensor
):
    """Decode attention split at `shared`: the common prefix once for all rows, then each row's own part.

    The two partial softmaxes are merged with their log-sum-exps (as in FlashAttention's split-K). The prefix
    part is one [KVH, B*G, P] product against row 0's copy of the prefix instead of B small ones.
    mask: additive [B, 1, 1, L - shared] over the per-row part.
    """
    batch, kv_heads, groups, head_dim = queries.shape
    scale = head_dim**-0.5
    together = queries.transpose(0, 1).reshape(1, kv_heads, batch * groups, head_dim)
    prefix_out, prefix_lse = _flash(together, keys[:1, :, :shared], values[:1, :, :shared], None, scale)
    prefix_out = prefix_out.view(kv_heads, batch, groups, head_dim).transpose(0, 1).float()
    prefix_lse = prefix_lse.view(kv_heads, batch, groups).transpose(0, 1)
    own_out, own_lse = _flash(queries, keys[:, :, shared:], values[:, :, shared:], mask, scale)
    total = torch.logaddexp(prefix_lse, own_lse)
    weight_prefix = torch.exp(prefix_lse - total)[..., None]
    return prefix_out * weight_prefix + own_out.float() * (1.0 - weight_prefix)


def _exact(visible: torch.Tensor, groups: int, dtype: torch.dtype) -> Attend:
    """Batch-invariant attention under `visible` [B, T, L] (L a multiple of `EXACT_KEYS`).

    One flash-attention call over all L keys: the CPU kernel walks keys in blocks of `EXACT_KEYS`, so with L
    a multiple of it every block has the same shape for every row and call, and blocks wholly past a row's
    last key (weight exactly 0 in the online softmax) leave its result bit-identical. Query rows are padded
    to a multiple of `QUERY_ROW_STEP` in float32 and of `BF16_ROW_STEP` in bf16 (see there).
    """
    batch, steps, _ = visible.shape
    real_rows = groups * steps
    step = QUERY_ROW_STEP if dtype == torch.float32 else BF16_ROW_STEP
    rows = -(-real_rows // step) * step
    # [B, 1, rows, L]: query row g*T + t (the folded GQA order of `_attention`) sees row t's keys
    by_row = F.pad(visible.repeat(1, groups, 1), (0, 0, 0, rows - real_rows), value=True)
    mask = _additive(by_row, dtype)[:, None]

    def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        padded = F.pad(queries, (0, 0, 0, rows - real_rows)) if rows > real_rows else queries
        out, _ = _flash(padded, keys, values, mask, queries.shape[-1] ** -0.5)
        return out[:, :, :real_rows]

    return attend


def _flash(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's CPU flash attention, which also returns the log-sum-exp [B, H, Lq] (fp32) of each query."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        queries, keys, values, 0.0, False, attn_mask=mask, scale=scale
    )
    return out, lse


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as an additive one (0 where visible, -inf elsewhere) in `dtype`."""
    return torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, float("-inf"))


def best_dtype() -> torch.dtype:
    """bfloat16 when the CPU multiplies bf16 natively (AMX or AVX-512 BF16), else float32."""
    return torch.bfloat16 if native_cpu_bf16() else torch.float32


def pack_weight(weight: torch.Tensor, rows: int = 32) -> torch.Tensor:
    """`weight` [out, in] reordered into oneDNN's blocked layout for `linear` (`rows` is a size hint; any
    row count works). Values are unchanged; on this EPYC (AVX-512 BF16, 1 thread) batch-32 decode matmuls
    took 20-30% less time than `F.linear`, which reorders the weight on every call. Falls back to the plain
    tensor where oneDNN cannot pack it."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, rows)
    except (RuntimeError, AttributeError):
        return weight


def _identity(weight: torch.Tensor) -> torch.Tensor:
    return weight


def _layer_weights(layer: Any, cast: Caster, packer: Callable[[torch.Tensor], torch.Tensor]):
    attention, mlp = layer.self_attn, layer.mlp
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    biases = [projection.bias for projection in projections]
    return LayerWeights(
        input_norm=cast(layer.input_layernorm.weight),
        qkv=packer(torch.cat([cast(projection.weight) for projection in projections])),
        qkv_bias=None if biases[0] is None else torch.cat([cast(b) for b in biases]),
        o_proj=packer(cast(attention.o_proj.weight)),
        o_bias=None if attention.o_proj.bias is None else cast(attention.o_proj.bias),
        post_norm=cast(layer.post_attention_layernorm.weight),
        gate_up=packer(torch.cat([cast(mlp.gate_proj.weight), cast(mlp.up_proj.weight)])),
        down=packer(cast(mlp.down_proj.weight)),
    )


DITHER_SEED = 0x5EED
"""The base seed of the dither thresholds; tensor n of a model (in `from_model`'s order) uses seed + n."""


class Caster:
    """Copies a model's tensors into the compute dtype, one after the other in a fixed order, so that with
    "dither" rounding the n-th tensor always gets the thresholds of seed `DITHER_SEED + n`."""

    def __init__(self, dtype: torch.dtype, rounding: Rounding) -> None:
        self.dtype, self.rounding, self.count = dtype, rounding, 0

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        self.count += 1
        if self.dtype == torch.bfloat16 and self.rounding == "dither":
            return round_bf16(tensor, DITHER_SEED + self.count)
        return tensor.detach().to(device="cpu", dtype=self.dtype).contiguous()


def round_bf16(tensor: torch.Tensor, threshold_seed: int) -> torch.Tensor:
    """[...] fp32 -> bf16 by stochastic rounding against a fixed pseudo-random threshold per element.

    bf16 keeps the top 16 bits of an fp32 value. Each element gets a threshold r, uniform in [0, 2^16) and
    drawn by a generator seeded with `threshold_seed`; adding r to the fp32 bits and dropping the low 16
    rounds the magnitude up exactly when the dropped bits plus r carry into bit 16. Over the draw of r this
    is unbiased (E[round(x)] = x). Because r is the same at every call (same seed, same element), a weight's
    bf16 value changes only when its fp32 master crosses its own threshold: a step d on a weight whose bf16
    ulp is u flips it by one ulp with probability |d| / u, so across many weights the copy moves by the
    update in expectation, where round-to-nearest drops every step smaller than u / 2.
    """
    source = tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()
    generator = torch.Generator().manual_seed(threshold_seed)
    threshold = torch.randint(0, 1 << 16, source.shape, generator=generator, dtype=torch.int32)
    bits = (source.view(torch.int32) + threshold) & -65536  # -65536 == 0xFFFF0000 as int32
    return bits.view(torch.float32).to(torch.bfloat16)
