"""The newcomer's walk-through: the shell commands of README.md's front page, in README's order, run from
an empty folder as a new user runs them.

`STEPS` is README's commands, each with how the walk-through runs it; `test_the_steps_are_the_readme_commands`
fails when README shows a command that is not a step (or a step README no longer shows), so a command added
to the front page is run here or the suite says why not. How a step runs:

- `run`: as shown.
- `shrunk`: as shown, followed by overrides that make it take seconds (the tiny random Llama of
  tests/tiny_models.py, one step of one group, one held-out task, short turns). Later overrides win, so the
  command README shows is parsed, loaded and run end to end; only the budget is smaller.
- `server`: `agentrl ui`, started on a free port, asked for its runs page, then stopped.
- `docker`: needs Docker; runs shrunk in `test_the_docker_steps`, under the `docker` marker.
- `aside`: `make demo` (the issue leaves it out: ~8 minutes of training) and `make test` (it runs this test).

`.venv/bin/X` runs the `X` of a throwaway virtualenv that sees this interpreter's packages (the one
tests/smoke/test_envs_new.py uses), so `pip install -e hilo` installs nothing into the real one. `make`
runs in the repository. A step fails the walk-through when it exits non-zero or its output lacks the line
it is expected to print.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_blocks import commands, doc_blocks, indented_blocks
from test_envs_new import throwaway_venv

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HARNESS_DOC = ROOT / "docs" / "harness.md"
BUDGET = (
    "train.steps=1",
    "train.tasks_per_step=1",
    "train.group_size=2",
    "eval.num_tasks=1",
    "sampling.max_new_tokens=16",
    "rollout.max_turns=2",
    "rollout.max_context_tokens=4096",
)
TINY = ("model.name={tiny}", "model.dtype=float32", *BUDGET)


@dataclass(frozen=True)
class Step:
    command: str  # as README shows it, its comment dropped
    how: str  # run | shrunk | server | docker | aside
    extra: tuple[str, ...] = ()  # what the walk-through appends ({tiny}: the tiny model's folder)
    expect: str = ""  # what its output must hold


STEPS = [
    Step("make demo", "aside"),
    Step("make test", "aside"),
    Step(".venv/bin/agentrl --help", "run", expect="envs"),
    Step(".venv/bin/agentrl envs list", "run", expect="agentrl/Maze-v0"),
    Step(".venv/bin/agentrl train --task maze name=my-maze train.steps=2", "shrunk", TINY, "held-out after"),
    Step(".venv/bin/agentrl eval --task maze model.name=runs/my-maze/final", "shrunk", BUDGET, "held-out:"),
    Step(".venv/bin/agentrl runs ls", "run", expect="my-maze"),
    Step(".venv/bin/agentrl ui", "server", expect="my-maze"),
    Step(".venv/bin/agentrl envs new hilo", "run", expect="pip install -e"),
    Step(".venv/bin/pip install -e hilo --no-deps --no-build-isolation", "run"),
    Step(".venv/bin/agentrl envs check hilo/Hilo-v0", "run", expect="result: PASS"),
    Step(".venv/bin/agentrl train --task hilo train.steps=1", "shrunk", TINY, "run directory: runs/"),
    Step(
        ".venv/bin/agentrl train --task calc rollout.harness.target=my_agent:play",
        "docker",
        TINY,
        "run directory: runs/",
    ),
    Step("make test-gpu", "run", expect="gpu check"),
]


def readme_commands() -> list[str]:
    assert indented_blocks(README) == [], (
        "README shows commands in ```bash blocks only (this test reads those)"
    )
    return [
        command for block in doc_blocks(README) if block.lang == "bash" for command in commands(block.text)
    ]


def test_the_steps_are_the_readme_commands() -> None:
    assert [step.command for step in STEPS] == readme_commands(), (
        "README's front-page commands changed: give each one a Step here (how the walk-through runs it)"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def words(step: Step, tiny: Path) -> list[str]:
    """The step's argv: `.venv/bin/` dropped (the throwaway virtualenv's bin comes first on PATH)."""
    shown = [word.removeprefix(".venv/bin/") for word in step.command.split()]
    return shown + [word.format(tiny=tiny) for word in step.extra]


def run_step(step: Step, work: Path, env: dict[str, str], tiny: Path) -> str:
    """Run one step from `work` (make: from the repository); its output. Fails on an exit code or a
    missing expected line."""
    if step.how == "server":
        return serve_once(words(step, tiny), work, env)
    argv, cwd = words(step, tiny), work
    if argv[0] == "make":
        cwd = ROOT
        # on CPU `make test-gpu` writes its skip report; the checks themselves need CUDA and minutes
        env = {**env, "GPU_CHECK_OUT": str(work / "gpu-check"), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"`{step.command}` exited {done.returncode}:\n{output[-4000:]}"
    assert step.expect in output, f"`{step.command}` did not print {step.expect!r}:\n{output[-4000:]}"
    return output


def serve_once(argv: list[str], work: Path, env: dict[str, str]) -> str:
    """Start the server on a free port, read its front page, stop it."""
    port, log = free_port(), work / "ui.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=work,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"`agentrl ui` exited:\n{log.read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
                    return str(response.read().decode())
            except OSError:
                assert time.monotonic() < deadline, "`agentrl ui` did not answer within 120 s"
                time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "work"
    work.mkdir()
    return work, throwaway_venv(tmp_path / "env")


@pytest.mark.slow  # README's commands, trainings included: a minute and more
def test_the_walkthrough(workspace: tuple[Path, dict[str, str]], tiny_model: Path) -> None:
    work, env = workspace
    for step in STEPS:
        if step.how in {"aside", "docker"}:
            continue
        page = run_step(step, work, env, tiny_model)
        assert step.expect in page, f"`{step.command}`: no {step.expect!r} in what it served"
    assert (work / "runs" / "my-maze" / "final").is_dir()
    assert (work / "hilo" / "pyproject.toml").is_file()
    assert not (work / "configs").exists() and not (work / "tasks").exists()  # plugins ship their own


@pytest.mark.docker
def test_the_docker_steps(workspace: tuple[Path, dict[str, str]], tiny_model: Path) -> None:
    work, env = workspace
    agent = next(b.text for b in doc_blocks(HARNESS_DOC) if b.text.startswith("# my_agent.py"))
    (work / "my_agent.py").write_text(agent)  # README points at docs/harness.md for it
    env = {**env, "PYTHONPATH": str(work)}
    for step in STEPS:
        if step.how == "docker":
            run_step(step, work, env, tiny_model)


def test_a_failing_command_fails_the_walkthrough(
    workspace: tuple[Path, dict[str, str]], tiny_model: Path
) -> None:
    work, env = workspace
    with pytest.raises(AssertionError, match="exited 2"):
        run_step(Step(".venv/bin/agentrl envs lsit", "run"), work, env, tiny_model)
    with pytest.raises(AssertionError, match="did not print"):
        run_step(Step(".venv/bin/agentrl --help", "run", expect="no such line"), work, env, tiny_model)
