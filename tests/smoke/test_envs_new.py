"""The tutorial of docs/environments.md run as a new user runs it: `agentrl envs new`, `pip install -e`, the
plugin's own tests, `agentrl envs check`, one training step and an evaluation, from a folder with no
configs/ or tasks/ in it. The page's shell blocks are the script, so the page and what works cannot drift.
A new plugin's scripted policy also writes demonstrations (`agentrl demos --policy scripted`): `envs new`,
`envs check` and `demos` share one scripted-policy contract (`agentrl.env.scripted`).

The plugin is installed into a throwaway virtualenv that sees this interpreter's packages (a .pth file adds
their folder), never into this interpreter's environment: nothing is left installed for other tests, whatever
happens here. The sandboxed plugin's own tests, which need Docker, run here too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from doc_blocks import DOC, bash_script, doc_blocks

from agentrl.devtools.scaffold import install_command, write_plugin

MARKER = "@@ block"


def throwaway_venv(root: Path) -> dict[str, str]:
    """A virtualenv in root/venv that sees this interpreter's packages, with `pip`, `pytest` and `agentrl`
    in root/bin running under it; returns the environment that puts them first on PATH."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]  # this interpreter's site-packages, editable installs included
    Path(purelib, "_agentrl_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for command, module in (("pip", "pip"), ("pytest", "pytest"), ("agentrl", "agentrl.cli.main")):
        wrapper = bin_dir / command
        wrapper.write_text(f'#!/bin/sh\nexec "{python}" -m {module} "$@"\n')
        wrapper.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(venv / "bin"), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "AGENTRL_DB_URL": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def block_times(stdout: str) -> list[float]:
    """The seconds-since-the-epoch the script echoed before each shell block (and after the last)."""
    return [float(t) for t in re.findall(rf"^{MARKER} \d+ (\S+)$", stdout, re.MULTILINE)]


@pytest.mark.slow
def test_the_tutorial_from_nothing_to_a_trained_run(tmp_path: Path) -> None:
    env = throwaway_venv(tmp_path / "env")
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-c", bash_script(DOC, MARKER)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    assert not (work / "configs").exists() and not (work / "tasks").exists()
    assert re.search(
        r"^hilo/Hilo-v0 +hilo \(agentrl-env-hilo 0\.1\.0\) +guess +hilo +hilo$", done.stdout, re.M
    )
    assert done.stdout.count("result: PASS") == 2  # envs check, random and scripted
    metrics = [json.loads(line) for line in (work / "runs" / "first" / "metrics.jsonl").open()]
    assert any(m.get("step") == 1 and "credit/anchor_hit_rate" in m for m in metrics)
    assert (work / "runs" / "first" / "final").is_dir()
    assert "held-out: success" in done.stdout
    assert importlib.util.find_spec("agentrl_hilo") is None  # installed only in the throwaway virtualenv

    shells = [block.text for block in doc_blocks() if block.lang == "bash"]
    train = next(index for index, text in enumerate(shells) if "agentrl train" in text)
    times = block_times(done.stdout)
    timing = {
        "envs new -> trained step (s)": round(times[train + 1] - times[0], 1),
        "whole tutorial (s)": round(times[-1] - times[0], 1),
        "per block (s)": [round(b - a, 1) for a, b in zip(times, times[1:], strict=False)],
    }
    (tmp_path / "timing.json").write_text(json.dumps(timing, indent=2))
    print(json.dumps(timing))


@pytest.mark.docker
def test_the_sandboxed_plugin_passes_its_own_tests_with_docker(tmp_path: Path) -> None:
    folder = tmp_path / "lookup"
    write_plugin("lookup", folder, sandboxed=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "deselected" in done.stdout and "skipped" not in done.stdout


def test_a_new_plugin_writes_demonstrations_with_its_scripted_policy(
    tmp_path: Path, tiny_model: Path
) -> None:
    env = throwaway_venv(tmp_path / "env")
    write_plugin("hilo", tmp_path / "hilo")
    install = [*shlex.split(install_command(tmp_path / "hilo")), "-q"]  # the docs' one install line
    installed = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # the tiny model's tokens are bytes: longer turns and prompts than SmolLM2's
    demos = [
        "agentrl", "demos", "--task", "hilo", "--policy", "scripted", "--n", "2", "--concurrency", "1",
        "name=demos", f"runs_dir={tmp_path / 'runs'}", f"store.url=sqlite:///{tmp_path / 'store.db'}",
        f"model.name={tiny_model}", "sampling.max_new_tokens=80", "rollout.max_context_tokens=4096",
    ]  # fmt: skip
    done = subprocess.run(demos, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    episodes = [json.loads(line) for line in (tmp_path / "runs" / "demos" / "demos.jsonl").open()]
    assert len(episodes) == 2 and all(episode["success"] for episode in episodes)
    assert all(turn["text"].startswith("<tool_call>") for episode in episodes for turn in episode["turns"])
