"""The update-side checks of `make test-gpu`: FSDP2 over NCCL on one rank, the shared-prefix update, LoRA,
checkpoint and exact resume, and the throughput line (`agentrl/devtools/gpu_check.py` runs each alone).

What this is: functions that run the trainer's own update code (`ppo_update`, `shard_model`,
`checkpoint`, `with_lora`, the HF engine) on fixed random samples on a device, compare it with a reference
and return what they measured, or raise. What this is not: the trainer runs on the maze (`gpu_checks.py`).
Comparisons in bf16 use bf16 tolerances and report the largest difference, so a failure says by how much.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.devtools.gpu_checks import Sizes, byte_tokenizer, matmul_parameters, shaped_llama, tiny_llama
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import ppo_update

UPDATE = UpdateConfig(micro_batch_size=2, mini_batches=2, min_shared_tokens=8)
OPTIM = OptimConfig(lr=1e-3, grad_clip=1.0, warmup_steps=3)


def random_samples(vocab: int, count: int = 5, length: int = 12, seed: int = 1) -> list[TrainSample]:
    """Sequences of different lengths with a prompt part (mask 0) and a sampled part (mask 1)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for index in range(count):
        size = length + 3 * index
        mask = torch.cat([torch.zeros(5), torch.ones(size - 5)])
        out.append(
            TrainSample(
                input_ids=torch.randint(0, vocab, (size,), generator=generator),
                loss_mask=mask,
                old_logprobs=-4.0 * mask + 0.1 * torch.rand(size, generator=generator) * mask,
                advantages=(1.0 if index % 2 else -0.5) * mask,
            )
        )
    return out


def grouped_samples(vocab: int, groups: int = 2, size: int = 3, prompt: int = 24) -> list[TrainSample]:
    """`groups` groups of `size` members that start with the same `prompt` tokens (mask 0), then differ."""
    generator = torch.Generator().manual_seed(2)
    out = []
    for group in range(groups):
        shared = torch.randint(1, vocab, (prompt,), generator=generator)
        for member in range(size):
            length = 4 + 3 * member + group
            mask = torch.cat([torch.zeros(prompt), torch.ones(length)])
            out.append(
                TrainSample(
                    input_ids=torch.cat([shared, torch.randint(1, vocab, (length,), generator=generator)]),
                    loss_mask=mask,
                    old_logprobs=-4.0 * mask + 0.1 * torch.rand(prompt + length, generator=generator) * mask,
                    advantages=(1.0 if member % 2 else -0.5) * mask,
                    group_key=f"g{group}",
                )
            )
    return out


def small_llama(device: torch.device, seed: int = 0) -> Any:
    """The 2-layer, 64-wide tiny Llama over a 96-token vocabulary, fp32, on `device`."""
    return tiny_llama(Sizes(hidden=64, layers=2), 96, seed=seed).to(device)


