"""A thin, per-episode Docker sandbox: one hardened container, commands run in it through `docker exec`.

What it protects against (SANDBOX.md items in brackets):
- privilege escalation: non-root user 1000 [1], every capability dropped [2], no-new-privileges and
  Docker's default seccomp profile, never privileged [3]; the Docker socket is never mounted [4];
- writing outside scratch space: read-only root filesystem, sized tmpfs for /tmp and the workdir [5];
- resource exhaustion: CPU quota, memory limit with swap equal to it, a pids limit, so fork and memory
  bombs end inside the container [6]; runaway commands: a per-command wall clock enforced inside the
  container with `timeout -s KILL`, which kills the command's whole process group [8]; a leaked container:
  its keep-alive process exits after `ttl_s` [8];
- flooding the host with output: each stream keeps a bounded head and tail while it arrives [9];
- network access: `network_mode="none"`, only loopback inside [10]; no ports are published [11];
- leaking host secrets: no environment variables are forwarded [12];
- orphans: every container carries `agentrl.service` / `agentrl.session` labels and `reap` removes them [14].
Every exec is logged at DEBUG and kept in `sandbox.exec_log` [15]; `SandboxConfig.runtime="runsc"` switches
to gVisor where installed [16].

What it does not do (yet): no warm pool (each sandbox pays ~275 ms create+start), no long-lived exec
channel (each command pays ~71 ms of `docker exec`), no per-episode time budget beyond the container TTL,
no disk quota beyond the tmpfs sizes [7], no grading-integrity support [13]. A process that leaves its
process group (`setsid`) survives a command timeout until `close()`. OOM is inferred from exit code 137
without a timeout, which is what the kernel's OOM killer produces but could also be a self-inflicted KILL.
The kernel is shared with the host: runc is a container, not a VM.
"""

from __future__ import annotations

import logging
import shlex
import socket
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import docker
import docker.errors
from docker.utils.socket import frames_iter

from agentrl.errors import SandboxLost, SandboxUnavailable
from agentrl.sandbox.base import ExecLogEntry, ExecResult, OutputCapture
from agentrl.sandbox.limits import SandboxConfig

logger = logging.getLogger(__name__)

SERVICE_LABEL = "agentrl.service"
SESSION_LABEL = "agentrl.session"
DEFAULT_SERVICE = "agentrl-sandbox"
TIMEOUT_EXIT_CODES = (124, 137)  # `timeout` exits 124 after TERM; with KILL it dies with its child: 128+9
KILLED_EXIT_CODE = 137
HOST_GRACE_S = 10.0  # the host stops waiting this long after the in-container timeout should have fired
SETUP_HINT = "run `make setup` (it starts the Docker engine and builds the sandbox images)"


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or `SandboxUnavailable` saying how to get one."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        raise SandboxUnavailable(f"the Docker engine is not reachable ({error}); {SETUP_HINT}") from error
    return client


