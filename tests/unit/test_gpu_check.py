"""`make test-gpu` on a machine without a GPU: device and dtype choices, the process group's backend, the
wheel list the GPU machine installs, the script's skip path, and (slow) the update checks run on the CPU."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from agentrl.devtools.gpu_checks import choose_device, dtype_name, training_dtype
from agentrl.trainer import distributed

REPO = Path(__file__).resolve().parents[2]
MACHINE_OWN = ("torch", "transformers")  # preinstalled on the GPU machine, with what they require
# tensorboard's own requirements: the GPU machine's image has tensorboard and these (its package list,
# 2026-11-17), so its wheel and theirs are never installed there; a machine without tensorboard needs them
TENSORBOARD_NEEDS_THERE = ("grpcio", "markdown", "pillow", "werkzeug", "tensorboard-data-server")


def test_auto_is_cuda_where_there_is_one_and_the_cpu_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert choose_device("auto") == torch.device("cuda", 0)


def test_the_trainer_runs_in_bf16_on_a_gpu_that_has_it_and_fp32_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert training_dtype(torch.device("cpu")) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert training_dtype(torch.device("cuda", 0)) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert training_dtype(torch.device("cuda", 0)) == torch.float32
    assert [dtype_name(d) for d in (torch.bfloat16, torch.float32)] == ["bfloat16", "float32"]


def test_gpu_ranks_use_nccl_with_gloo_for_cpu_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert distributed.process_group_backend(cuda=True) == "cpu:gloo,cuda:nccl"
    assert distributed.process_group_backend(cuda=False) == "gloo"
    chosen: list[str] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend: chosen.append(backend))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    assert distributed.init_from_env().rank == 1 and chosen == ["gloo"]


def wheel_requirements() -> dict[str, str]:
    lines = (REPO / "scripts/gpu_wheels.txt").read_text().splitlines()
    pairs = [line.split("==") for line in lines if line.strip() and not line.startswith("#")]
    return {canonical(name): version for name, version in pairs}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(roots: tuple[str, ...]) -> set[str]:
    """The roots and every distribution they require (recursively, extras left out), as installed here."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [req.name for req in map(Requirement, requires) if applies(req)]
    return found


def applies(requirement: Requirement) -> bool:
    """A hard requirement on x86_64 Linux: no extra, and its marker (if any) true there."""
    if requirement.marker is None:
        return True
    environment = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
    return "extra" not in str(requirement.marker) and requirement.marker.evaluate(environment)


def test_the_wheels_are_pinned_to_the_versions_tested_here() -> None:
    for name, version in wheel_requirements().items():
        assert metadata.version(name) == version, name


def test_every_wheel_finds_what_it_requires_among_the_wheels_or_the_gpu_machines_own() -> None:
    """A wheel's hard requirements (extras left out) travel too: fastapi 0.165 requires opentelemetry-api,
    whose absence failed the first GPU run (bench/results/gpu_check.json records the second)."""
    wheels = set(wheel_requirements())
    covered = wheels | requirement_closure(MACHINE_OWN) | set(TENSORBOARD_NEEDS_THERE)
    needed = requirement_closure(tuple(wheels)) - wheels
    assert not needed - covered, sorted(needed - covered)


IMPORTS = """
import importlib.metadata as metadata, json, sys
import agentrl.devtools.gpu_check, agentrl.devtools.gpu_checks, agentrl.devtools.gpu_update_checks
import agentrl.trainer.train, agentrl.agent.engines.hf, agentrl.service.server, agentrl.service.app
import agentrl.store.repository, peft, torch.distributed.checkpoint, torch.utils.tensorboard
from uvicorn.config import Config
Config("agentrl.service.app:create_app", factory=True, ws="websockets").load()  # its protocol modules
for plugin in metadata.entry_points(group="agentrl.envs"):
    if plugin.name == "maze":
        plugin.load()
tops = {name.split(".")[0] for name in sys.modules} - set(sys.stdlib_module_names)
owners = metadata.packages_distributions()  # once: it scans every installed distribution
print(json.dumps(sorted({d for top in tops for d in owners.get(top, [])})))
"""


@pytest.mark.slow  # imports the whole trainer and service in a fresh process
def test_every_distribution_the_check_imports_is_a_wheel_or_the_gpu_machines_own() -> None:
    """What the check (and the env service it starts) imports is covered, at the versions installed here;
    optional imports that are missing here are missing there too, which their importers tolerate."""
    out = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {canonical(name) for name in json.loads(out.stdout.splitlines()[-1])}
    covered = set(wheel_requirements()) | requirement_closure(MACHINE_OWN) | {"agentrl", "agentrl-env-maze"}
    optional = requirement_closure(("fastapi", "uvicorn", "httpx", "huggingface-hub", "fsspec")) - covered
    # imported here only because installed here, by importers that do without them (try/except ImportError)
    extras = {
        "brotli",
        "h2",
        "hpack",
        "hyperframe",
        "orjson",
        "email-validator",
        "dill",
        "pillow",
        "setuptools",
        "colorama",
    }
    extras |= {"googleapis-common-protos", "watchfiles", "truststore", "httpx2", "httpcore2", "chardet"}
    # opentelemetry-api is required (fastapi imports it); the SDK and exporters only where installed
    extras |= {name for name in imported if name.startswith("opentelemetry-") and name != "opentelemetry-api"}
    missing = imported - covered - extras
    assert not missing - optional, sorted(missing - optional)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this is the skip path of a machine without CUDA")
def test_the_script_skips_where_there_is_no_cuda(tmp_path: Path) -> None:
    env = {**os.environ, "PY": sys.executable}
    result = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "gpu check skipped: CUDA is not available here" in result.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["skipped"] is True and report["passed"] is None
    assert report["environment"]["torch"] == torch.__version__


@pytest.mark.slow  # 4 min on the shared, loaded 2-core CPU: six check processes, one of a 135M model
def test_the_update_checks_pass_on_the_cpu(tmp_path: Path) -> None:
    """The GPU run's code paths before they meet a GPU: FSDP2 (gloo, one rank), shared prefix with TIS,
    LoRA, checkpoint and exact resume, and the throughput line, at tiny sizes."""
    only = "fsdp2,shared_prefix,lora,checkpoint_resume,throughput,throughput_smollm2_shape"
    command = [
        sys.executable,
        "-m",
        "agentrl.devtools.gpu_check",
        str(tmp_path),
        "--device",
        "cpu",
        "--small",
    ]
    result = subprocess.run([*command, "--only", only], cwd=REPO, capture_output=True, text=True, timeout=480)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result.returncode == 0, json.dumps(report["checks"], indent=1)[-3000:]
    assert set(report["checks"]) == set(only.split(",")) and report["passed"] is True
    assert report["checks"]["fsdp2"]["result"]["backend"] == "gloo"
    assert report["checks"]["throughput"]["result"]["update_tokens_per_s"] > 0
    assert "throughput (float32" in result.stdout
    shaped = report["checks"]["throughput_smollm2_shape"]["result"]
    assert 134e6 < shaped["matmul_params"] < 135e6  # SmolLM2-135M's size, tied embeddings counted once
    assert "throughput_smollm2_shape (float32, 134.52M matmul params)" in result.stdout
