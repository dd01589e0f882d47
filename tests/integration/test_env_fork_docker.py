"""Forks of sandboxed envs: a calc fork's sandbox holds a copy of the parent's /work, a swebench-local fork's
workspace (the repository and its `.git`) a copy of the parent's; both step like the parent from the same
action and diverge independently afterwards. A web fork (by replay) reaches the same page."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import workdir_listing

from agentrl.env import StepResult, make
from agentrl.env.checker import check_fork
from agentrl.sandbox.pool import close_shared_pools
from agentrl.types import Action, ToolCall

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def observed(result: StepResult) -> tuple[object, ...]:
    """What a fork must reproduce (timings in the info may differ)."""
    return result.observation, result.reward, result.terminated, result.truncated, result.info["state_key"]


def test_a_calc_fork_copies_the_sandbox_and_diverges() -> None:
    pytest.importorskip("agentrl_calc")
    env = make("agentrl/Calc-v0", pool_size=0)
    env.reset(options={"task": {"id": "calc-fork", "question": "What is 6 * 7?", "answer": "42"}})
    try:
        env.step(call("python", code="open('/work/note', 'w').write('parent'); print('wrote')"))
        fork = env.fork()
        try:
            assert fork._sandbox is not env._sandbox  # type: ignore[attr-defined]
            read = call("python", code="print(open('/work/note').read())")
            assert observed(fork.step(read)) == observed(env.step(read))
            fork.step(call("python", code="open('/work/note', 'w').write('fork')"))
            assert "parent" in env.step(read).observation and "fork" in fork.step(read).observation
            assert (fork.turns_taken, env.turns_taken) == (4, 3)
        finally:
            fork.close()
        check_fork(
            env,
            options={"task": {"id": "c", "question": "1 + 1?", "answer": "2"}},
            actions=(
                call("python", code="print(2)"),
                call("python", code="print(open('/work/snippet.py').read())"),
                call("submit", answer="2"),
            ),
        )
    finally:
        env.close()


def _swebench_record() -> dict[str, object]:
    pytest.importorskip("agentrl_swebench")
    records = [json.loads(line) for line in (REPO / "tasks/swebench-local/train.jsonl").open()]
    record = next(r for r in records if r["repo"] == "pypi/inflection")
    from agentrl_swebench.projects import image_of

    image = image_of(record)
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        pytest.skip(f"{image} is missing; run scripts/build_swebench_images.sh inflection")
    return record


def test_a_swebench_fork_copies_the_workspace_and_diverges() -> None:
    record = _swebench_record()
    env = make("agentrl/SWEBench-v0")
    _, info = env.reset(options={"task": record})
    try:
        edited = env.step(call("bash", command="echo parent > NOTE && git status --short"))
        assert edited.info["state_key"] != info["state_key"]
        fork = env.fork()
        try:
            look = call("bash", command="cat NOTE && git status --short && git log --format=%H -1")
            original, forked = env.step(look), fork.step(look)
            assert observed(forked) == observed(original) and "?? NOTE" in original.observation
            fork.step(call("bash", command="echo fork > NOTE && rm -f setup.py"))
            after_parent, after_fork = env.step(look), fork.step(look)
            assert "parent" in after_parent.observation and "fork" in after_fork.observation
            assert after_parent.info["state_key"] != after_fork.info["state_key"]
            assert (fork.turns_taken, env.turns_taken) == (4, 3)
        finally:
            fork.close()
    finally:
        env.close()


def test_a_swebench_fork_from_the_pool_has_the_parents_workspace_entry_by_entry() -> None:
    record = _swebench_record()
    env = make("agentrl/SWEBench-v0", pool_size=2)
    env.reset(options={"task": record})
    edits = (
        "rm setup.py && chmod 600 README.rst && echo more >> inflection/__init__.py && mkdir -p new/a/b "
        "&& ln -s inflection/__init__.py init-link && git add -A && chmod 000 LICENSE"
    )
    try:
        assert env.step(call("bash", command=edits)).info["exit_code"] == 0
        fork = env.fork()
        try:
            parent, child = (workdir_listing.in_sandbox(e._sandbox) for e in (env, fork))  # type: ignore[attr-defined]
            assert child == parent and "setup.py" not in parent and parent["init-link"][4]
            assert parent["LICENSE"][0] == oct(0o100000) and any(path.startswith(".git/") for path in parent)
        finally:
            fork.close()
    finally:
        env.close()
        close_shared_pools()  # the warm pool's waiting sandboxes: other modules check that none is left


def test_a_web_fork_replays_to_the_same_page() -> None:
    pytest.importorskip("agentrl_web")
    if subprocess.run(
        ["docker", "image", "inspect", "agentrl/sandbox-web:latest"], capture_output=True
    ).returncode:
        pytest.skip("agentrl/sandbox-web is missing; run make setup")
    env = make("agentrl/WebShop-v0")
    try:
        observation, _ = env.reset(options={"task": {"id": "shop-fork", "seed": 3}})
        first_id = observation.split("[", 2)[1].split("]")[0]
        check_fork(
            env,
            options={"task": {"id": "shop-fork", "seed": 3}},
            actions=(
                call("scroll", direction="down"),
                call("click", element_id=int(first_id)),
                call("scroll", direction="up"),
            ),
        )
    finally:
        env.close()