def max_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between same-named tensors (keys must match)."""
    if set(first) != set(second):
        raise AssertionError(f"different tensors: {sorted(set(first) ^ set(second))}")
    return max(float((first[k].float().cpu() - second[k].float().cpu()).abs().max()) for k in first)


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


# ---- (b) FSDP2 over NCCL, one rank -------------------------------------------------------------------


def check_fsdp2(device: torch.device, workdir: Path) -> dict[str, Any]:
    """One FSDP2 rank on the trainer's backend (NCCL for CUDA tensors): a sharded update close to the plain
    one (bf16 compute on GPU), the full-state-dict gather, CPU-tensor collectives, and a sharded checkpoint
    that resumes exactly: two updates in a row equal one, the save, a fresh sharded model and one more."""
    import torch.distributed as dist

    from agentrl.trainer import checkpoint, distributed

    backend = distributed.process_group_backend(device.type == "cuda")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        one_rank = DataParallel(rank=0, world_size=1)
        update = dataclasses.replace(UPDATE, shared_prefix=False)  # what several ranks run
        plain = small_llama(device)
        optimizer, scheduler = make_optimizer(plain, OPTIM)
        plain_metrics = ppo_update(plain, optimizer, scheduler, random_samples(96), 0, LossConfig(), update)
        sharded = distributed.shard_model(small_llama(device))
        optimizer, scheduler = make_optimizer(sharded, OPTIM)
        metrics = ppo_update(
            sharded, optimizer, scheduler, random_samples(96), 0, LossConfig(), update, parallel=one_rank
        )
        gathered = distributed.full_state_dict(sharded)
        difference = max_difference(gathered, dict(plain.state_dict()))
        loss_difference = abs(metrics["loss"] - plain_metrics["loss"])
        # bf16 compute (the GPU policy) against fp32: Adam's first steps move each weight by about the lr
        # (<= 6.7e-4 here), so a near-zero gradient whose sign bf16 flips moves a weight by twice that
        tolerance = (5e-3, 5e-2) if device.type == "cuda" else (1e-5, 1e-5)
        if difference > tolerance[0] or loss_difference > tolerance[1]:
            raise AssertionError(
                f"sharded vs plain: weights differ by {difference}, loss by {loss_difference}"
            )
        total = torch.tensor([1.5], dtype=torch.float64)  # DataParallel.sum's CPU tensor
        dist.all_reduce(total)
        gathered_objects: list[Any] = [None]
        dist.all_gather_object(gathered_objects, {"rank": 0})
        resume = sharded_resume_difference(device, workdir, one_rank, update, checkpoint, distributed)
        if resume > 1e-6:
            raise AssertionError(f"the resumed sharded run differs from the straight one by {resume}")
        return {
            "backend": backend,
            "weights_vs_plain": difference,
            "loss_vs_plain": loss_difference,
            "resume_difference": resume,
        }
    finally:
        dist.destroy_process_group()


def sharded_resume_difference(
    device: torch.device,
    workdir: Path,
    one_rank: DataParallel,
    update: UpdateConfig,
    checkpoint: Any,
    distributed: Any,
) -> float:
    """Largest weight difference between two sharded updates in a row and update, save, restore, update.

    `checkpoint.save` takes its sharded path only with several ranks, so with one GPU the check calls that
    path's two halves (`_save_shards`, `_load_shards`) directly."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    straight = distributed.shard_model(small_llama(device))
    optimizer, scheduler = make_optimizer(straight, OPTIM)
    for _ in range(2):
        ppo_update(
            straight, optimizer, scheduler, random_samples(96), 0, LossConfig(), update, parallel=one_rank
        )
    first = distributed.shard_model(small_llama(device))
    optimizer, first_scheduler = make_optimizer(first, OPTIM)
    ppo_update(
        first, optimizer, first_scheduler, random_samples(96), 0, LossConfig(), update, parallel=one_rank
    )
    saved = workdir / "sharded-checkpoint"
    saved.mkdir(parents=True)
    checkpoint._save_shards(saved, first, optimizer, one_rank)
    resumed = distributed.shard_model(
        small_llama(device, seed=5)
    )  # other weights: the load must replace them
    optimizer, scheduler = make_optimizer(resumed, OPTIM)
    checkpoint._load_shards(saved, resumed, optimizer, one_rank)
    scheduler.load_state_dict(first_scheduler.state_dict())  # not in the shards: rank 0's trainer.pt holds it
    ppo_update(resumed, optimizer, scheduler, random_samples(96), 0, LossConfig(), update, parallel=one_rank)
    return max_difference(distributed.full_state_dict(straight), distributed.full_state_dict(resumed))


# ---- (b) shared prefix, LoRA, checkpoint -------------------------------------------------------------


