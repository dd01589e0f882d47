"""The GPU check's bigger shapes and its update profile (issue 54): a 1.7B-shaped Llama trained with LoRA and
fully, and where one update's time goes.

What this is: `check_big_shape` (update and rollout tokens/s and MFU of a random model of SmolLM2-1.7B's
shape, full fine-tuning or LoRA rank 16, with the fused head: `gpu_update_checks.check_throughput`'s
measurement at that size) and `check_update_profile` (one PPO update of that model under `torch.profiler`,
its device time split by `categorise` into matmuls, attention, the loss's log-probs, the optimiser, copies
between host and device, and the rest). With `--small` (the CPU dry run) both use the check's tiny Llama
instead, so the code runs before it meets a GPU.

What this is not: a benchmark of this CPU (bench/ has those), or a kernel: it reports what holds the update
back, it does not change it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from agentrl.devtools.gpu_checks import Sizes, byte_tokenizer, matmul_parameters, tiny_llama
from agentrl.model_shapes import SHAPES

SMOLLM2_1P7B_SHAPE: dict[str, Any] = {
    "vocab_size": SHAPES["smollm2-1.7b"].vocab,
    "hidden_size": SHAPES["smollm2-1.7b"].hidden,
    "intermediate_size": SHAPES["smollm2-1.7b"].intermediate,
    "num_hidden_layers": SHAPES["smollm2-1.7b"].layers,
    "num_attention_heads": SHAPES["smollm2-1.7b"].heads,
    "num_key_value_heads": SHAPES["smollm2-1.7b"].kv_heads,
    "tie_word_embeddings": True,
}
"""SmolLM2-1.7B-Instruct's layer shapes (`agentrl.model_shapes.SHAPES`), random weights."""

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "softmax")),
    ("loss", ("logsumexp", "log_softmax", "gather", "scatter_add", "_headlogprobs", "_sampledlogprobs")),
    ("optimizer", ("adam", "_foreach", "clip_grad")),
    ("copies", ("memcpy", "htod", "dtoh", "copy_", "aten::to", "_to_copy", "pin_memory")),
    ("matmul", ("aten::mm", "addmm", "bmm", "matmul", "linear", "gemm", "cutlass", "sm90_xmma", "ampere_")),
)
"""Category of a profiler event by the first pattern its lower-cased name contains (checked in this order:
attention before matmul, whose kernels it calls; anything else is `other`)."""


def categorise(events: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(event name, self time) pairs -> each category's share of their total time (`CATEGORIES`, `other`);
    all zeros when there was no time."""
    totals = dict.fromkeys([name for name, _ in CATEGORIES] + ["other"], 0.0)
    for name, seconds in events:
        lowered = name.lower()
        found = next((category for category, keys in CATEGORIES if any(k in lowered for k in keys)), "other")
        totals[found] += seconds
    whole = sum(totals.values())
    return {name: (value / whole if whole > 0 else 0.0) for name, value in totals.items()}


def big_model(device: torch.device, sizes: Sizes, small: bool, dtype: torch.dtype, lora_rank: int) -> Any:
    """The 1.7B-shaped Llama (or with `small` the check's tiny one), built on `device` in `dtype`, with
    rank-`lora_rank` adapters on q and v when > 0."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.model_config import LoraSettings
    from agentrl.models import with_lora

    tokenizer = byte_tokenizer()
    pad = tokenizer.pad_token_id
    torch.manual_seed(0)
    model: Any
    if small:
        model = tiny_llama(sizes, len(tokenizer), pad_id=pad).to(device, dtype)
    else:
        config = LlamaConfig(**SMOLLM2_1P7B_SHAPE, max_position_embeddings=8192, pad_token_id=pad)
        with torch.device(device):
            model = LlamaForCausalLM(config)
        model = model.to(dtype=dtype)
    model.eval()
    if lora_rank > 0:
        model = with_lora(
            model, LoraSettings(rank=lora_rank, alpha=2 * lora_rank, targets=("q_proj", "v_proj"))
        )
    return model


def check_big_shape(
    device: torch.device, sizes: Sizes, dtype: torch.dtype, small: bool, lora_rank: int
) -> dict[str, Any]:
    """Update and rollout throughput of the 1.7B shape (`gpu_update_checks.check_throughput`'s measure)."""
    from agentrl.devtools.gpu_update_checks import measure_throughput

    model = big_model(device, sizes, small, dtype, lora_rank)
    result = measure_throughput(model, device, sizes, dtype, fused_head=True)
    result["lora_rank"] = lora_rank
    if lora_rank:  # the MFU counts 6N a token; LoRA computes no gradient of the frozen weights (about 4N)
        result["mfu_note"] = "6N a token counted; LoRA's backward skips the frozen weights' gradients"
    if device.type == "cuda":
        result["cuda_peak_gib"] = torch.cuda.max_memory_allocated(device) / 1024**3
    return result


def check_update_profile(
    device: torch.device, sizes: Sizes, dtype: torch.dtype, small: bool
) -> dict[str, Any]:
    """One PPO update of the 1.7B shape (full fine-tuning, fused head) under the profiler, after a warm-up:
    the device time (CPU time without CUDA) by category, and the ten longest operators."""
    from torch.profiler import ProfilerActivity, profile

    from agentrl.devtools.gpu_update_checks import random_samples, timed
    from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
    from agentrl.trainer.optim import make_optimizer
    from agentrl.trainer.update import ppo_update

    model = big_model(device, sizes, small, dtype, lora_rank=0)
    samples = random_samples(model.config.vocab_size, count=sizes.batch, length=sizes.sequence)
    update_cfg = UpdateConfig(micro_batch_size=8, fused_head=True)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-5))

    def update() -> None:
        ppo_update(model, optimizer, scheduler, samples, 0, LossConfig(), update_cfg)

    update()  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiled:
        seconds = timed(device, update)
    on_device = device.type == "cuda"
    events = [
        (event.key, (event.self_device_time_total if on_device else event.self_cpu_time_total) / 1e6)
        for event in profiled.key_averages()
    ]
    longest = sorted(events, key=lambda item: item[1], reverse=True)[:10]
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "matmul_params": matmul_parameters(model),
        "update_s": seconds,
        "profiled_s": sum(value for _, value in events),
        "shares": categorise(events),
        "longest": [{"name": name, "s": value} for name, value in longest],
    }
