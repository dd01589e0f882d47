"""One PPO update of a tiny random Llama on fixed samples; run alone or under torchrun (FSDP2, gloo).

    python tests/integration/fsdp_worker.py OUT.pt                          # the single-process reference
    torchrun --nproc_per_node 2 tests/integration/fsdp_worker.py OUT.pt     # 2 ranks, FSDP2

Rank 0 saves {"params": full state dict after the update, "metrics": the update's metrics} to OUT.pt.
Used by tests/integration/test_fsdp.py; not a test itself.
"""

from __future__ import annotations

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.trainer.distributed import close, full_state_dict, init_from_env, shard_model
from agentrl.trainer.losses import LossConfig
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.update import OptimConfig, UpdateConfig, make_optimizer, policy_update

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
                turn_id=torch.zeros(length, dtype=torch.long),
            )
        )
    return out


def main(out_path: str) -> None:
    torch.use_deterministic_algorithms(True)
    parallel = init_from_env()
    model = tiny_llama()
    if parallel.world_size > 1:
        shard_model(model)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-3, grad_clip=1.0))
    metrics = policy_update(
        model,
        optimizer,
        scheduler,
        samples(),
        pad_id=0,
        loss_cfg=LossConfig(),
        update_cfg=UpdateConfig(micro_batch_size=2, mini_batches=2),
        optim_cfg=OptimConfig(lr=1e-3, grad_clip=1.0),
        parallel=parallel,
    )
    params = full_state_dict(model) if parallel.world_size > 1 else dict(model.state_dict())
    if parallel.rank == 0:
        torch.save({"params": params, "metrics": metrics}, out_path)
    close(parallel)


if __name__ == "__main__":
    main(sys.argv[1])
