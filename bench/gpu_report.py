"""docs/gpu.md's GPU table, made from the committed report of `make test-gpu` (never typed).

    .venv/bin/python bench/gpu_report.py                 # print the table
    .venv/bin/python bench/gpu_report.py --write-docs     # rewrite docs/gpu.md's marked block

What this is: the reader of `bench/results/gpu_check.json` (written by `scripts/gpu_check.sh OUT_DIR` on a
GPU machine): the device, the versions it ran with, each check passed or not with its key figure, and the
throughput line. What this is not: a benchmark. The model is a tiny random Llama, so its MFU says how far a
model that small is from the GPU's matmul peak, not what agentrl reaches with a real model.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl import evidence

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "bench" / "results" / "gpu_check.json"
TARGETS = (ROOT / "docs" / "gpu.md",)
START, END = "<!-- gpu-table:start (bench/gpu_report.py) -->", "<!-- gpu-table:end -->"


def figure(name: str, result: Mapping[str, Any]) -> str:
    """The one line a reader needs per check (the JSON has the rest)."""
    if name.startswith("train_"):
        steps = result["steps"]
        episodes = sum(step["episodes"] for step in steps)
        return f"{len(steps)} steps, {episodes:.0f} episodes, {result['seconds']:.1f} s"
    if name == "learning_direction":
        moved = (f"{arm} {counts['moved_with_credit']}/{counts['turns']}" for arm, counts in result.items())
        return "turns moved with their credit: " + ", ".join(moved)
    if name == "fsdp2":
        return (
            f"{result['backend']}; weights vs plain {result['weights_vs_plain']:.1e}, "
            f"resume difference {result['resume_difference']:g}"
        )
    if name == "shared_prefix":
        worst = max(v["gradients"] for v in result.values())
        return f"max gradient difference vs unshared {worst:.1e} (fp32, with and without TIS)"
    if name == "lora":
        return f"grad norm {result['grad_norm']:.3f}, reload difference {result['reload_difference']:g}"
    if name == "checkpoint_resume":
        return f"resume difference {result['difference']:g}"
    if name.startswith("update_profile"):
        shares = ", ".join(f"{key} {100 * value:.0f}%" for key, value in result["shares"].items())
        return f"one update {result['update_s']:.2f} s ({result['dtype']}): {shares}"
    if name.startswith(("throughput", "shape_")):
        peak = f", peak {result['cuda_peak_gib']:.1f} GiB" if "cuda_peak_gib" in result else ""
        return (
            f"update {result['update_tokens_per_s']:,.0f} tok/s (MFU {100 * result['update_mfu']:.2f}%), "
            f"rollout {result['rollout_tokens_per_s']:,.0f} tok/s (MFU {100 * result['rollout_mfu']:.4f}%), "
            f"{result['dtype']}, of the {result['peak_bf16_tflops']:.0f} TFLOP/s bf16 matmul peak it measured"
            f"{peak}"
        )
    return ""


def table(report: Mapping[str, Any]) -> str:
    env = report["environment"]
    head = (
        f"Ran {report['date']} on one {env.get('device_name', env['device'])} (torch {env['torch']}, CUDA "
        f"{env['torch_cuda']}, NCCL {env.get('nccl', '?')}, transformers {env['transformers']}, Python "
        f"{env['python']}): **{'passed' if report['passed'] else 'FAILED'}** in {report['seconds']:.0f} s "
        f"([bench/results/gpu_check.json](bench/results/gpu_check.json)).\n\n"
    )
    rows = ["| check | passed | figure |", "|---|---|---|"]
    for name, check in report["checks"].items():
        result = check.get("result") or {}
        shown = figure(name, result) if check["passed"] else str(check.get("error", ""))[:120]
        rows.append(f"| {name} | {'yes' if check['passed'] else 'no'} | {shown} |")
    return head + "\n".join(rows)


def replace_block(text: str, block: str, where: Path) -> str:
    return evidence.replace_block(text, block, START, END, str(where))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--write-docs", action="store_true", help="rewrite docs/gpu.md's block")
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    if report.get("skipped"):
        raise SystemExit(f"{args.report} is a skip report (no CUDA where it ran): nothing to tabulate")
    block = table(report)
    if not args.write_docs:
        print(block)
        return 0
    for target in TARGETS:
        relative = block if target.parent == ROOT else block.replace("](bench/", "](../bench/")
        target.write_text(replace_block(target.read_text(), relative, target))
        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
