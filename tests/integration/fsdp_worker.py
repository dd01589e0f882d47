"""One PPO update of a tiny random Llama on fixed samples; run alone or under torchrun (FSDP2, gloo).

    python tests/integration/fsdp_worker.py OUT.pt                          # the single-process reference
    torchrun --nproc_per_node 2 tests/integration/fsdp_worker.py OUT.pt     # 2 ranks, FSDP2
    ... OUT.pt --updates 2                  # two updates in a row
    ... OUT.pt --updates 1 --save RUN_DIR   # one update, then a (sharded) checkpoint of step 1 in RUN_DIR
    ... OUT.pt --updates 1 --resume RUN_DIR # restore RUN_DIR's newest checkpoint, then one more update
    ... OUT.pt --grouped                    # groups whose members share a prompt (update.shared_prefix)

Rank 0 saves {"params": full state dict after the last update, "metrics": its metrics, "logprobs": the
trainer log-probs the last update kept, per sample (`ppo_update_and_logprobs`)} to OUT.pt.
Used by tests/integration/test_fsdp.py; not a test itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.trainer import checkpoint
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.distributed import close, exit_rank, full_state_dict, init_from_env, shard_model
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import ppo_update_and_logprobs

VOCAB = 96


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def samples(count: int = 5) -> list[TrainSample]:
    """Sequences of different lengths with a prompt part (mask 0) and a sampled part (mask 1)."""
    generator = torch.Generator().manual_seed(1)
    out = []
    for index in range(count):
        length = 12 + 3 * index
        mask = torch.cat([torch.zeros(5), torch.ones(length - 5)])
        out.append(
            TrainSample(
                input_ids=torch.randint(0, VOCAB, (length,), generator=generator),
                loss_mask=mask,
                old_logprobs=-4.0 * mask + 0.1 * torch.rand(length, generator=generator) * mask,
                advantages=(1.0 if index % 2 else -0.5) * mask,
            )
        )
    return out


def grouped_samples(groups: int = 2, size: int = 3) -> list[TrainSample]:
    """`groups` groups of `size` members that start with the same 24-token prompt (mask 0), then differ."""
    generator = torch.Generator().manual_seed(2)
    out = []
    for group in range(groups):
        prompt = torch.randint(0, VOCAB, (24,), generator=generator)
        for member in range(size):
            length = 4 + 3 * member + group
            mask = torch.cat([torch.zeros(24), torch.ones(length)])
            out.append(
                TrainSample(
                    input_ids=torch.cat([prompt, torch.randint(0, VOCAB, (length,), generator=generator)]),
                    loss_mask=mask,
                    old_logprobs=-4.0 * mask + 0.1 * torch.rand(24 + length, generator=generator) * mask,
                    advantages=(1.0 if member % 2 else -0.5) * mask,
                    group_key=f"g{group}",
                )
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--grouped", action="store_true")
    args = parser.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    parallel = init_from_env()
    model = tiny_llama()
    if parallel.world_size > 1:
        shard_model(model)
    optim_cfg = OptimConfig(lr=1e-3, grad_clip=1.0, warmup_steps=3)
    optimizer, scheduler = make_optimizer(model, optim_cfg)
    done = 0
    if args.resume is not None:
        found = checkpoint.latest(args.resume)
        assert found is not None, f"no checkpoint in {args.resume}"
        checkpoint.load(found, model, optimizer, scheduler, parallel)
        done = checkpoint.read_state(found).step
    for _ in range(args.updates):
        result = ppo_update_and_logprobs(
            model,
            optimizer,
            scheduler,
            grouped_samples() if args.grouped else samples(),
            pad_id=0,
            loss_cfg=LossConfig(),
            update_cfg=UpdateConfig(micro_batch_size=2, mini_batches=2, min_shared_tokens=8),
            optim_cfg=optim_cfg,
            parallel=parallel,
        )
        done += 1
    if args.save is not None:
        state = checkpoint.CheckpointState(step=done, run_id="worker", weights_version=done)
        checkpoint.save(args.save, state, model, optimizer, scheduler, parallel=parallel)
    params = full_state_dict(model) if parallel.world_size > 1 else dict(model.state_dict())
    if parallel.rank == 0:
        torch.save({"params": params, "metrics": result.metrics, "logprobs": result.logprobs}, args.out)
    close(parallel)
    if parallel.world_size > 1:
        exit_rank(0)


if __name__ == "__main__":
    main()
