"""`python -m agentrl.devtools.gpu_check OUT_DIR`: the GPU path proven by one command (`make test-gpu`).

What this is: the runner of the checks in `gpu_checks.py` and `gpu_update_checks.py`. Where CUDA is absent
it says so, writes `OUT_DIR/gpu_check.json` with `"skipped": true` and exits 0. Where CUDA is present it
runs every check in a process of its own (a crash, a CUDA error or a hang ends that check only; each has a
time limit and all share one deadline), prints one line per check and the throughput line, writes every
result with the device, the versions and the timings to `OUT_DIR/gpu_check.json` (each check's output in
`OUT_DIR/<check>.log`), and exits 1 if any check failed. `--device cpu --small` runs the same checks on the
CPU with tiny sizes (tests/unit/test_gpu_check.py), to prove the code before it meets a GPU.

What this is not: a benchmark or a multi-GPU test (see `gpu_checks.py`). scripts/gpu_check.sh sets up the
GPU machine's import path first (agentrl's dependencies from wheels; torch and transformers are its own).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl.devtools import gpu_checks
from agentrl.devtools.gpu_checks import SMALL, Sizes

CHECKS = (
    "train_grpo",
    "train_gigpo",
    "learning_direction",
    "fsdp2",
    "shared_prefix",
    "lora",
    "checkpoint_resume",
    "throughput",
    "throughput_smollm2_shape",
    "shape_1.7b_lora",
    "shape_1.7b_full",
    "update_profile_1.7b",
)
"""Every check, in the order they run."""


def run_check(name: str, device: torch.device, workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Check `name`'s result (imported here: the skip path must not need agentrl's dependencies)."""
    from agentrl.devtools import gpu_profile as big
    from agentrl.devtools import gpu_update_checks as update

    dtype, small = gpu_checks.training_dtype(device), sizes == SMALL
    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "train_grpo": lambda: gpu_checks.check_trainer(device, workdir, sizes, "grpo"),
        "train_gigpo": lambda: gpu_checks.check_trainer(device, workdir, sizes, "gigpo"),
        "learning_direction": lambda: gpu_checks.check_learning_direction(device, sizes),
        "fsdp2": lambda: update.check_fsdp2(device, workdir),
        "shared_prefix": lambda: update.check_shared_prefix(device),
        "lora": lambda: update.check_lora(device, workdir),
        "checkpoint_resume": lambda: update.check_checkpoint_resume(device, workdir),
        "throughput": lambda: update.check_throughput(device, sizes, gpu_checks.training_dtype(device)),
        "throughput_smollm2_shape": lambda: update.check_throughput(
            device, sizes, gpu_checks.training_dtype(device), gpu_checks.SMOLLM2_135M_SHAPE
        ),
        "shape_1.7b_lora": lambda: big.check_big_shape(device, sizes, dtype, small, lora_rank=16),
        "shape_1.7b_full": lambda: big.check_big_shape(device, sizes, dtype, small, lora_rank=0),
        "update_profile_1.7b": lambda: big.check_update_profile(device, sizes, dtype, small),
    }
    return checks[name]()


def check_environment() -> dict[str, str]:
    """A check process's environment: deterministic cuBLAS (for `use_deterministic_algorithms`)."""
    return {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "TOKENIZERS_PARALLELISM": "false"}


CHECK_TIMEOUT_S = 150.0
DEADLINE_S = 450.0  # the whole run stays under eight minutes, with room for start-up and the JSON


def environment(device: torch.device) -> dict[str, Any]:
    """Where the checks ran: the device, the versions of torch, CUDA, NCCL, transformers and peft."""
    found: dict[str, Any] = {
        "device": str(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "torch_cuda": torch.version.cuda,
    }
    for package in ("transformers", "peft", "accelerate", "fastapi", "pydantic", "sqlalchemy"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    if device.type == "cuda":
        found["device_name"] = torch.cuda.get_device_name(device)
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return found


def run_one(name: str, device: str, small: bool, result_path: Path) -> int:
    """Child process: run check `name`, write {"passed", "result" or "error"} to `result_path`."""
    started = time.perf_counter()
    sizes = SMALL if small else Sizes()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{name}-") as workdir:
        try:
            result = run_check(name, gpu_checks.choose_device(device), Path(workdir), sizes)
            outcome: dict[str, Any] = {"passed": True, "result": result}
        except Exception as error:  # the check failed: its message and traceback are its result
            traceback.print_exc()
            outcome = {"passed": False, "error": f"{type(error).__name__}: {error}"[:2000]}
    outcome["seconds"] = round(time.perf_counter() - started, 2)
    result_path.write_text(json.dumps(outcome, default=str))
    return 0 if outcome["passed"] else 1


def run_isolated(name: str, device: str, small: bool, out_dir: Path, timeout_s: float) -> dict[str, Any]:
    """Check `name` in a process of its own; a crash or a timeout is a failed check, not a failed run."""
    result_path = out_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "agentrl.devtools.gpu_check", "--run-one", name, "--device", device]
    command += ["--result", str(result_path), *(["--small"] if small else []), str(out_dir)]
    started = time.perf_counter()
    with (out_dir / f"{name}.log").open("w") as log:
        try:
            subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                env=check_environment(),
            )
        except subprocess.TimeoutExpired:
            return {"passed": False, "error": f"timed out after {timeout_s:.0f} s", "seconds": timeout_s}
    if not result_path.is_file():
        tail = (out_dir / f"{name}.log").read_text(errors="replace")[-1500:]
        return {
            "passed": False,
            "error": f"the check process died: {tail}",
            "seconds": time.perf_counter() - started,
        }
    outcome: dict[str, Any] = json.loads(result_path.read_text())
    result_path.unlink()
    return outcome


