"""DockerSandbox and its exec channel against a real engine (marked `docker`), and their pure helpers
(unmarked, no Docker). Every module-scoped run ends by asserting no container of this process leaked."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

import docker
import pytest
import workdir_listing

from agentrl.errors import ConfigError, SandboxFileError, SandboxLost, SandboxUnavailable
from agentrl.sandbox.base import OutputCapture, truncate_output, truncation_marker
from agentrl.sandbox.channel import (
    CHANNEL_MOUNT,
    RENDEZVOUS_PREFIX,
    Rendezvous,
    capture_from_wire,
    frame,
    reap_rendezvous_dirs,
    socket_transport_possible,
    split_docker_frames,
    take_frame,
    take_message,
)
from agentrl.sandbox.docker import (
    OWNER_LABEL,
    SERVICE_LABEL,
    SESSION_LABEL,
    DockerSandbox,
    container_options,
    labelled_containers,
    owner,
    reap,
    reap_orphans,
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


def test_request_frames_are_length_prefixed_json() -> None:
    data = frame({"op": "ping"})
    assert data[:4] == len(data[4:]).to_bytes(4, "big") and json.loads(data[4:]) == {"op": "ping"}


def test_docker_frames_are_split_and_partial_ones_kept() -> None:
    buffer = bytearray(b"\x01\x00\x00\x00\x00\x00\x00\x02hi" + b"\x02\x00\x00\x00\x00\x00\x00\x03err")
    buffer += b"\x01\x00\x00\x00\x00\x00\x00\x05ab"
    assert split_docker_frames(buffer) == [(1, b"hi"), (2, b"err")]
    assert bytes(buffer) == b"\x01\x00\x00\x00\x00\x00\x00\x05ab"


def test_reply_frames_are_taken_one_at_a_time() -> None:
    buffer = bytearray(frame({"a": 1}) + bytes([0, 0, 0, 2]) + b"\x00\xff" + bytes(4) + frame({"b": 2})[:5])
    assert take_message(buffer) == {"a": 1}
    assert (take_frame(buffer), take_frame(buffer), take_frame(buffer)) == (b"\x00\xff", b"", None)
    assert len(buffer) == 5


def test_wire_capture_matches_a_local_capture() -> None:
    local = OutputCapture(16)
    local.feed(b"0123456789" * 10)
    wire = [
        base64.b64encode(b"0123456789012345").decode(),
        base64.b64encode(b"4567890123456789").decode(),
        100,
    ]
    assert capture_from_wire(wire, 16).result() == local.result()


def test_container_options_are_hardened() -> None:
    options = container_options(SandboxConfig(), {SESSION_LABEL: "s"})
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["read_only"] and not options["privileged"] and options["network_mode"] == "none"
    assert options["mem_limit"] == options["memswap_limit"] and options["pids_limit"] == 64
    assert options["user"] == "1000:1000" and options["environment"] == {}
    assert "volumes" not in options and "runtime" not in options
    assert "uid=1000" in options["tmpfs"]["/work"] and "size=64m" in options["tmpfs"]["/tmp"]
    assert container_options(SandboxConfig(runtime="runsc"), {})["runtime"] == "runsc"


def test_the_only_mount_is_the_read_only_rendezvous() -> None:
    rendezvous = Rendezvous()
    try:
        (mount,) = container_options(SandboxConfig(), {}, rendezvous)["mounts"]
        assert mount["Type"] == "bind" and mount["ReadOnly"] and mount["Target"] == CHANNEL_MOUNT
        assert mount["Source"] == rendezvous.directory and os.listdir(rendezvous.directory) == []
    finally:
        rendezvous.close()
    assert not os.path.exists(rendezvous.directory)


def test_an_unknown_channel_transport_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="auto, socket, attach"):
        SandboxConfig(channel="tcp")


def test_the_socket_transport_needs_a_local_engine_and_runc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert "remote" in str(socket_transport_possible(None))
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert "runsc" in str(socket_transport_possible("runsc"))
    assert socket_transport_possible(None) is None


def test_the_rendezvous_accepts_only_its_token_then_stops_listening() -> None:
    rendezvous = Rendezvous()
    try:
        in_container_path, token = rendezvous.server_arguments()
        assert in_container_path == f"{CHANNEL_MOUNT}/s" and len(token) == 32
        impostor, ours = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        impostor.connect(rendezvous.path)
        impostor.sendall(b"0" * 32 + b"\n")
        ours.connect(rendezvous.path)
        ours.sendall(token.encode() + b"\n")
        accepted = rendezvous.accept(5.0)
        assert not os.path.exists(rendezvous.path)  # unlinked: nothing can connect any more
        ours.sendall(b"ping")
        assert accepted.recv(4) == b"ping"
        assert impostor.recv(1) == b""  # closed by the host
        for sock in (accepted, impostor, ours):
            sock.close()
    finally:
        rendezvous.close()


def test_rendezvous_dirs_of_dead_processes_are_reaped(tmp_path: os.PathLike) -> None:
    dead = os.path.join(tmp_path, f"{RENDEZVOUS_PREFIX}{2**22 + 12345}-abc")  # above pid_max's default
    alive = os.path.join(tmp_path, f"{RENDEZVOUS_PREFIX}{os.getpid()}-abc")
    os.mkdir(dead)
    os.mkdir(alive)
    assert reap_rendezvous_dirs(str(tmp_path)) == 1
    assert not os.path.exists(dead) and os.path.exists(alive)


# --- against the engine ---


@pytest.fixture(scope="module", autouse=True)
def nothing_leaks() -> Iterator[None]:
    yield
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        return
    for _ in range(50):  # removals run in background threads of the pools
        if not labelled_containers({OWNER_LABEL: owner()}, client):
            return
        time.sleep(0.1)
    leaked = labelled_containers({OWNER_LABEL: owner()}, client)
    reap({OWNER_LABEL: owner()}, client)
    assert not leaked, f"{len(leaked)} sandbox containers leaked"


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
    assert not host["Binds"]
    (mount,) = _container(sandbox)["Mounts"]  # the rendezvous directory, empty once the channel is up
    assert mount["Destination"] == CHANNEL_MOUNT and not mount["RW"] and sandbox.transport == "socket"
    assert sandbox.exec(f"ls -A {CHANNEL_MOUNT}").stdout == ""
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
def test_a_timeout_also_kills_children_that_left_the_process_group(sandbox: DockerSandbox) -> None:
    script = "import os, time\nif os.fork() == 0:\n    os.setpgid(0, 0)\n    time.sleep(60)\ntime.sleep(60)\n"
    result = sandbox.exec(["python3", "-c", script], timeout=1.0)
    assert result.timed_out
    assert "time.sleep" not in sandbox.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout


@pytest.mark.docker
def test_a_timeout_kills_daemons_that_left_with_setsid(sandbox: DockerSandbox) -> None:
    sandbox.exec("nohup sleep 501 >/dev/null 2>&1 &")  # a background job of a command that finished in time
    script = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '502'])\n"
        "    os._exit(0)\n"
        "time.sleep(60)\n"
    )
    result = sandbox.exec(["python3", "-c", script], timeout=1.0)
    assert result.timed_out
    processes = sandbox.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    assert "sleep 502" not in processes and "time.sleep" not in processes  # the daemon died with it
    assert "sleep 501" in processes  # the earlier command's background job was left alone


@pytest.mark.docker
def test_the_channel_is_usable_after_a_timeout(sandbox: DockerSandbox) -> None:
    assert sandbox.exec("while :; do :; done", timeout=0.5).timed_out
    assert sandbox.exec("echo still here").stdout == "still here\n"


@pytest.mark.docker
def test_a_background_job_does_not_hold_the_call(sandbox: DockerSandbox) -> None:
    result = sandbox.exec("sleep 30 & echo started", timeout=5.0)
    assert result.stdout == "started\n" and not result.timed_out and result.duration_s < 2


@pytest.mark.docker
def test_the_episode_budget_bounds_every_command(session: str) -> None:
    config = SandboxConfig(command_timeout_s=10.0, episode_budget_s=1.5)
    with DockerSandbox(config, {SESSION_LABEL: session}) as sandbox:
        started = time.monotonic()
        assert sandbox.exec("sleep 5").timed_out and time.monotonic() - started < 3
        late = sandbox.exec("echo never")
        assert late.timed_out and late.stdout == "" and "budget" in late.stderr


@pytest.mark.docker
def test_cwd_env_and_exit_codes(sandbox: DockerSandbox) -> None:
    result = sandbox.exec('pwd; echo "$GREETING"; exit 3', cwd="/tmp", env={"GREETING": "hi"})
    assert (result.exit_code, result.stdout) == (3, "/tmp\nhi\n")
    missing = sandbox.exec(["no-such-program"])
    assert missing.exit_code == 127 and "No such file" in missing.stderr


@pytest.mark.docker
def test_files_round_trip_and_reads_are_capped(session: str) -> None:
    config = SandboxConfig(read_limit_bytes=100)
    with DockerSandbox(config, {SESSION_LABEL: session}) as sandbox:
        sandbox.write_file("/work/data.bin", "x" * 1000)
        text = sandbox.read_file("/work/data.bin")
        assert text.startswith("x" * 100) and "900 bytes truncated" in text
        with pytest.raises(SandboxFileError):
            sandbox.read_file("/work/missing")
        with pytest.raises(SandboxFileError):
            sandbox.write_file("/etc/owned", "no")


@pytest.mark.docker
def test_fork_copies_the_workdir_and_nothing_else_is_shared(sandbox: DockerSandbox) -> None:
    sandbox.exec("mkdir -p pkg && echo one > pkg/a.txt && chmod +x pkg/a.txt")
    child = sandbox.fork()
    try:
        assert child.container_id != sandbox.container_id
        assert child.exec("cat pkg/a.txt; test -x pkg/a.txt && echo exec").stdout == "one\nexec\n"
        child.exec("echo two > pkg/a.txt")
        assert sandbox.exec("cat pkg/a.txt").stdout == "one\n"
        assert child.labels[SESSION_LABEL] != sandbox.labels[SESSION_LABEL]
    finally:
        child.close()


@pytest.mark.docker
def test_fork_streams_a_workdir_near_the_tmpfs_size(sandbox: DockerSandbox) -> None:
    # 48 MB of a 64 MB tmpfs, with a 256 MB memory limit: held whole (and base64-encoded) it would OOM
    assert sandbox.exec("head -c 48000000 /dev/urandom > big && md5sum big").exit_code == 0
    child = sandbox.fork()
    try:
        assert child.exec("md5sum big").stdout == sandbox.exec("md5sum big").stdout
    finally:
        child.close()


# a parent's edits after its first command: changed, added, deleted and re-created files, modes (000 too),
# a new nested and an empty dir, symlinks, a hard link, a FIFO, a directory nobody may list, a read-only one
EDITS = """set -e
mkdir -p pkg/sub && printf 'one\\n' > pkg/a.txt && printf 'gone\\n' > pkg/old.txt
head -c 5000 /dev/urandom > blob
printf 'two\\n' >> pkg/a.txt && chmod 751 pkg/a.txt && rm pkg/old.txt && mkdir -p new/nested/deeper
ln -s pkg/a.txt link && ln -s /etc/passwd absolute && ln -s nowhere dangling && ln pkg/a.txt hard
mkfifo fifo && : > empty && printf 'hidden\\n' > secret && chmod 000 secret
mkdir closed && printf 'x\\n' > closed/inside && chmod 000 closed
mkdir frozen && : > frozen/f && chmod 555 frozen
touch -d '2001-02-03 04:05:06.789' blob
"""


@pytest.mark.docker
def test_a_fork_equals_its_parent_entry_by_entry(sandbox: DockerSandbox) -> None:
    assert sandbox.exec(EDITS).exit_code == 0
    child = sandbox.fork()
    try:
        parent = workdir_listing.in_sandbox(sandbox)
        assert workdir_listing.in_sandbox(child) == parent
        assert {"pkg/old.txt"} & set(parent) == set() and parent["secret"][0] == oct(0o100000)
        assert parent["pkg/a.txt"][4] == "hard"  # one inode, two names
        assert child.exec("cat pkg/a.txt; readlink link; test -p fifo && echo fifo").stdout == (
            "one\ntwo\npkg/a.txt\nfifo\n"
        )
    finally:
        child.close()


@pytest.mark.docker
def test_a_fork_into_a_target_that_holds_files_empties_it_first(sandbox: DockerSandbox, session: str) -> None:
    assert sandbox.exec(EDITS).exit_code == 0
    with DockerSandbox(sandbox.config, {SESSION_LABEL: session}) as target:
        stale = "mkdir -p pkg stale/locked && echo theirs > pkg/a.txt && echo old > stale/locked/f"
        assert target.exec(stale + " && chmod 500 stale/locked").exit_code == 0
        child = sandbox.fork(target=target)
        assert child is target
        assert workdir_listing.in_sandbox(child) == workdir_listing.in_sandbox(sandbox)


@pytest.mark.docker
def test_a_fork_of_an_unlistable_workdir_root_keeps_its_mode(sandbox: DockerSandbox) -> None:
    assert sandbox.exec("echo a > a && chmod 300 /work").exit_code == 0
    child = sandbox.fork()
    try:
        assert workdir_listing.in_sandbox(child) == workdir_listing.in_sandbox(sandbox)
        assert workdir_listing.in_sandbox(child)[""][0] == oct(0o40300)
    finally:
        child.close()


@pytest.mark.docker
def test_async_with_starts_and_removes(session: str) -> None:
    async def episode() -> int:
        async with DockerSandbox(labels={SESSION_LABEL: session}) as sandbox:
            return (await sandbox.aexec(["true"])).exit_code

    assert asyncio.run(episode()) == 0
    assert labelled_containers({SESSION_LABEL: session}) == []


@pytest.mark.docker
def test_reap_orphans_removes_containers_of_dead_owners_only(session: str) -> None:
    dead = f"{socket.gethostname()}:{_dead_pid()}"
    orphan = DockerSandbox(labels={SESSION_LABEL: session, OWNER_LABEL: dead})
    live = DockerSandbox(labels={SESSION_LABEL: session})
    orphan.start()
    live.start()
    try:
        assert reap_orphans() >= 1
        remaining = labelled_containers({SESSION_LABEL: session})
        assert [entry["Id"] for entry in remaining] == [live.container_id]
    finally:
        orphan.close()
        live.close()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


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
def test_killing_every_process_ends_the_sandbox_with_sandbox_lost(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    with pytest.raises(SandboxLost):
        sandbox.exec("kill -9 -1")  # the channel server runs as the same user, so it dies too
    assert time.monotonic() - started < 5
    with pytest.raises(SandboxLost):
        sandbox.exec("true")


@pytest.mark.docker
def test_the_attach_transport_still_works(session: str) -> None:
    config = SandboxConfig(channel="attach", command_timeout_s=1.0)
    with DockerSandbox(config, {SESSION_LABEL: session}) as sandbox:
        assert sandbox.transport == "attach" and not _container(sandbox)["Mounts"]
        assert sandbox.exec("echo hi; exit 3").exit_code == 3
        sandbox.write_file("/work/a.txt", "x" * 100_000)
        assert sandbox.read_file("/work/a.txt") == "x" * 65536 + truncation_marker(100_000 - 65536)
        assert sandbox.exec("sleep 5").timed_out and sandbox.exec("echo ok").stdout == "ok\n"


@pytest.mark.docker
def test_demanding_the_socket_transport_where_it_cannot_work_is_refused() -> None:
    with pytest.raises(SandboxUnavailable, match="cannot work here"):
        DockerSandbox(SandboxConfig(channel="socket", runtime="runsc")).start()


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
    assert labelled_containers({SESSION_LABEL: session}) == []


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
