"""How much of a small update a bf16 engine sees; prints ONE JSON object.

    .venv/bin/python bench/bf16_updates.py                 # lr 1e-5, 10 AdamW steps
    .venv/bin/python bench/bf16_updates.py --lr 1e-6 --steps 20 --out -     # print only

The JSON goes to bench/results/bf16_updates.json too (`--out`; '-': print only).

The trainer keeps fp32 weights; the cached engine samples from a bf16 copy of them (`engine.cached.precision`
auto, on CPUs with native bf16), re-rounded after every update. bf16 keeps 8 bits of mantissa, so a weight
of magnitude w moves in the engine only once its fp32 master has moved by about w x 2^-9; AdamW moves each
weight by about lr per step. This loads SmolLM2-135M, takes `--steps` fused-AdamW steps on a language-model
loss over one fixed random 256-token sequence (Adam's steps are ~lr whatever the gradient's scale), and
after each reports `changed_fraction`: the share of parameters whose bf16 value differs from the bf16 value
before training. Also `updated_fraction`: the share whose fp32 value changed at all (the update's reach).

What this is not: a measure of how sampling changes (the credit study saw identical rollouts across
estimators after updates of this size; this shows why). For short CPU studies at small learning rates,
`engine.cached.precision=float32` samples from the fp32 weights themselves.
"""

from __future__ import annotations

import argparse

import harness
import torch

from agentrl.memory import choose_allocator
from agentrl.model_config import ModelConfig
from agentrl.models import load_model


def changed_share(model: torch.nn.Module, reference: dict[str, torch.Tensor], dtype: torch.dtype) -> float:
    """Share of the parameters whose value in `dtype` differs from `reference` (the same names)."""
    changed = total = 0
    for name, param in model.named_parameters():
        changed += int((param.detach().to(dtype) != reference[name]).sum())
        total += param.numel()
    return changed / total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--steps", type=int, default=10)
    harness.add_out_argument(parser, "bf16_updates")
    args = parser.parse_args(argv)
    choose_allocator(reexec=argv is None)
    torch.manual_seed(0)
    model, _ = load_model(ModelConfig(name="smollm2-135m-instruct"))
    bf16_before = {name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}
    fp32_before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    ids = torch.randint(0, model.config.vocab_size, (1, 256))
    model.train()
    rows = []
    for step in range(1, args.steps + 1):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rows.append(
            {
                "step": step,
                "changed_fraction": round(changed_share(model, bf16_before, torch.bfloat16), 4),
                "updated_fraction": round(changed_share(model, fp32_before, torch.float32), 4),
            }
        )
    figures = {"lr": args.lr, "model": "smollm2-135m-instruct", "steps": rows}
    baseline = "the model's own bf16 and fp32 weights before the first step, same run"
    harness.emit(
        "bf16_updates", figures, baseline=baseline, out=harness.out_path(args, "bf16_updates"), argv=argv
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
