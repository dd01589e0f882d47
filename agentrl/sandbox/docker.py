"""A hardened Docker sandbox: one container, commands run through a persistent in-container exec channel.

What it protects against (docs/sandbox.md items in brackets):
- privilege escalation: non-root user 1000 [1], every capability dropped [2], no-new-privileges and
  Docker's default seccomp profile, never privileged [3]; the Docker socket is never mounted [4];
- writing outside scratch space: read-only root filesystem, sized tmpfs for /tmp and the workdir [5, 7];
- resource exhaustion: CPU quota, memory limit with swap equal to it, a pids limit, so fork and memory
  bombs end inside the container [6]; runaway commands: a per-command wall clock enforced inside the
  container by the channel server, which SIGKILLs the command's process group and session [8]; a leaked
  container: its keep-alive process exits after `ttl_s` [8];
- flooding the host with output: each stream keeps a bounded head and tail while it arrives, and file reads
  are capped [9];
- network access: `network_mode="none"`, only loopback inside [10]; no ports are published [11];
- leaking host secrets: no environment variables are forwarded [12];
- orphans: every container carries `agentrl.service` / `agentrl.session` / `agentrl.owner` labels; `reap`
  removes by label and `reap_orphans` removes containers whose owner is gone: a process, or the life of
  the container it ran in, that a restart cannot impersonate (`agentrl/sandbox/owner.py`) [14].
Every exec is logged at DEBUG and kept in `sandbox.exec_log` [15]; `SandboxConfig.runtime="runsc"` switches
to gVisor where installed [16].

Commands go through `ExecChannel` (`channel.py`): one `docker exec` per container at start, then a socket
round trip per command instead of a fresh `docker exec` (costs: docs/sandbox.md). With a local engine the
round trip skips the engine too: the only bind mount a sandbox ever gets is its own read-only rendezvous
directory, whose unix socket is unlinked as soon as the channel's server has connected with its one-time
token (`SandboxConfig.channel`).

Time [8] has three bounds: per command, per episode (`episode_budget_s`, off by default: exec time since the
sandbox was started or handed out by the pool) and the container TTL.

What it does not do: no grading-integrity support [13] (that is the env's job). A process that starts its
own session (`setsid`) survives a command timeout until `close()`; a command that kills the channel server
(it runs as the same user, e.g. `kill -9 -1`) ends the sandbox with `SandboxLost`. `fork()` copies the
workdir only (not /tmp, not running processes; `workdir_stream.py` says what of it). The kernel is shared with
the host: runc is a container, not a VM; the process holding the Docker socket is root-equivalent on the host.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import shlex
import time
import uuid
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors

from agentrl.errors import SandboxFileError, SandboxLost, SandboxUnavailable
from agentrl.sandbox.base import ExecLogEntry, ExecResult, StartClose, truncation_marker
from agentrl.sandbox.channel import (
    ExecChannel,
    Rendezvous,
    capture_from_wire,
    reap_rendezvous_dirs,
    remember_socket_failure,
    socket_transport_possible,
)
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.owner import (
    OWNER_LABEL,
    ContainerLife,
    Orphan,
    identify,
    orphans,
    owner_label,
    process_start,
    this_process,
)

logger = logging.getLogger(__name__)

SERVICE_LABEL = "agentrl.service"
SESSION_LABEL = "agentrl.session"
DEFAULT_SERVICE = "agentrl-sandbox"
HOST_GRACE_S = 10.0  # the host stops waiting this long after the in-container timeout should have fired
FILE_OP_TIMEOUT_S = 30.0  # write_file / read_file / fork archive round trips
SETUP_HINT = "run `make setup` (it starts the Docker engine and builds the sandbox images)"


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or `SandboxUnavailable` saying how to get one."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        raise SandboxUnavailable(f"the Docker engine is not reachable ({error}); {SETUP_HINT}") from error
    return client


def container_options(
    config: SandboxConfig, labels: Mapping[str, str], rendezvous: Rendezvous | None = None
) -> dict[str, Any]:
    """The hardened `containers.create` keyword arguments for `config` (plus the read-only bind mount of
    the exec channel's rendezvous directory, if any); pure."""
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
    if rendezvous is not None:
        options["mounts"] = [rendezvous.mount()]
    return options


def channel_rendezvous(config: SandboxConfig) -> Rendezvous | None:
    """A rendezvous for the `socket` transport when the config asks for it and this host allows it; None
    means `attach`. `SandboxUnavailable` if the config demands `socket` where it cannot work."""
    if config.channel == "attach":
        return None
    reason = socket_transport_possible(config.runtime)
    if reason is None:
        return Rendezvous()
    if config.channel == "socket":
        raise SandboxUnavailable(
            f"sandbox channel 'socket' cannot work here: {reason}; use 'auto' or 'attach'"
        )
    return None


class DockerSandbox(StartClose):
    """One hardened container. Use as `with DockerSandbox(config, labels) as sandbox:` (or `async with`)."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        labels: Mapping[str, str] | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.config = config or SandboxConfig()
        self.labels = sandbox_labels(labels, client)
        self.exec_log: list[ExecLogEntry] = []
        self.started_at = 0.0
        self._client = client
        self._container: Any = None
        self._channel: ExecChannel | None = None
        self._rendezvous: Rendezvous | None = None

    @property
    def container_id(self) -> str:
        if self._container is None:
            raise SandboxLost("the sandbox is not started; call start() or use it as a context manager")
        return str(self._container.id)

    def start(self) -> None:
        """Create and start the container and its exec channel (idempotent)."""
        if self._container is not None:
            return
        self._client = self._client or docker_client()
        self._rendezvous = channel_rendezvous(self.config)
        try:
            self._container = self._create_container()
        except docker.errors.ImageNotFound as error:
            self.close()
            raise SandboxUnavailable(
                f"sandbox image {self.config.image!r} is missing; {SETUP_HINT}"
            ) from error
        except docker.errors.APIError as error:
            self.close()
            raise SandboxUnavailable(
                f"could not start a sandbox container ({error}); {SETUP_HINT}"
            ) from error
        try:
            self._channel = ExecChannel(
                self._client.api,
                self.container_id,
                self.config.user,
                self.config.workdir,
                self.config.start_timeout_s,
                self._rendezvous,
            )
            self._check_transport(self._channel)
        except BaseException:  # a container without a working channel is useless: never leave it behind
            self.close()
            raise
        self.started_at = time.monotonic()

    def _create_container(self) -> Any:
        """Run the container; in `auto` mode a bind mount the engine refuses (it does not share our
        filesystem) means `attach` for this and every later sandbox of this process."""
        assert self._client is not None
        try:
            return self._client.containers.run(
                self.config.image, **container_options(self.config, self.labels, self._rendezvous)
            )
        except docker.errors.APIError as error:
            if self._rendezvous is None or self.config.channel != "auto" or "bind" not in str(error):
                raise
            remember_socket_failure(f"the engine refused the rendezvous bind mount ({error})")
            logger.warning("sandbox channels use attach: the engine cannot bind-mount our paths (%s)", error)
            self._rendezvous.close()
            self._rendezvous = None
            return self._client.containers.run(
                self.config.image, **container_options(self.config, self.labels)
            )

    @property
    def transport(self) -> str:
        """The exec channel's transport: "socket" or "attach" (see `SandboxConfig.channel`)."""
        return self._live_channel().transport

    def _check_transport(self, channel: ExecChannel) -> None:
        """A socket the server could not reach: an error when the config demands it, else a warning."""
        if self._rendezvous is None or channel.transport == "socket":
            return
        reason = f"the server could not connect to the rendezvous socket ({channel.socket_error})"
        if self.config.channel == "socket":
            raise SandboxUnavailable(f"sandbox channel 'socket' failed: {reason}; use 'auto' or 'attach'")
        remember_socket_failure(reason)
        logger.warning("sandbox %s uses the slower attach channel: %s", self.container_id[:12], reason)

    def exec(
        self,
        cmd: list[str] | str,
        timeout: float | None = None,
        stdin: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run `cmd` (argv, or a string for `sh -c`) as the sandbox user, in `cwd` (default: the workdir),
        with `env` added to the image's environment; never raises for the command's own failures (nonzero
        exit, timeout, OOM): those are data on the result. `SandboxLost` if the container is gone."""
        timeout_s = self.config.command_timeout_s if timeout is None else timeout
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        remaining = self.budget_left()
        if remaining is not None and remaining <= 0:
            result = ExecResult(137, "", "the episode's time budget is used up\n", True, False, 0.0, False)
            self._log(argv, result, 0)
            return result
        timeout_s = timeout_s if remaining is None else min(timeout_s, remaining)
        limit = self.config.output_limit_bytes
        request = {
            "op": "exec",
            "argv": argv,
            "timeout": timeout_s,
            "cwd": cwd,
            "env": dict(env or {}),
            "stdin": None if stdin is None else base64.b64encode(stdin.encode("utf-8")).decode(),
            "limit": limit,
        }
        reply = self._request(request, timeout_s + HOST_GRACE_S)
        (out_text, out_dropped) = capture_from_wire(reply["out"], limit).result()
        (err_text, err_dropped) = capture_from_wire(reply["err"], limit).result()
        result = ExecResult(
            exit_code=int(reply["exit"]),
            stdout=out_text,
            stderr=err_text,
            timed_out=bool(reply["timed_out"]),
            oom=bool(reply["oom"]),
            duration_s=float(reply["duration"]),
            truncated=bool(out_dropped or err_dropped),
        )
        self._log(argv, result, out_dropped + err_dropped)
        return result

    async def aexec(
        self,
        cmd: list[str] | str,
        timeout: float | None = None,
        stdin: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """`exec` from asyncio code, on a worker thread (the call blocks on the channel's socket)."""
        return await asyncio.to_thread(self.exec, cmd, timeout, stdin, cwd, env)

    def write_file(self, path: str, content: str | bytes) -> None:
        """Write `content` to `path` (the workdir or /tmp; the root is read-only); `SandboxFileError` if the
        write fails (e.g. a full tmpfs). Envs whose agent can fill the disk should write and run in one
        `exec` instead, so that failure stays the agent's (see the calc env)."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        reply = self._request({"op": "write", "path": path, "data": base64.b64encode(data).decode()})
        if not reply["ok"]:
            raise SandboxFileError(f"could not write {path!r} in the sandbox: {reply['error']}")

    def read_file(self, path: str) -> str:
        """The text of `path`; beyond `read_limit_bytes` only the head is kept, with a marker."""
        limit = self.config.read_limit_bytes
        reply = self._request({"op": "read", "path": path, "limit": limit})
        if not reply["ok"]:
            raise SandboxFileError(f"could not read {path!r} in the sandbox: {reply['error']}")
        text = base64.b64decode(reply["data"]).decode("utf-8", "replace")
        dropped = int(reply["size"]) - limit
        return text + truncation_marker(dropped) if dropped > 0 else text

    def fork(self, target: DockerSandbox | None = None) -> DockerSandbox:
        """A sandbox whose workdir equals this one's: `target` (e.g. fresh from a pool; whatever its workdir
        held is removed first), else a new container with the same config and labels. Copies the workdir's
        files only, as one stream over both channels (`agentrl/sandbox/workdir_stream.py`): contents,
        permission bits, mtimes, symlinks, hard links, FIFOs and empty directories."""
        status, stream = self._live_channel().download(
            {"op": "snapshot", "path": self.config.workdir}, FILE_OP_TIMEOUT_S
        )
        if not status["ok"]:
            raise SandboxFileError(f"could not read the workdir to fork it: {status['error']}")
        child = target or DockerSandbox(self.config, _inherited(self.labels), self._client)
        child.start()
        reply = child._live_channel().upload(
            {"op": "restore", "path": child.config.workdir}, stream, FILE_OP_TIMEOUT_S
        )
        if not reply["ok"]:
            child.close()
            raise SandboxFileError(f"could not restore the workdir in the fork: {reply['error']}")
        return child

    def budget_left(self) -> float | None:
        """Seconds left of `episode_budget_s` since `start()` (or `restart_budget()`), None if unlimited."""
        budget = self.config.episode_budget_s
        return None if budget is None else budget - (time.monotonic() - self.started_at)

    def restart_budget(self) -> None:
        """Start the episode clock now (the pool calls this when it hands a warm sandbox out)."""
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        """Whether the channel answers a ping within a second (the pool's health check)."""
        try:
            return bool(self._request({"op": "ping"}, 1.0)["ok"])
        except SandboxLost:
            return False

    def close(self) -> None:
        """Remove the container, whatever state it is in (idempotent)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        rendezvous, self._rendezvous = self._rendezvous, None
        if rendezvous is not None:
            rendezvous.close()
        container, self._container = self._container, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            logger.warning("could not remove sandbox %s (%s); `reap` will", container.id[:12], error)

    def _request(self, message: dict[str, Any], timeout_s: float = FILE_OP_TIMEOUT_S) -> dict[str, Any]:
        return self._live_channel().request(message, timeout_s)

    def _live_channel(self) -> ExecChannel:
        if self._channel is None:
            raise SandboxLost("the sandbox is not started or already closed; start a new one")
        return self._channel

    def _log(self, command: list[str], result: ExecResult, dropped: int) -> None:
        entry = ExecLogEntry(
            tuple(command), result.exit_code, result.duration_s, dropped, result.timed_out, result.oom
        )
        self.exec_log.append(entry)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "sandbox %s exec %s -> exit %d in %.4fs (truncated %d bytes%s%s)",
                self.labels[SESSION_LABEL][:12],
                shlex.join(command),
                result.exit_code,
                result.duration_s,
                dropped,
                ", timed out" if result.timed_out else "",
                ", oom" if result.oom else "",
            )


def sandbox_labels(
    extra: Mapping[str, str] | None = None, client: docker.DockerClient | None = None
) -> dict[str, str]:
    """The labels of a new sandbox: service, a fresh session, this process as owner, then `extra`."""
    return {
        SERVICE_LABEL: DEFAULT_SERVICE,
        SESSION_LABEL: uuid.uuid4().hex,
        OWNER_LABEL: owner(client),
        **(extra or {}),
    }


def owner(client: docker.DockerClient | None = None) -> str:
    """The `agentrl.owner` value of this process: every container it starts carries it (see
    `agentrl.sandbox.owner`; the engine is asked once which container, if any, we run in)."""
    try:
        return owner_label(identify(functools.partial(_container_life_of, client)))
    except SandboxUnavailable:  # no engine, so no sandbox to label yet: asked again next time
        return owner_label(this_process())


def container_life(client: docker.DockerClient, container_id: str) -> ContainerLife | None:
    """Whether container `container_id` runs and since when; None if the engine has no such container."""
    try:
        state = client.api.inspect_container(container_id).get("State") or {}
    except docker.errors.NotFound:
        return None
    return ContainerLife(bool(state.get("Running")), str(state.get("StartedAt", "")))


def _container_life_of(client: docker.DockerClient | None, container_id: str) -> ContainerLife | None:
    return container_life(client or docker_client(), container_id)


def _inherited(labels: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in labels.items() if key != SESSION_LABEL}


def labelled_containers(
    labels_filter: Mapping[str, str], client: docker.DockerClient | None = None
) -> list[dict[str, Any]]:
    """Every container (running or not) carrying all of `labels_filter` (a value of "" matches any value),
    as the engine's list entries (`Id`, `Labels`, `State`, `Created`, ...). One API call and no inspect per
    container, so containers removed meanwhile cannot make it fail."""
    client = client or docker_client()
    # an empty value selects every container that has the label at all
    selector = [f"{key}={value}" if value else key for key, value in labels_filter.items()]
    return list(client.api.containers(all=True, filters={"label": selector}))


def reap(labels_filter: Mapping[str, str], client: docker.DockerClient | None = None) -> int:
    """Force-remove every container carrying all of `labels_filter`; returns how many were removed."""
    if not labels_filter:
        raise ValueError("reap needs at least one label, e.g. {'agentrl.service': 'agentrl-sandbox'}")
    client = client or docker_client()
    return sum(_remove(client, entry["Id"]) for entry in labelled_containers(labels_filter, client))


def remove_orphans(
    service: str | None = DEFAULT_SERVICE, client: docker.DockerClient | None = None, grace_s: float = 0.0
) -> list[Orphan]:
    """Remove `service` containers (any service's if None) whose owner is gone (`agentrl.sandbox.owner.
    owner_verdict`: its process died or was replaced, its container stopped or restarted, its host
    rebooted) and that are at least `grace_s` old; owners out of sight (another host, another pid
    namespace) are left alone. Logs each removal with its reason; returns the removed ones."""
    client = client or docker_client()
    entries = labelled_containers({SERVICE_LABEL: service or ""}, client)
    observer = identify(functools.partial(container_life, client))
    lives = functools.lru_cache(maxsize=None)(functools.partial(container_life, client))  # one per owner
    found = orphans(entries, observer, lives, process_start, time.time(), grace_s)
    removed = [orphan for orphan in found if _remove(client, orphan.container_id)]
    for orphan in removed:
        logger.info(
            "reaped orphaned sandbox %s: %s (owner %s)", orphan.container_id[:12], orphan.reason, orphan.owner
        )
    reap_rendezvous_dirs()
    return removed


def reap_orphans(
    service: str | None = DEFAULT_SERVICE, client: docker.DockerClient | None = None, grace_s: float = 0.0
) -> int:
    """`remove_orphans`, counted."""
    return len(remove_orphans(service, client, grace_s))


def _remove(client: docker.DockerClient, container_id: str) -> int:
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        return 0
    except docker.errors.APIError as error:
        if error.response is not None and error.response.status_code == 409:  # removal already in progress
            return 0
        raise
    return 1
