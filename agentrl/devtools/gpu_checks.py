"""The checks of `make test-gpu` (`agentrl/devtools/gpu_check.py` runs each in a process of its own).

What this is: one function per check, each taking the device to run on and returning what it measured (a
JSON-ready dict) or raising when the check fails. Everything is built on the spot: a tiny random Llama over
a byte-level ChatML tokenizer (the one `tests/tiny_tokenizers.py` builds), saved to a folder the trainer
loads by `model.name`, so no weights or downloads are needed. The checks exercise the trainer's own
functions: `train` on the maze, `ppo_update`, `shard_model`, `checkpoint`, `with_lora`, the HF engine.

What this is not: a benchmark of a real model (the throughput figures are a tiny model's, for comparing one
GPU run with the next) or a test of several GPUs: FSDP2 runs on one rank, since NCCL refuses two ranks on
one GPU; the multi-rank collectives are checked on CPU by tests/integration/test_fsdp.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Sizes:
    """How big the check's model and batches are (the GPU run's defaults; `SMALL` for a CPU dry run).

    hidden, layers:  the tiny Llama's width and depth (4 query heads, 2 key/value heads)
    batch:           sequences per throughput measurement (updates and rollouts)
    sequence:        tokens per sequence of the update throughput
    new_tokens:      tokens sampled per sequence of the rollout throughput
    peak_size:       n of the n x n x n bf16 matmuls that measure the device's peak
    train_steps:     steps of each trainer run on the maze
    max_new_tokens:  the trainer runs' sampling budget per turn
    """

    hidden: int = 256
    layers: int = 4
    batch: int = 32
    sequence: int = 512
    new_tokens: int = 64
    peak_size: int = 8192
    train_steps: int = 2
    max_new_tokens: int = 48


SMALL = Sizes(hidden=32, layers=2, batch=4, sequence=48, new_tokens=8, peak_size=256, max_new_tokens=16)

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def choose_device(requested: str = "auto") -> torch.device:
    """The device the checks run on: `model.device`'s own resolution ("auto": CUDA when there is one)."""
    from agentrl.models import resolve_device

    return resolve_device(requested)


def training_dtype(device: torch.device) -> torch.dtype:
    """The parameter dtype of the trainer runs: bfloat16 on a GPU that has it, float32 elsewhere (on CPU the
    trainer's bf16 is autocast, and only where the CPU multiplies bf16 natively)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    """`model.dtype`'s spelling of a torch dtype."""
    return str(dtype).removeprefix("torch.")


# ---- the tiny model -----------------------------------------------------------------------------------


def byte_tokenizer() -> Any:
    """One token per byte plus `<|im_start|>` and `<|im_end|>` (eos and pad), with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML,
    )


def tiny_llama(sizes: Sizes, vocab: int, seed: int = 0, pad_id: int | None = None) -> Any:
    """A randomly initialised Llama of `sizes` (GQA 4/2 heads), fp32, in eval mode, on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=sizes.hidden,
        intermediate_size=2 * sizes.hidden,
        num_hidden_layers=sizes.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=None,
        eos_token_id=pad_id,
        pad_token_id=pad_id,
    )
    return LlamaForCausalLM(config).eval()


SMOLLM2_135M_SHAPE = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "tie_word_embeddings": True,
}
"""SmolLM2-135M-Instruct's layer shapes (its config.json): random weights of the real model's size, since
no weights travel to the GPU machine."""