def check_shared_prefix(device: torch.device) -> dict[str, Any]:
    """In fp32 on `device`: the shared-prefix update's loss, metrics and every gradient equal the unshared
    update's, with and without truncated importance sampling (`loss.tis_cap`)."""
    differences = {}
    for name, loss in (("plain", LossConfig(kl_coef=0.0)), ("tis", LossConfig(tis_cap=1.5))):
        shared = gradients_of_one_update(device, loss, UpdateConfig(micro_batch_size=4, min_shared_tokens=8))
        unshared = gradients_of_one_update(
            device, loss, UpdateConfig(micro_batch_size=4, shared_prefix=False)
        )
        if set(shared[0]) != set(unshared[0]):
            raise AssertionError(
                f"shared vs unshared ({name}): other metrics {set(shared[0]) ^ set(unshared[0])}"
            )
        close = all(
            torch.allclose(grad, unshared[1][key], rtol=1e-4, atol=1e-6) for key, grad in shared[1].items()
        ) and all(
            math.isclose(value, unshared[0][key], rel_tol=1e-4, abs_tol=1e-6)
            for key, value in shared[0].items()
        )
        differences[name] = {
            "gradients": max_difference(shared[1], unshared[1]),
            "metrics": max(abs(shared[0][k] - unshared[0][k]) for k in unshared[0]),
        }
        if not close:
            raise AssertionError(f"shared vs unshared ({name}): largest differences {differences[name]}")
    return differences


