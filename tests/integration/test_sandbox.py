"""DockerSandbox against a real engine (marked `docker`), and its pure helpers (unmarked, no Docker)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import docker
import pytest

from agentrl.errors import SandboxLost, SandboxUnavailable
from agentrl.sandbox.base import OutputCapture, truncate_output, truncation_marker
from agentrl.sandbox.docker import (
    SERVICE_LABEL,
    SESSION_LABEL,
    DockerSandbox,
    classify_exit,
    container_options,
    reap,
    wrap_command,
)
from agentrl.sandbox.limits import SandboxConfig

# --- pure helpers ---


def test_short_output_is_untouched() -> None:
    assert truncate_output("hello", 10) == ("hello", False)


def test_long_output_keeps_head_and_tail() -> None:
    text, truncated = truncate_output("a" * 10 + "b" * 80 + "c" * 10, 20)
    assert truncated and text == "a" * 10 + truncation_marker(80) + "c" * 10


def test_truncation_never_breaks_utf8() -> None:
    text, truncated = truncate_output("é" * 100, 21)
    assert truncated and "bytes truncated" in text
    text.encode("utf-8")


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_streamed_capture_matches_truncate_output(chunk_size: int) -> None:
    data = "".join(str(i) for i in range(500))
    capture = OutputCapture(64)
    encoded = data.encode()
    for start in range(0, len(encoded), chunk_size):
        capture.feed(encoded[start : start + chunk_size])
    text, dropped = capture.result()
    assert (text, True) == truncate_output(data, 64) and dropped == len(encoded) - 64


def test_capture_below_the_limit_is_whole() -> None:
    capture = OutputCapture(64)
    capture.feed(b"abc")
    assert capture.result() == ("abc", 0)


def test_exit_classification() -> None:
    assert classify_exit(137, 10.2, 10.0) == (True, False)
    assert classify_exit(137, 0.5, 10.0) == (False, True)
    assert classify_exit(124, 10.1, 10.0) == (True, False)
    assert classify_exit(1, 10.1, 10.0) == (False, False)


def test_commands_run_under_timeout() -> None:
    assert wrap_command("echo hi", 2.5) == ["timeout", "-s", "KILL", "2.5s", "sh", "-c", "echo hi"]
    assert wrap_command(["python3", "x.py"], 10) == ["timeout", "-s", "KILL", "10s", "python3", "x.py"]


def test_container_options_are_hardened() -> None:
    options = container_options(SandboxConfig(), {SESSION_LABEL: "s"})
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["read_only"] and not options["privileged"] and options["network_mode"] == "none"
    assert options["mem_limit"] == options["memswap_limit"] and options["pids_limit"] == 64
    assert options["user"] == "1000:1000" and options["environment"] == {}
    assert "volumes" not in options and "runtime" not in options
    assert "uid=1000" in options["tmpfs"]["/work"] and "size=64m" in options["tmpfs"]["/tmp"]
    assert container_options(SandboxConfig(runtime="runsc"), {})["runtime"] == "runsc"


# --- against the engine ---


@pytest.fixture
def session() -> str:
    return f"sandbox-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sandbox(session: str) -> Iterator[DockerSandbox]:
    config = SandboxConfig(command_timeout_s=3.0, output_limit_bytes=1024)
    with DockerSandbox(config, {SESSION_LABEL: session}) as started:
        yield started


def _container(sandbox: DockerSandbox) -> dict:
    return docker.from_env().api.inspect_container(sandbox.container_id)


@pytest.mark.docker
def test_runs_as_non_root_in_the_workdir(sandbox: DockerSandbox) -> None:
    result = sandbox.exec("id -u; id -g; pwd")
    assert result.stdout == "1000\n1000\n/work\n" and result.exit_code == 0


@pytest.mark.docker
def test_the_container_is_hardened(sandbox: DockerSandbox, session: str) -> None:
    host = _container(sandbox)["HostConfig"]
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and not host["Privileged"]
    assert host["SecurityOpt"] == ["no-new-privileges"] and host["NetworkMode"] == "none"
    assert host["Memory"] == host["MemorySwap"] == 256 * 2**20 and host["PidsLimit"] == 64
    assert not host["Binds"] and not _container(sandbox)["Mounts"]
    labels = _container(sandbox)["Config"]["Labels"]
    assert labels[SESSION_LABEL] == session and SERVICE_LABEL in labels


@pytest.mark.docker
def test_no_host_environment_is_forwarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_SECRET_PROBE", "do-not-leak")
    with DockerSandbox() as sandbox:
        output = sandbox.exec("env").stdout
    names = {line.split("=", 1)[0] for line in output.splitlines()}
    assert names <= {"PATH", "HOME", "HOSTNAME", "PWD", "LANG", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}
    assert "do-not-leak" not in output


@pytest.mark.docker
def test_the_root_filesystem_is_read_only(sandbox: DockerSandbox) -> None:
    result = sandbox.exec("touch /etc/owned")
    assert result.exit_code != 0 and "Read-only file system" in result.stderr


@pytest.mark.docker
def test_write_file_and_stdin(sandbox: DockerSandbox) -> None:
    sandbox.write_file("/work/hello.py", "import sys\nprint('héllo', sys.stdin.read().upper())\n")
    result = sandbox.exec(["python3", "/work/hello.py"], stdin="world")
    assert result.stdout == "héllo WORLD\n"


@pytest.mark.docker
def test_a_timeout_kills_the_whole_process_tree(sandbox: DockerSandbox) -> None:
    result = sandbox.exec("sleep 60 & sleep 61 & wait", timeout=1.0)
    assert result.timed_out and not result.oom and result.duration_s < 5
    processes = sandbox.exec("for p in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $p; echo; done").stdout
    assert "sleep 6" not in processes and "sleep 3600" in processes  # only the keep-alive process is left


@pytest.mark.docker
def test_output_is_truncated_at_both_ends(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["python3", "-c", "print('START' + 'x' * 100000 + 'END')"])
    assert result.truncated and result.stdout.startswith("START") and result.stdout.endswith("END\n")
    assert "bytes truncated" in result.stdout and len(result.stdout) < 1200
    assert sandbox.exec_log[-1].truncated_bytes == 100009 - 1024


@pytest.mark.docker
def test_every_exec_is_logged(sandbox: DockerSandbox) -> None:
    sandbox.exec("exit 3")
    entry = sandbox.exec_log[-1]
    assert entry.command == ("sh", "-c", "exit 3") and entry.exit_code == 3 and entry.duration_s > 0


@pytest.mark.docker
def test_a_memory_bomb_is_reported_as_oom(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["python3", "-c", "x = b'a' * 10**9"])
    assert result.oom and not result.timed_out
    assert sandbox.exec("echo alive").stdout == "alive\n"


@pytest.mark.docker
def test_a_vanished_container_raises_sandbox_lost(sandbox: DockerSandbox) -> None:
    docker.from_env().containers.get(sandbox.container_id).remove(force=True)
    with pytest.raises(SandboxLost):
        sandbox.exec("true")


@pytest.mark.docker
def test_a_missing_image_says_run_make_setup() -> None:
    with pytest.raises(SandboxUnavailable, match="make setup"):
        DockerSandbox(SandboxConfig(image="agentrl/no-such-image:latest")).start()


@pytest.mark.docker
def test_close_removes_the_container(session: str) -> None:
    sandbox = DockerSandbox(labels={SESSION_LABEL: session})
    sandbox.start()
    sandbox.close()
    sandbox.close()
    assert docker.from_env().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={session}"}) == []


@pytest.mark.docker
def test_reap_removes_only_labelled_containers(session: str) -> None:
    kept, leaked = DockerSandbox(), DockerSandbox(labels={SESSION_LABEL: session})
    kept.start()
    leaked.start()
    try:
        assert reap({SESSION_LABEL: session}) == 1
        assert reap({SESSION_LABEL: session}) == 0
        assert kept.exec("true").exit_code == 0
    finally:
        kept.close()
        leaked.close()