def shaped_llama(shape: dict[str, Any], pad_id: int | None, seed: int = 0) -> Any:
    """A randomly initialised Llama with `shape`'s sizes, fp32, in eval mode, on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        **shape, max_position_embeddings=8192, bos_token_id=None, eos_token_id=pad_id, pad_token_id=pad_id
    )
    return LlamaForCausalLM(config).eval()


def save_tiny_model(folder: Path, sizes: Sizes) -> Path:
    """The tiny Llama and its tokenizer saved where `model.name=<folder>` loads them."""
    tokenizer = byte_tokenizer()
    tiny_llama(sizes, len(tokenizer), pad_id=tokenizer.pad_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def matmul_parameters(model: torch.nn.Module) -> int:
    """Parameters that take part in a matmul per token (all but the input embedding, unless it is tied)."""
    embedding = model.get_input_embeddings()  # type: ignore[operator]
    tied = embedding.weight is model.get_output_embeddings().weight  # type: ignore[operator]
    skipped = 0 if tied else embedding.weight.numel()
    return sum(param.numel() for param in model.parameters()) - skipped


# ---- (a) the trainer on the maze, and the learning direction ------------------------------------------


def check_trainer(device: torch.device, workdir: Path, sizes: Sizes, estimator: str) -> dict[str, Any]:
    """`train` on the maze (embedded service, HF engine, the training dtype) for `sizes.train_steps` steps.

    A random model earns no reward, so every advantage is 0; a small entropy bonus keeps every episode in
    the update (`step.training_samples`' keep_all), so each step runs a real update."""
    from agentrl.config import load_config
    from agentrl.trainer.train import train

    folder = save_tiny_model(workdir / "model", sizes)
    overrides = [
        f"name={estimator}",
        f"runs_dir={workdir / 'runs'}",
        f"store.url=sqlite:///{workdir / 'store.db'}",
        f"model.name={folder}",
        f"model.device={device}",
        f"model.dtype={dtype_name(training_dtype(device))}",
        "engine.kind=hf",
        f"credit.estimator={estimator}",
        f"train.steps={sizes.train_steps}",
        "train.tasks_per_step=2",
        "train.group_size=4",
        "rollout.max_turns=2",
        "rollout.max_context_tokens=4096",
        f"sampling.max_new_tokens={sizes.max_new_tokens}",
        "loss.entropy_coef=0.001",
        "eval.before=false",
        "eval.after=false",
    ]
    started = time.perf_counter()
    asyncio.run(train(load_config("maze", overrides)))
    seconds = time.perf_counter() - started
    lines = (workdir / "runs" / estimator / "metrics.jsonl").read_text().splitlines()
    steps = [row for row in map(json.loads, lines) if "update_s" in row]
    if len(steps) != sizes.train_steps:
        raise AssertionError(f"{len(steps)} steps logged, expected {sizes.train_steps}: {steps}")
    for row in steps:
        if not row.get("tokens", 0) > 0 or not math.isfinite(row["loss"]):
            raise AssertionError(f"step {row['step']} did not update: {row}")
    return {
        "seconds": seconds,
        "steps": [
            {key: row[key] for key in ("step", "loss", "tokens", "update_s", "rollout_s", "episodes")}
            for row in steps
        ],
    }


GROUPS, MEMBERS = 2, 4
PROMPTS = ("<|im_start|>user\nWhat is 12*7?<|im_end|>\n", "<|im_start|>user\nName a colour.<|im_end|>\n")
OBSERVATION = "<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n"


def check_learning_direction(device: torch.device, sizes: Sizes) -> dict[str, Any]:
    """tests/integration/test_learning_direction.py on `device` with the HF engine: after one update of
    GRPO and of GiGPO credit, the engine's log-probability of every turn moves the way its advantage says;
    a flipped advantage sign (the control) must break that."""
    results = {}
    for estimator, flip in (("grpo", False), ("gigpo", False), ("grpo", True)):
        advantages, deltas = direction_of_one_update(device, estimator, flip)
        signed = [(a, d) for a, d in zip(advantages, deltas, strict=True) if abs(a) > 1e-9]
        agree = sum(a * d > 0 for a, d in signed)
        results[f"{estimator}{'_flipped' if flip else ''}"] = {
            "turns": len(signed),
            "moved_with_credit": agree,
        }
        moves = bool(signed) and agree == len(signed)
        if moves == flip:
            raise AssertionError(
                f"{estimator} (flipped={flip}): {agree} of {len(signed)} turns moved with credit"
            )
    return results


def direction_of_one_update(
    device: torch.device, estimator: str, flip: bool
) -> tuple[list[float], list[float]]:
    """(per-turn advantage, per-turn change of the engine's log-probability) after one update, fp32."""
    from agentrl.agent.engines.hf import HFEngine
    from agentrl.config import load_config
    from agentrl.trainer.parallel import SINGLE_PROCESS
    from agentrl.trainer.step import compute_advantages, make_learner, publish_weights, training_samples

    tokenizer = byte_tokenizer()
    model = tiny_llama(Sizes(hidden=64, layers=2), len(tokenizer), pad_id=tokenizer.pad_token_id).to(device)
    engine = HFEngine(model, tokenizer)
    overrides = [
        f"credit.estimator={estimator}",
        "optim.lr=3e-3",
        "optim.warmup_steps=0",
        "sampling.temperature=1.0",
    ]
    config = load_config("calc", overrides)
    episodes = play_two_turn_batch(engine, tokenizer)
    before = turn_logprobs(model, episodes)
    advantages, _ = compute_advantages(episodes, config)
    samples = training_samples(episodes, advantages, config.rollout.max_context_tokens)
    if flip:
        samples = [dataclasses.replace(s, advantages=-s.advantages) for s in samples]
    learner = make_learner(config, SINGLE_PROCESS, model, int(tokenizer.pad_token_id))
    learner.update(samples)
    publish_weights(engine, learner)
    after = turn_logprobs(model, episodes)
    flat = [value for episode in advantages for value in episode]
    return flat, [b - a for a, b in zip(before, after, strict=True)]


def play_two_turn_batch(engine: Any, tokenizer: Any) -> list[Any]:
    """GROUPS x MEMBERS seeded two-turn episodes; members 0 and 1 of each group are rewarded, and every
    member is in state "mid" after its first turn (GiGPO's step-level anchor)."""
    from agentrl.agent.engines.base import SamplingParams
    from agentrl.types import Action, Episode, Turn

    observation = tuple(tokenizer.encode(OBSERVATION, add_special_tokens=False))
    episodes = []
    for group, text in enumerate(PROMPTS):
        first = tuple(tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False))
        for member in range(MEMBERS):
            turns, context = [], list(first)
            for index, prompt in enumerate((first, observation)):
                context += prompt if index else []
                seed = 100 * group + 10 * member + index
                params = SamplingParams(temperature=1.0, max_new_tokens=6, stop=(), seed=seed)
                completion = engine.generate_batch([context], params)[0]
                context += completion.token_ids
                last = index == 1
                turns.append(
                    Turn(
                        index=index, prompt_ids=prompt, completion_ids=completion.token_ids,
                        completion_logprobs=completion.logprobs, text=completion.text,
                        action=Action(text="t"), observation="ok", reward=float(member < 2) if last else 0.0,
                        invalid=False, state_key="end" if last else "mid", terminated=last,
                    )
                )  # fmt: skip
            episodes.append(
                Episode(
                    episode_id=f"g{group}m{member}", env_id="check", task_id=f"t{group}",
                    group_id=f"g{group}", seed=group, turns=tuple(turns), stop_reason="terminated",
                    initial_state_key=f"start{group}", success=member < 2,
                )
            )  # fmt: skip
    return episodes


@torch.no_grad()
def turn_logprobs(model: torch.nn.Module, episodes: list[Any]) -> list[float]:
    """The model's summed log-probability (temperature 1) of each turn's completion given all before it."""
    sums = []
    device = next(model.parameters()).device
    for episode in episodes:
        context: list[int] = []
        for turn in episode.turns:
            context += turn.prompt_ids
            ids = torch.tensor([context + list(turn.completion_ids)], device=device)
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            start = len(context)
            targets = ids[0, start:]
            sums.append(float(logprobs[start - 1 : -1].gather(1, targets[:, None]).sum()))
            context += turn.completion_ids
    return sums