def gradients_of_one_update(
    device: torch.device, loss: LossConfig, update: UpdateConfig
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Metrics and every gradient of one update with lr 0 (so the gradients stay readable)."""
    model = small_llama(device)
    optim = OptimConfig(lr=0.0, grad_clip=0.0)
    optimizer, scheduler = make_optimizer(model, optim)
    metrics = ppo_update(model, optimizer, scheduler, grouped_samples(96), 0, loss, update, optim_cfg=optim)
    return metrics, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def check_lora(device: torch.device, workdir: Path) -> dict[str, Any]:
    """LoRA on `device`: an update moves only the adapters; saved adapters load back to the same logits."""
    from agentrl.model_config import LoraSettings
    from agentrl.models import with_lora

    model = with_lora(small_llama(device), LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj")))
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    metrics = ppo_update(model, optimizer, scheduler, random_samples(96), 0, LossConfig(), UpdateConfig())
    moved = [
        name for name, p in model.named_parameters() if name in frozen and not torch.equal(p, frozen[name])
    ]
    if moved or not metrics["grad_norm"] > 0:
        raise AssertionError(f"frozen weights moved: {moved[:3]} (grad_norm {metrics['grad_norm']})")
    model.save_pretrained(workdir / "adapters")
    reloaded = with_lora(small_llama(device), LoraSettings(adapter=str(workdir / "adapters")))
    ids = random_samples(96)[0].input_ids[None].to(device)
    with torch.no_grad():
        difference = float((model(input_ids=ids).logits - reloaded(input_ids=ids).logits).abs().max())
    if difference > 1e-5:
        raise AssertionError(f"reloaded adapters give other logits (max difference {difference})")
    return {"grad_norm": metrics["grad_norm"], "reload_difference": difference}


def check_checkpoint_resume(device: torch.device, workdir: Path) -> dict[str, Any]:
    """One process on `device`: two updates in a row equal one update, `checkpoint.save`, a fresh model and
    optimiser, `checkpoint.load` and one more update; the RNG streams (the device's too) come back."""
    from agentrl.trainer import checkpoint

    torch.use_deterministic_algorithms(True, warn_only=True)
    straight = small_llama(device)
    optimizer, scheduler = make_optimizer(straight, OPTIM)
    for _ in range(2):
        ppo_update(straight, optimizer, scheduler, random_samples(96), 0, LossConfig(), UpdateConfig())
    first = small_llama(device)
    optimizer, scheduler = make_optimizer(first, OPTIM)
    ppo_update(first, optimizer, scheduler, random_samples(96), 0, LossConfig(), UpdateConfig())
    state = checkpoint.CheckpointState(step=1, run_id="gpu-check", weights_version=1)
    saved = checkpoint.save(workdir / "run", state, first, optimizer, scheduler)
    draws = torch.rand(4, device=device), torch.rand(4)
    resumed = small_llama(device, seed=5)
    optimizer, scheduler = make_optimizer(resumed, OPTIM)
    checkpoint.load(saved, resumed, optimizer, scheduler)
    redraws = torch.rand(4, device=device), torch.rand(4)
    if not all(torch.equal(a, b) for a, b in zip(draws, redraws, strict=True)):
        raise AssertionError(f"the RNG streams did not come back: {draws} vs {redraws}")
    ppo_update(resumed, optimizer, scheduler, random_samples(96), 0, LossConfig(), UpdateConfig())
    difference = max_difference(parameters(straight), parameters(resumed))
    if difference > 1e-6:
        raise AssertionError(f"the resumed run differs from the straight one by {difference}")
    return {"difference": difference, "checkpoint": saved.name}


# ---- (c) throughput ----------------------------------------------------------------------------------


def check_throughput(
    device: torch.device, sizes: Sizes, dtype: torch.dtype, shape: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The device's measured bf16 matmul peak, then the model's update and rollout tokens/s and their MFU
    against that peak (training 6N + 12 * layers * hidden * sequence FLOPs a token, sampling 2N). The model
    is the tiny Llama of `sizes`, or a random one of `shape`'s sizes (e.g. SmolLM2-135M's); its tokens are
    random ids of its vocabulary (the byte tokenizer decodes the ones past its own to nothing)."""
    tokenizer = byte_tokenizer()
    pad = tokenizer.pad_token_id
    built = tiny_llama(sizes, len(tokenizer), pad_id=pad) if shape is None else shaped_llama(shape, pad)
    return measure_throughput(built.to(device, dtype), device, sizes, dtype)


def measure_throughput(
    model: Any, device: torch.device, sizes: Sizes, dtype: torch.dtype, fused_head: bool = False
) -> dict[str, Any]:
    """`check_throughput`'s measurement of a built `model` (on `device`, in `dtype`); `fused_head` runs the
    update with `update.fused_head` (the bigger shapes' checks, `gpu_profile.py`)."""
    from agentrl.agent.engines.base import SamplingParams
    from agentrl.agent.engines.hf import HFEngine

    peak = matmul_peak_flops(device, sizes.peak_size)
    tokenizer = byte_tokenizer()
    config = model.config  # a peft wrapper forwards it to the model it wraps
    layers, hidden = config.num_hidden_layers, config.hidden_size
    params = matmul_parameters(model)
    samples = random_samples(config.vocab_size, count=sizes.batch, length=sizes.sequence)
    update_cfg = UpdateConfig(micro_batch_size=8, mini_batches=1, fused_head=fused_head)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-5))
    ppo_update(model, optimizer, scheduler, samples, 0, LossConfig(), update_cfg)  # warm-up
    update_tokens = sum(sample.num_tokens for sample in samples)
    update_s = timed(
        device, lambda: ppo_update(model, optimizer, scheduler, samples, 0, LossConfig(), update_cfg)
    )
    engine = HFEngine(model, tokenizer)
    prompts = [sample.input_ids[:64].tolist() for sample in samples]
    params_sampling = SamplingParams(temperature=1.0, max_new_tokens=sizes.new_tokens, stop=())
    engine.generate_batch(prompts, params_sampling)  # warm-up
    completions: list[Any] = []
    rollout_s = timed(device, lambda: completions.extend(engine.generate_batch(prompts, params_sampling)))
    rollout_tokens = sum(len(completion.token_ids) for completion in completions)
    train_flops = (6 * params + 12 * layers * hidden * sizes.sequence) * update_tokens
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "matmul_params": params,
        "peak_bf16_tflops": peak / 1e12,
        "update_tokens_per_s": update_tokens / update_s,
        "rollout_tokens_per_s": rollout_tokens / rollout_s,
        "update_mfu": train_flops / update_s / peak,
        "rollout_mfu": 2 * params * rollout_tokens / rollout_s / peak,
    }


def matmul_peak_flops(device: torch.device, size: int, repeats: int = 20) -> float:
    """FLOP/s of back-to-back n x n bf16 matmuls on `device` (after one warm-up): the peak MFU is against."""
    first = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    second = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    torch.matmul(first, second)
    seconds = timed(device, lambda: [torch.matmul(first, second) for _ in range(repeats)])
    return 2 * size**3 * repeats / seconds


def timed(device: torch.device, work: Any) -> float:
    """Seconds `work()` takes, with the device's queue drained before and after."""
    synchronize(device)
    started = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - started


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
