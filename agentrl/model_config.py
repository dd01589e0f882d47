"""`ModelConfig` (`model.*`) and its `LoraSettings` (`model.lora.*`), importable without torch.

What this is: frozen dataclasses, each default in one place. What this is not: the loading they describe
(`agentrl.models.load_model`, which imports torch and transformers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.errors import ConfigError


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters through peft (rank 0: train every weight).

    rank, alpha, dropout: the adapters' rank r, scaling alpha (the update is scaled by alpha / r) and
                          dropout.
    targets:              module names that get adapters (Llama/Qwen/Mistral attention and MLP projections).
    adapter:              a folder of saved adapters to start from (what a LoRA run's `final/` holds).
    """

    rank: int = 0
    alpha: int = 16
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    adapter: str | None = None

    def __post_init__(self) -> None:
        if self.rank < 0:
            raise ConfigError(f"model.lora.rank must be >= 0, got {self.rank}")


@dataclass(frozen=True)
class ModelConfig:
    """Which model to load.

    name:     an alias from `agentrl.models.ALIASES`, a Hugging Face hub id, or a local folder
    dtype:    parameter dtype: float32 | bfloat16 | float16
    device:   "auto" (the current CUDA device when there is one, else the CPU), "cpu", "cuda" or "cuda:N"
    revision: hub revision (branch, tag or commit) for hub ids; ignored for aliases
    lora:     LoRA adapters (off by default; `model.lora.rank=16` turns them on)
    random_shape: "" loads `name`'s weights; a key of `agentrl.model_shapes.SHAPES` (smollm2-360m,
              smollm2-1.7b) builds that shape with random weights (seed 0) and `name`'s tokenizer, for systems
              checks of a size whose weights are not on this machine; a training run that cannot fit is
              refused first, with the estimate (docs/memory.md)
    """

    name: str = "smollm2-135m-instruct"
    dtype: str = "float32"
    device: str = "auto"
    revision: str | None = None
    lora: LoraSettings = field(default_factory=LoraSettings)
    random_shape: str = ""
