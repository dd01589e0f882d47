"""The official-image path end to end, against a local stand-in for an official SWE-bench instance image.

No official image can be pulled here. The stand-in is built in this test FROM the local inflection image
and tagged under the name the official harness gives the instance (`swebench/sweb.eval.x86_64.<id>:latest`):
like an official image it holds the repository at base_commit in /testbed as a git repository, with older
history, and with a later commit holding the fix on another branch and a tag (what the sandbox layer must
not let the agent see). Its eval script has the official shape but runs plain pytest (the stand-in has no
conda env). What this does not test: a real official image (its conda env, its eval script's install
steps under our read-only root).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from agentrl_swebench.env import SWEBenchEnv
from agentrl_swebench.official import layer_tag, official_image
from agentrl_swebench.sources import ImageSource
from agentrl_swebench.validate import ValidateConfig, validate_instances

from agentrl.types import Action, ToolCall

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[3]
LOCAL_IMAGE = "agentrl/swebench-inflection:0.5.1"
TEST_FILE = "test_inflection.py"
GIT = "git -c user.name=upstream -c user.email=upstream@example.com"
STAND_IN = f"""FROM {LOCAL_IMAGE}
USER root
COPY gold.patch /tmp/gold.patch
RUN set -e; cp -R /opt/swebench/pristine /testbed; chmod -R u+w /testbed; cd /testbed; \\
    git init -q -b main .; git add -A; {GIT} commit -qm "release"; \\
    git apply -R /tmp/gold.patch; {GIT} commit -qam "the commit that brought the bug"; \\
    git checkout -q -b later; git apply /tmp/gold.patch; {GIT} commit -qam "the fix"; git tag v-fixed; \\
    git checkout -q main; rm /tmp/gold.patch
"""
EVAL_SCRIPT = """#!/bin/bash
set -uxo pipefail
cd /testbed
git config --global --add safe.directory /testbed
cd /testbed
git status
git -c core.fileMode=false diff {base}
git checkout {base} {tests}
: '>>>>> Start Test Output'
python3 -m pytest -rA -p no:cacheprovider {tests}
: '>>>>> End Test Output'
git checkout {base} {tests}
"""
CONFTEST_HACK = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def heredoc(command: str, text: str) -> str:
    return f"{command} <<'AGENTRL_EOF'\n{text}AGENTRL_EOF"


def local_record() -> dict[str, Any]:
    lines = (REPO / "tasks" / "swebench-local" / "train.jsonl").read_text().splitlines()
    return next(r for r in map(json.loads, lines) if r["repo"] == "pypi/inflection")


def build_stand_in(client: docker.DockerClient, tag: str, gold_patch: str) -> None:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        for name, text in (("Dockerfile", STAND_IN), ("gold.patch", gold_patch)):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, pull=False)


@pytest.fixture(scope="module")
def record() -> Iterator[dict[str, Any]]:
    """An official-style record for the stand-in image (which is removed afterwards, with its layer)."""
    built = subprocess.run(["bash", "scripts/build_swebench_images.sh", "inflection"], cwd=REPO, text=True,
                           capture_output=True)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    local = local_record()
    image = official_image({"instance_id": local["instance_id"]})
    client = docker.from_env()
    build_stand_in(client, image, local["patch"])
    base = client.containers.run(image, ["git", "-C", "/testbed", "rev-parse", "HEAD"], remove=True)
    base_commit = base.decode().strip()
    script = EVAL_SCRIPT.format(base=base_commit, tests=TEST_FILE)
    yield {
        **local,
        "repo": "inflection/inflection",  # not a local-set repo: only the official path can run it
        "base_commit": base_commit,
        "image": image,
        "eval_script": script,
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
    }
    for tag in (layer_tag(image), image):
        client.images.remove(tag, force=True)


@pytest.fixture
def env(record: dict[str, Any]) -> Iterator[SWEBenchEnv]:
    swe = SWEBenchEnv(max_steps=8, images="official")
    swe.reset(seed=0, options={"task": record})
    yield swe
    swe.close()


def bash(env: SWEBenchEnv, command: str) -> str:
    return env.step(call("bash", command=command)).observation.split("<output>\n", 1)[1]


def test_the_agent_gets_the_base_tree_in_testbed_and_no_history(
    env: SWEBenchEnv, record: dict[str, Any]
) -> None:
    assert (
        bash(env, "pwd; git log --all --format=%s | cat; git tag; git remote -v")
        == "/testbed\nbase\n</output>"
    )
    # the image's own repository, readable in the layer, is cut to the base commit alone
    pristine = "git -c safe.directory=* -C /opt/swebench/pristine"
    out = bash(
        env, f"{pristine} rev-list --all | cat; {pristine} tag; {pristine} remote; {pristine} status -s"
    )
    assert out == f"{record['base_commit']}\n</output>"
    tests = " ".join(f"'{test}'" for test in record["FAIL_TO_PASS"])
    assert (
        "<returncode>1</returncode>"
        in env.step(call("bash", command=f"python3 -m pytest -q {tests}")).observation
    )


def test_the_gold_fix_resolves_through_the_eval_script(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    env.step(call("bash", command=heredoc("git apply", record["patch"])))
    result = env.step(call("submit"))
    assert result.terminated and result.reward == 1.0 and result.info["resolved"]
    entry = result.info["report"][record["instance_id"]]
    assert entry["patch_successfully_applied"] and entry["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    assert len(entry["tests_status"]["PASS_TO_PASS"]["success"]) == len(record["PASS_TO_PASS"])


@pytest.mark.parametrize("attack", ["edit the tests", "add a conftest that passes everything"])
def test_tampering_with_the_tests_is_not_rewarded(
    env: SWEBenchEnv, record: dict[str, Any], attack: str
) -> None:
    command = {
        "edit the tests": f"sed -i 's/assert /assert True or /' {TEST_FILE}",
        "add a conftest that passes everything": heredoc("cat > conftest.py", CONFTEST_HACK),
    }[attack]
    env.step(call("bash", command=command))
    result = env.step(call("submit"))
    assert result.reward == 0.0 and not result.info["resolved"]
    assert result.info["report"][record["instance_id"]]["dropped_paths"]


def test_validate_on_official_images(record: dict[str, Any]) -> None:
    summary = validate_instances([record], ValidateConfig(workers=1, images=ImageSource("official")))
    assert (summary["gold_resolved"], summary["empty_resolved"]) == (1, 0)
