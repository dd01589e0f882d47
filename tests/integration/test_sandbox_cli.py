"""`agentrl sandbox ls|prune` handlers against the engine (marked `docker`); the subcommand is exercised
through its own parser, exactly as `agentrl.cli.main` registers every subcommand module."""

from __future__ import annotations

import argparse
import os
import socket
import uuid

import pytest

from agentrl.cli import sandbox as sandbox_cli
from agentrl.sandbox.docker import OWNER_LABEL, SERVICE_LABEL, DockerSandbox, labelled_containers

pytestmark = pytest.mark.docker


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="agentrl")
    sandbox_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sandbox", *argv])
    return int(args.handler(args))


def test_ls_lists_images_and_containers(capsys: pytest.CaptureFixture[str]) -> None:
    service = f"agentrl-cli-test-{uuid.uuid4().hex[:8]}"
    with DockerSandbox(labels={SERVICE_LABEL: service}) as sandbox:
        assert _run("ls") == 0
        output = capsys.readouterr().out
        assert "agentrl/sandbox-python:latest" in output and sandbox.container_id[:12] in output


def test_prune_removes_orphans_of_dead_processes_only(capsys: pytest.CaptureFixture[str]) -> None:
    service = f"agentrl-cli-test-{uuid.uuid4().hex[:8]}"
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    orphan = DockerSandbox(labels={SERVICE_LABEL: service, OWNER_LABEL: f"{socket.gethostname()}:{pid}"})
    live = DockerSandbox(labels={SERVICE_LABEL: service})
    orphan.start()
    live.start()
    try:
        assert _run("prune") == 0
        assert "removed" in capsys.readouterr().out
        assert [entry["Id"] for entry in labelled_containers({SERVICE_LABEL: service})] == [live.container_id]
    finally:
        orphan.close()
        live.close()
