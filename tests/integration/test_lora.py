"""LoRA through peft: only the adapters train, and saved adapters load back to the same outputs."""

from __future__ import annotations

from pathlib import Path

import torch
from fsdp_worker import samples, tiny_llama

from agentrl.model_config import LoraSettings
from agentrl.models import with_lora
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.update import ppo_update


def test_an_update_changes_only_the_adapters_and_they_round_trip(tmp_path: Path) -> None:
    model = with_lora(tiny_llama(), LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj")))
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    frozen = {
        name: param.detach().clone() for name, param in model.named_parameters() if not param.requires_grad
    }
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    metrics = ppo_update(model, optimizer, scheduler, samples(), 0, LossConfig(), UpdateConfig())
    assert metrics["grad_norm"] > 0
    assert all(torch.equal(param, frozen[name]) for name, param in model.named_parameters() if name in frozen)
    lora_b = [param for name, param in model.named_parameters() if "lora_B" in name]
    assert any(param.abs().sum() > 0 for param in lora_b)  # B starts at zero: the update moved it

    model.save_pretrained(tmp_path / "adapters")
    reloaded = with_lora(tiny_llama(), LoraSettings(adapter=str(tmp_path / "adapters")))
    ids = samples()[0].input_ids[None]
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, reloaded(input_ids=ids).logits, atol=1e-6)
