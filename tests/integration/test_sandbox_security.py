"""The security checklist of docs/sandbox.md as adversarial tests against real containers.

Each test runs one attack in a sandbox from a warm pool with the default hardening, asserts that the attack
failed, and then that the host, the engine and the pool are still healthy (a fresh sandbox answers quickly,
and the attacked one still answers where the attack should not have killed it). Every attack is bounded by
a command timeout of a few seconds. Network tests only try addresses that cannot route with
`network_mode="none"` (TEST-NET-1 and the IPv6 documentation prefix): connect() fails locally.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import docker
import pytest

from agentrl.sandbox.channel import CHANNEL_MOUNT
from agentrl.sandbox.docker import OWNER_LABEL, SERVICE_LABEL, DockerSandbox, labelled_containers, owner, reap
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import PoolConfig, SandboxPool

pytestmark = pytest.mark.docker

ATTACK_TIMEOUT_S = 3.0
HEALTHY_EXEC_S = 1.0  # a fresh sandbox must answer `echo ok` within this after an attack
# this module's pool labels its containers with a service name of its own, so the leak check counts only
# them (not a container an earlier test of the same process is still removing in the background)
LABELS = {SERVICE_LABEL: "agentrl-security-test"}


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    config = SandboxConfig(command_timeout_s=ATTACK_TIMEOUT_S)
    with SandboxPool(config, PoolConfig(size=2), LABELS) as started:
        assert started.wait_ready(timeout_s=60)
        yield started
    _assert_nothing_leaked()


@pytest.fixture
def sandbox(pool: SandboxPool) -> Iterator[DockerSandbox]:
    with pool.sandbox() as acquired:
        yield acquired


def assert_healthy(pool: SandboxPool, attacked: DockerSandbox | None = None) -> None:
    """The engine answers, the host has disk and memory left, and both a fresh sandbox and the attacked
    one (if given) run a command quickly."""
    assert docker.from_env().ping()
    assert shutil.disk_usage("/").free > 512 * 2**20
    assert _host_available_memory() > 512 * 2**20
    with pool.sandbox() as fresh:
        result = fresh.exec("echo ok")
        assert result.stdout == "ok\n" and result.duration_s < HEALTHY_EXEC_S
    if attacked is not None:
        assert attacked.exec("echo ok").stdout == "ok\n"


def test_fork_bomb_hits_the_pids_limit(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = sandbox.exec(["python3", "-c", bomb], timeout=2.0)
    assert result.timed_out
    assert processes_settle_below(sandbox, 10, within_s=5.0)  # the bomb's processes are killed and reaped
    assert_healthy(pool, sandbox)


def processes_settle_below(sandbox: DockerSandbox, limit: int, within_s: float) -> bool:
    """Whether the sandbox's process count drops below `limit` within `within_s` seconds: the killed
    processes of a timed-out exec are reaped by the sandbox's init a moment after the exec returns (a full
    run once counted 12 right away)."""
    deadline = time.monotonic() + within_s
    while True:
        if int(sandbox.exec("ls -d /proc/[0-9]* | wc -l").stdout) < limit:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def test_memory_bomb_is_oom_killed_inside(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["python3", "-c", "chunks = []\nwhile True:\n    chunks.append(b'x' * 2**24)\n"])
    assert result.oom and not result.timed_out and result.exit_code == 137
    assert_healthy(pool, sandbox)


def test_disk_fill_hits_the_tmpfs_size(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    free_before = shutil.disk_usage("/").free
    for target in ("/work/fill", "/tmp/fill"):
        result = sandbox.exec(f"head -c 200000000 /dev/zero > {target}")
        assert result.exit_code != 0 and "No space left on device" in result.stderr
    assert shutil.disk_usage("/").free > free_before - 64 * 2**20  # nothing landed on the host's disk
    sandbox.exec("rm -f /work/fill /tmp/fill")
    assert_healthy(pool, sandbox)


def test_infinite_loop_is_killed_at_the_timeout(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("while :; do :; done", timeout=1.0)
    assert result.timed_out and result.exit_code == 137 and time.monotonic() - started < 3
    assert_healthy(pool, sandbox)


def test_output_flood_is_truncated(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    result = sandbox.exec("echo FIRST; yes | head -c 20000000; echo; echo LAST; yes >&2")
    assert result.truncated and result.timed_out
    assert result.stdout.startswith("FIRST") and result.stdout.endswith("LAST\n")
    limit = sandbox.config.output_limit_bytes
    assert len(result.stdout) < limit + 100 and len(result.stderr) < limit + 100
    assert sandbox.exec_log[-1].truncated_bytes > 20_000_000
    assert_healthy(pool, sandbox)


def test_network_egress_fails_locally(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    probe = (
        "import socket\n"
        "targets = ((socket.AF_INET, ('192.0.2.1', 80)), (socket.AF_INET6, ('2001:db8::1', 80)))\n"
        "for family, address in targets:\n"
        "    s = socket.socket(family, socket.SOCK_STREAM)\n"
        "    s.settimeout(1)\n"
        "    try:\n"
        "        s.connect(address)\n"
        "        print('CONNECTED', address)\n"
        "    except OSError as error:\n"
        "        print('refused', error.errno)\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80)\n"
        "    print('RESOLVED')\n"
        "except OSError:\n"
        "    print('no dns')\n"
    )
    result = sandbox.exec(["python3", "-c", probe])
    assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout
    assert result.stdout.count("refused") == 2 and result.duration_s < 2  # failed at once, no route
    interfaces = sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1").stdout.split()
    assert interfaces == ["lo"]
    assert_healthy(pool, sandbox)


def test_the_docker_socket_is_not_reachable(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    paths = "/var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/docker"
    result = sandbox.exec(
        f"for p in {paths}; do test -e $p && echo FOUND $p; done; grep -c sock /proc/mounts"
    )
    assert "FOUND" not in result.stdout and result.stdout.strip() == "0"
    inspect = docker.from_env().api.inspect_container(sandbox.container_id)
    assert not inspect["HostConfig"]["Binds"]
    # the one mount is the exec channel's read-only rendezvous directory, whose socket is already gone
    expected = [(CHANNEL_MOUNT, False)] if sandbox.transport == "socket" else []
    assert [(mount["Destination"], mount["RW"]) for mount in inspect["Mounts"]] == expected
    probe = sandbox.exec(f"ls -A {CHANNEL_MOUNT}; touch {CHANNEL_MOUNT}/x")
    assert probe.stdout == "" and probe.exit_code != 0
    assert_healthy(pool, sandbox)


def test_privileges_cannot_be_raised(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    status = dict(
        line.split(":\t", 1)
        for line in sandbox.exec("cat /proc/self/status").stdout.splitlines()
        if ":\t" in line
    )
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    for capability_set in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capability_set], 16) == 0, capability_set
    setuid_root = (
        "import os\ntry:\n    os.setuid(0)\n    print('ROOT')\nexcept PermissionError:\n    print('denied')\n"
    )
    attempts = sandbox.exec(["python3", "-c", setuid_root])
    assert attempts.stdout == "denied\n"
    assert sandbox.exec("unshare -r id -u").exit_code != 0  # no user namespaces to regain capabilities
    assert sandbox.exec("command -v sudo").exit_code != 0
    # setuid binaries run without their owner's rights under no-new-privileges
    setuid = sandbox.exec(
        "find /usr/bin /bin -xdev -perm -4000 -type f 2>/dev/null | head -n 1"
    ).stdout.strip()
    if setuid:
        copied = sandbox.exec(f"cp {setuid} /work/probe && chmod u+s /work/probe && stat -c %u /work/probe")
        assert copied.stdout.strip() == "1000"  # a copy is ours, not root's
    assert_healthy(pool, sandbox)


def test_writes_outside_the_workdir_fail(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    for path in ("/etc/owned", "/usr/bin/owned", "/owned", "/var/tmp/owned", "/root/owned"):
        result = sandbox.exec(f"echo x > {path}")
        assert result.exit_code != 0, path
    assert sandbox.exec("echo x > /work/ok && echo x > /tmp/ok").exit_code == 0
    noexec = sandbox.exec(
        "printf '#!/bin/sh\\necho RAN\\n' > /tmp/run.sh && chmod +x /tmp/run.sh && /tmp/run.sh"
    )
    assert noexec.exit_code != 0 and "RAN" not in noexec.stdout  # /tmp is mounted noexec
    assert_healthy(pool, sandbox)


def test_no_host_secrets_in_the_environment(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cr3t-value")
    with DockerSandbox(SandboxConfig()) as fresh:  # started after the secret is set
        everything = fresh.exec("env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'").stdout
    assert "s3cr3t-value" not in everything and "AGENTRL_TEST_SECRET" not in everything
    for name in ("DOCKER_HOST", "HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert name not in everything
    assert_healthy(pool)


def test_no_ports_are_published(pool: SandboxPool, sandbox: DockerSandbox) -> None:
    inspect = docker.from_env().api.inspect_container(sandbox.container_id)
    assert not inspect["HostConfig"]["PortBindings"] and not inspect["NetworkSettings"]["Ports"]
    assert_healthy(pool, sandbox)


def _host_available_memory() -> int:
    with open("/proc/meminfo") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return int(fields["MemAvailable"].split()[0]) * 1024


def _assert_nothing_leaked() -> None:
    """After the pool closed, none of its containers is left (removal may lag a loaded engine: up to 20 s)."""
    client = docker.from_env()
    mine = {**LABELS, OWNER_LABEL: owner()}
    for _ in range(200):
        if not labelled_containers(mine, client):
            return
        time.sleep(0.1)
    leaked = len(labelled_containers(mine, client))
    reap(mine, client)
    assert leaked == 0, f"{leaked} sandbox containers leaked"
