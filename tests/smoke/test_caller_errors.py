"""A caller error stops the real CLI at once with the service's message: `agentrl eval` and `agentrl train`
against a real env service that wants a token, run with a wrong one, exit 2 on the first request with the
401 message and no traceback, instead of re-playing every episode and reporting success over 0 episodes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentrl.service.embedded import EmbeddedService
from agentrl.wire import TOKEN_ENV

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
TOKEN = "smoke-right-token"
REFUSED = 'agentrl_service_errors_total{type="AuthError",status="401"}'


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedService]:
    """A real env service on a free 127.0.0.1 port requiring `TOKEN`, which it reads from the environment."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with EmbeddedService(tmp_path / "service.log") as running:
        yield running


def refused_requests(service: EmbeddedService) -> float:
    text = httpx.get(
        f"{service.url}/metrics", headers={"authorization": f"Bearer {TOKEN}"}, trust_env=False
    ).text
    found = re.search(re.escape(REFUSED) + r" (\S+)", text)
    return float(found.group(1)) if found else 0.0


def run_with_wrong_token(
    args: list[str], repo_root: Path, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    cheap = [
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        "eval.num_tasks=1",
        "rollout.infra_attempts=5",  # were the 401 re-played, the service would see 5 refusals, not 1
    ]
    env = {**os.environ, TOKEN_ENV: "wrong", "AGENTRL_DB_URL": ""}
    started = time.monotonic()
    result = subprocess.run(
        AGENTRL + args + cheap, cwd=repo_root, capture_output=True, text=True, timeout=600, env=env
    )
    return result, time.monotonic() - started


def assert_stopped_by_the_401(result: subprocess.CompletedProcess[str], command: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    assert f"agentrl {command}: AuthError:" in result.stderr, result.stderr[-3000:]
    assert "missing or wrong bearer token" in result.stderr and TOKEN_ENV in result.stderr
    assert "Traceback" not in result.stderr and "success" not in result.stdout


def test_eval_with_a_wrong_token_stops_with_the_401(
    service: EmbeddedService, repo_root: Path, tmp_path: Path
) -> None:
    result, seconds = run_with_wrong_token(
        ["eval", "--task", "calc", "--service-url", service.url], repo_root, tmp_path
    )
    assert_stopped_by_the_401(result, "eval")
    assert refused_requests(service) == 1  # one episode, one request: nothing was re-played
    assert seconds < 300


def test_train_with_a_wrong_token_stops_with_the_401(
    service: EmbeddedService, repo_root: Path, tmp_path: Path
) -> None:
    args = [
        "train", "--task", "calc", "--service-url", service.url, "train.steps=1", "train.tasks_per_step=1",
        "train.group_size=1", "eval.before=false", "eval.after=false",
    ]  # fmt: skip
    result, seconds = run_with_wrong_token(args, repo_root, tmp_path)
    assert_stopped_by_the_401(result, "train")
    assert refused_requests(service) == 1
    assert seconds < 300


def test_a_run_refused_while_it_opens_leaves_a_failed_row_not_a_live_one(
    repo_root: Path, tmp_path: Path
) -> None:
    """`engine.kind=openai` cannot train: the CLI stops with the message, and the run row it had created is
    `failed`, so `agentrl runs ls` and the viewer never show a dead run as live (issue 55)."""
    from agentrl.store.repository import close_store, list_runs, open_store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    args = [
        "train",
        "--task",
        "calc",
        "engine.kind=openai",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url={url}",
    ]
    result = subprocess.run(
        AGENTRL + args, cwd=repo_root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "AGENTRL_DB_URL": ""},
    )  # fmt: skip
    assert result.returncode == 2 and "can evaluate but not train" in result.stderr
    store = open_store(url)
    try:
        assert [run["status"] for run in list_runs(store)] == ["failed"]
    finally:
        close_store(store)