def run_all(device: str, small: bool, out_dir: Path, only: Sequence[str]) -> dict[str, Any]:
    """Every check (or `only` these) in turn, each isolated, within `DEADLINE_S`; the report."""
    started = time.perf_counter()
    results: dict[str, Any] = {}
    for name in only or CHECKS:
        left = DEADLINE_S - (time.perf_counter() - started)
        if left < 10:
            results[name] = {
                "passed": False,
                "error": "not run: the run's deadline was reached",
                "seconds": 0,
            }
        else:
            results[name] = run_isolated(name, device, small, out_dir, min(CHECK_TIMEOUT_S, left))
        print(summary_line(name, results[name]), flush=True)
    return {
        "skipped": False,
        "passed": all(result["passed"] for result in results.values()),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": environment(gpu_checks.choose_device(device)),
        "sizes": vars(SMALL if small else Sizes()),
        "seconds": round(time.perf_counter() - started, 1),
        "checks": results,
    }


def summary_line(name: str, result: dict[str, Any]) -> str:
    status = "ok  " if result["passed"] else "FAIL"
    detail = "" if result["passed"] else f"  {str(result.get('error', '')).splitlines()[0][:160]}"
    return f"{status} {name:<18} {result.get('seconds', 0):7.1f} s{detail}"


def throughput_lines(report: dict[str, Any]) -> list[str]:
    """update and rollout tokens/s and MFU of each throughput check that passed."""
    return [
        line
        for name in ("throughput", "throughput_smollm2_shape", "shape_1.7b_lora", "shape_1.7b_full")
        if (line := throughput_line(name, report["checks"].get(name, {}))) is not None
    ]


def throughput_line(name: str, check: dict[str, Any]) -> str | None:
    """update and rollout tokens/s and MFU, when the throughput check passed."""
    if not check.get("passed"):
        return None
    r = check["result"]
    return (
        f"{name} ({r['dtype']}, {r['matmul_params'] / 1e6:.2f}M matmul params): "
        f"update {r['update_tokens_per_s']:,.0f} tok/s (MFU {100 * r['update_mfu']:.3f}%), "
        f"rollout {r['rollout_tokens_per_s']:,.0f} tok/s (MFU {100 * r['rollout_mfu']:.4f}%), "
        f"measured bf16 matmul peak {r['peak_bf16_tflops']:.1f} TFLOP/s"
    )


def harness_block() -> dict[str, Any]:
    """The `harness` block every file under bench/results carries (bench/harness.py's schema): this report
    is committed there as `bench/results/gpu_check.json`."""
    from agentrl.cpu import speed_flags
    from agentrl.evidence import commit_of

    return {
        "bench": "make-test-gpu",
        "schema": 1,
        "command": "make test-gpu (python -m agentrl.devtools.gpu_check)",
        "commit": commit_of(Path.cwd()),
        "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "baseline": "the device's own measured matmul peak (MFU), each check's reference where it has one",
        "machine": {
            "cores": os.cpu_count(),
            "cpu_flags": speed_flags(),
            "load_before": None,
            "load_after": None,
        },
    }


def skip_report(reason: str) -> dict[str, Any]:
    return {
        "harness": harness_block(),
        "skipped": True,
        "passed": None,
        "reason": reason,
        "environment": environment(torch.device("cpu")),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.devtools.gpu_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=Path, help="where gpu_check.json and the checks' logs go")
    parser.add_argument(
        "--device", default="auto", help="auto (CUDA, or skip without it), cuda, cuda:N or cpu"
    )
    parser.add_argument("--small", action="store_true", help="tiny sizes (a CPU dry run)")
    parser.add_argument("--only", default="", help="comma-separated check names (default: all)")
    parser.add_argument("--run-one", default="", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        return run_one(args.run_one, args.device, args.small, args.result)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report_path = args.out_dir / "gpu_check.json"
    if args.device == "auto" and not torch.cuda.is_available():
        reason = f"CUDA is not available here (torch {torch.__version__}); nothing was checked"
        report_path.write_text(json.dumps(skip_report(reason), indent=2) + "\n")
        print(f"gpu check skipped: {reason}; wrote {report_path}")
        return 0
    only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check(s) {unknown}; the checks are {', '.join(CHECKS)}")
    report = {"harness": harness_block(), **run_all(args.device, args.small, args.out_dir, only)}
    report_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    for line in throughput_lines(report):
        print(line)
    verdict = "passed" if report["passed"] else "FAILED"
    print(
        f"gpu check {verdict} on {report['environment'].get('device_name', args.device)}; wrote {report_path}"
    )
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