def container_options(config: SandboxConfig, labels: Mapping[str, str]) -> dict[str, Any]:
    """The hardened `containers.create` keyword arguments for `config`; pure."""
    tmpfs_options = f"rw,nosuid,nodev,size={config.tmpfs_size}"
    uid, _, gid = config.user.partition(":")
    options: dict[str, Any] = {
        "command": ["sleep", str(config.ttl_s)],
        "user": config.user,
        "working_dir": config.workdir,
        "labels": dict(labels),
        "environment": {},
        "read_only": True,
        "tmpfs": {
            "/tmp": f"{tmpfs_options},noexec,mode=1777",
            config.workdir: f"{tmpfs_options},exec,mode=0755,uid={uid},gid={gid or uid}",
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "mem_limit": config.memory,
        "memswap_limit": config.memory,
        "pids_limit": config.pids,
        "nano_cpus": int(config.cpus * 1e9),
        "network_mode": config.network,
        # a real PID 1 reaps the zombies a killed command leaves; `sleep` would not, and they count as pids
        "init": True,
        "detach": True,
    }
    if config.runtime is not None:
        options["runtime"] = config.runtime
    return options


def wrap_command(cmd: list[str] | str, timeout_s: float) -> list[str]:
    """`cmd` (argv, or a shell string) under coreutils `timeout`, so the clock runs inside the container."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    return ["timeout", "-s", "KILL", f"{timeout_s:g}s", *argv]


def classify_exit(exit_code: int, duration_s: float, timeout_s: float) -> tuple[bool, bool]:
    """(timed_out, oom) from the exit code and the wall time; pure (see the module docstring)."""
    timed_out = exit_code in TIMEOUT_EXIT_CODES and duration_s >= timeout_s
    oom = exit_code == KILLED_EXIT_CODE and not timed_out
    return timed_out, oom


class DockerSandbox:
    """One hardened container for one episode. Use as `with DockerSandbox(config, labels) as sandbox:`."""

    def __init__(self, config: SandboxConfig | None = None, labels: Mapping[str, str] | None = None) -> None:
        self.config = config or SandboxConfig()
        self.labels = {SERVICE_LABEL: DEFAULT_SERVICE, SESSION_LABEL: uuid.uuid4().hex, **(labels or {})}
        self.exec_log: list[ExecLogEntry] = []
        self._client: docker.DockerClient | None = None
        self._container: Any = None

    def __enter__(self) -> DockerSandbox:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def container_id(self) -> str:
        if self._container is None:
            raise SandboxLost("the sandbox is not started; call start() or use it as a context manager")
        return str(self._container.id)

    def start(self) -> None:
        """Create and start the container (idempotent)."""
        if self._container is not None:
            return
        self._client = docker_client()
        try:
            self._container = self._client.containers.run(
                self.config.image, **container_options(self.config, self.labels)
            )
        except docker.errors.ImageNotFound as error:
            raise SandboxUnavailable(
                f"sandbox image {self.config.image!r} is missing; {SETUP_HINT}"
            ) from error
        except docker.errors.APIError as error:
            raise SandboxUnavailable(
                f"could not start a sandbox container ({error}); {SETUP_HINT}"
            ) from error

    def exec(
        self, cmd: list[str] | str, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run `cmd` (argv, or a string for `sh -c`) as the sandbox user in the workdir; never raises for
        the command's own failures (nonzero exit, timeout, OOM): those are data on the result."""
        timeout_s = self.config.command_timeout_s if timeout is None else timeout
        argv = wrap_command(cmd, timeout_s)
        started = time.monotonic()
        exit_code, stdout, stderr = self._run(argv, stdin, timeout_s + HOST_GRACE_S)
        duration_s = time.monotonic() - started
        timed_out, oom = classify_exit(exit_code, duration_s, timeout_s)
        (out_text, out_dropped), (err_text, err_dropped) = stdout.result(), stderr.result()
        self._log(argv[4:], exit_code, duration_s, out_dropped + err_dropped, timed_out, oom)
        return ExecResult(
            exit_code=exit_code,
            stdout=out_text,
            stderr=err_text,
            timed_out=timed_out,
            oom=oom,
            duration_s=duration_s,
            truncated=bool(out_dropped or err_dropped),
        )

    def write_file(self, path: str, content: str) -> None:
        """Write `content` to `path` inside the container (the workdir or /tmp; the root is read-only).

        Raises `SandboxLost` when the write fails (e.g. a full tmpfs). Envs whose agent can fill the disk
        should write and run in one `exec` instead, so that failure stays the agent's (see the calc env).
        """
        result = self.exec(["sh", "-c", 'cat > "$1"', "sh", path], stdin=content)
        if result.exit_code != 0:
            raise SandboxLost(f"could not write {path!r} in the sandbox: {result.stderr.strip()}")

    def close(self) -> None:
        """Remove the container, whatever state it is in (idempotent)."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            logger.warning("could not remove sandbox %s (%s); `reap` will", container.id[:12], error)

    def _run(
        self, argv: list[str], stdin: str | None, wait_s: float
    ) -> tuple[int, OutputCapture, OutputCapture]:
        api = self._api()
        try:
            exec_id = api.exec_create(
                self.container_id,
                argv,
                stdin=stdin is not None,
                user=self.config.user,
                workdir=self.config.workdir,
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
            stdout, stderr = self._pump(sock, stdin, wait_s)
            exit_code = _exit_code(api, exec_id)
        except docker.errors.NotFound as error:
            raise SandboxLost(f"the sandbox container vanished ({error}); start a new episode") from error
        except docker.errors.APIError as error:
            raise SandboxLost(
                f"the sandbox container is not usable ({error}); start a new episode"
            ) from error
        except (TimeoutError, OSError) as error:
            raise SandboxLost(
                f"lost the exec stream of {argv[4:]!r} ({error}); start a new episode"
            ) from error
        if exit_code is None:
            raise SandboxLost(f"the command {argv[4:]!r} did not finish; start a new episode")
        return int(exit_code), stdout, stderr

    def _pump(self, sock: Any, stdin: str | None, wait_s: float) -> tuple[OutputCapture, OutputCapture]:
        """Send stdin, then read the multiplexed stdout/stderr frames until the command ends."""
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(wait_s)
        limit = self.config.output_limit_bytes
        stdout, stderr = OutputCapture(limit), OutputCapture(limit)
        try:
            if stdin is not None:
                raw.sendall(stdin.encode("utf-8"))
                raw.shutdown(socket.SHUT_WR)
            for stream, chunk in frames_iter(sock, tty=False):
                (stderr if stream == 2 else stdout).feed(chunk)
        finally:
            sock.close()
        return stdout, stderr

    def _api(self) -> Any:
        if self._client is None:
            raise SandboxLost("the sandbox is not started; call start() or use it as a context manager")
        return self._client.api

    def _log(
        self, command: list[str], exit_code: int, duration_s: float, dropped: int, timed_out: bool, oom: bool
    ) -> None:
        entry = ExecLogEntry(tuple(command), exit_code, duration_s, dropped, timed_out, oom)
        self.exec_log.append(entry)
        logger.debug(
            "sandbox %s exec %s -> exit %d in %.3fs (truncated %d bytes%s%s)",
            self.labels[SESSION_LABEL][:12],
            shlex.join(command),
            exit_code,
            duration_s,
            dropped,
            ", timed out" if timed_out else "",
            ", oom" if oom else "",
        )


def _exit_code(api: Any, exec_id: str) -> int | None:
    """The exit code once the stream has closed; the engine may record it a moment after."""
    for _ in range(50):
        state = api.exec_inspect(exec_id)
        if not state["Running"] and state["ExitCode"] is not None:
            return int(state["ExitCode"])
        time.sleep(0.01)
    return None


def reap(labels_filter: Mapping[str, str], client: docker.DockerClient | None = None) -> int:
    """Force-remove every container carrying all of `labels_filter`; returns how many were removed."""
    if not labels_filter:
        raise ValueError("reap needs at least one label, e.g. {'agentrl.service': 'agentrl-sandbox'}")
    client = client or docker_client()
    selector = [f"{key}={value}" for key, value in labels_filter.items()]
    removed = 0
    for container in client.containers.list(all=True, filters={"label": selector}):
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass
    return removed
