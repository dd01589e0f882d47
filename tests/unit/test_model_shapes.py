"""`agentrl.model_shapes` and `model.random_shape`: a shape's parameter count is the built model's, a random
model of a shape loads with the named tokenizer, and a training run that cannot fit is refused before
anything loads, with its estimate and what would fit.

What this is not: a run of a large shape (bench/memory.py and docs/memory.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_tokenizers import byte_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.errors import ConfigError
from agentrl.model_config import ModelConfig
from agentrl.model_shapes import SHAPES, Shape, check_fits, parameters, training_bytes
from agentrl.models import load_model

TINY = Shape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512, max_positions=256)


def test_a_shapes_parameter_count_is_the_built_models() -> None:
    built = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=TINY.vocab, hidden_size=TINY.hidden, num_hidden_layers=TINY.layers,
            num_attention_heads=TINY.heads, num_key_value_heads=TINY.kv_heads,
            intermediate_size=TINY.intermediate, tie_word_embeddings=True,
        )
    )  # fmt: skip
    assert parameters(TINY) == sum(p.numel() for p in built.parameters())
    assert parameters(SHAPES["smollm2-135m"]) == 134_515_008  # SmolLM2-135M's published count
    # by hand: embeddings 49,152 x hidden, per layer attention hidden x 64 x 2 (heads + kv_heads), MLP
    # 3 x hidden x intermediate and two norms, a final norm
    assert (
        parameters(SHAPES["smollm2-360m"]) == 49152 * 960 + 32 * (960 * 64 * 40 + 3 * 960 * 2560 + 1920) + 960
    )
    assert (
        parameters(SHAPES["smollm2-1.7b"])
        == 49152 * 2048 + 24 * (2048 * 64 * 128 + 3 * 2048 * 8192 + 4096) + 2048
    )
    assert training_bytes(SHAPES["smollm2-135m"], "float32") == 16 * 134_515_008


def test_a_run_that_cannot_fit_is_refused_with_its_estimate() -> None:
    gib = 1024**3
    check_fits("x", SHAPES["smollm2-360m"], "float32", 0, 24 * gib)  # ~8.1 GiB: fits
    check_fits("x", SHAPES["smollm2-1.7b"], "bfloat16", 16, 24 * gib)  # LoRA: ~4.8 GiB, fits
    check_fits("x", SHAPES["smollm2-1.7b"], "float32", 0, None)  # nothing known: not refused
    with pytest.raises(ConfigError) as refused:
        check_fits("random smollm2-1.7b", SHAPES["smollm2-1.7b"], "float32", 0, 24 * gib)
    message = str(refused.value)
    assert "1.71B parameters" in message and "full fine-tuning" in message and "needs about 38" in message
    assert "24.0 GiB is available" in message and "model.lora.rank=16 model.dtype=bfloat16" in message


def test_a_random_model_of_a_shape_loads_with_the_named_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "tokenizer"
    byte_tokenizer().save_pretrained(folder)
    monkeypatch.setitem(SHAPES, "tiny", TINY)
    model, tokenizer = load_model(ModelConfig(name=str(folder), random_shape="tiny", device="cpu"))
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert sum(p.numel() for p in model.parameters()) == parameters(TINY)
    assert len(tokenizer) <= TINY.vocab and not model.training
    again, _ = load_model(ModelConfig(name=str(folder), random_shape="tiny", device="cpu"))
    assert all((a == b).all() for a, b in zip(model.parameters(), again.parameters(), strict=True))  # seed 0
    with pytest.raises(ConfigError, match="random_shape='huge' is unknown"):
        load_model(ModelConfig(name=str(folder), random_shape="huge", device="cpu"))
