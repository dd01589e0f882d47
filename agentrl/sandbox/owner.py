"""Who owns a sandbox container, and whether that owner is still alive: the `agentrl.owner` label.

What this is: `Owner`, the identity of the process that started a sandbox, written into the container's
`agentrl.owner` label (`owner_label`) and read back (`parse_owner`); `owner_verdict`, the pure decision
whether that owner is alive, gone, or out of sight, from the observer's own identity and two facts it looks
up (does a container run since a given start, does a pid run since a given start time). The reaper in
`agentrl/sandbox/docker.py` (`find_orphans`) removes the containers of owners that are gone.

An identity a restart cannot reuse: a pid alone is reused (a service in a container is always PID 1, a
supervisor or a reboot gives the same pid again), so a process is named by host, boot id, pid namespace,
pid and its start time (clock ticks since boot, field 22 of /proc/<pid>/stat). A process that runs inside
a Docker container also names that container and its `State.StartedAt`, which changes with every
`docker start`/restart: any process with the same engine can then decide, by asking the engine, whether
the owner's container still lives the life it started the sandbox in.

Label forms (hostnames and the other fields carry no ':'; the container's start time, last, may):
    proc:<host>:<boot id>:<pid namespace>:<pid>:<start ticks>
    container:<host>:<boot id>:<pid namespace>:<pid>:<start ticks>:<container id>:<StartedAt>
    <host>:<pid>                                            the form before these; read as before

What this is not: a heartbeat. An owner on another host that shares the engine without a container of
its own, or one in a pid namespace the observer cannot see, is out of sight and never reaped here (its
containers' keep-alive still ends after `SandboxConfig.ttl_s`); an owner process that dies inside a
container that keeps running is seen as alive by other containers until that container stops or restarts
(a process in the same container sees it die).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.sandbox.channel import pid_exists

OWNER_LABEL = "agentrl.owner"  # on every sandbox: `owner_label` of the process that started it
PROCESS_KIND = "proc"
CONTAINER_KIND = "container"


@dataclass(frozen=True)
class Owner:
    """The identity of the process that started a sandbox; empty strings are facts this host lacks."""

    host: str
    pid: int
    start_ticks: str = ""  # the process's start time, clock ticks since boot
    boot_id: str = ""  # /proc/sys/kernel/random/boot_id: changes with every boot
    pid_namespace: str = ""  # inode of /proc/self/ns/pid: pids are only comparable within one
    container_id: str = ""  # the Docker container the process runs in, if any
    container_started_at: str = ""  # that container's State.StartedAt when the process started
    legacy: bool = False  # read from the old `host:pid` form: only host and pid are known


@dataclass(frozen=True)
class ContainerLife:
    """What the engine says about an owner's container: running or not, and since when."""

    running: bool
    started_at: str


@dataclass(frozen=True)
class Verdict:
    """`alive` is True (alive), False (gone: its sandboxes are orphans) or None (out of sight)."""

    alive: bool | None
    reason: str  # a short code: the metric's label and the start of the log line


@dataclass(frozen=True)
class Orphan:
    """A sandbox container whose owner is gone, with the owner label and the verdict's reason."""

    container_id: str
    owner: str
    reason: str


def owner_label(owner: Owner) -> str:
    """The `agentrl.owner` label value of `owner`; `parse_owner` reads it back."""
    process = f"{owner.host}:{owner.boot_id}:{owner.pid_namespace}:{owner.pid}:{owner.start_ticks}"
    if owner.container_id:
        return f"{CONTAINER_KIND}:{process}:{owner.container_id}:{owner.container_started_at}"
    return f"{PROCESS_KIND}:{process}"


def parse_owner(label: str) -> Owner | None:
    """The owner an `agentrl.owner` value names, in any form this module ever wrote; None if unreadable."""
    kind, _, rest = label.partition(":")
    if kind in (PROCESS_KIND, CONTAINER_KIND):
        fields = rest.split(":", 6)
        wanted = 5 if kind == PROCESS_KIND else 7
        if len(fields) == wanted and fields[3].isdigit():
            host, boot_id, pid_namespace, pid, start_ticks = fields[:5]
            container_id, started_at = fields[5:] if kind == CONTAINER_KIND else ("", "")
            return Owner(host, int(pid), start_ticks, boot_id, pid_namespace, container_id, started_at)
    host, _, pid = label.partition(":")
    if host and pid.isdigit():
        return Owner(host, int(pid), legacy=True)
    return None


def owner_verdict(
    owner: Owner,
    observer: Owner,
    container_life: Callable[[str], ContainerLife | None],
    process_start: Callable[[int], str | None],
) -> Verdict:
    """Whether `owner` is alive, as `observer` (this process) can tell; pure but for the two look-ups:
    `container_life(id)` (None: no such container on the engine) and `process_start(pid)` (None: no such
    process in the observer's pid namespace; "" when it exists but its start time cannot be read)."""
    if owner.legacy:  # as before: the owner pid on this host exists or not
        if owner.host != observer.host:
            return Verdict(None, "other_host")
        if process_start(owner.pid) is None:
            return Verdict(False, "legacy_pid_gone")
        return Verdict(True, "legacy_pid_exists")
    if owner.container_id:
        life = container_life(owner.container_id)
        if life is None:
            return Verdict(False, "container_gone")
        if not life.running:
            return Verdict(False, "container_stopped")
        if life.started_at != owner.container_started_at:
            return Verdict(False, "container_restarted")
        if owner.container_id != observer.container_id:
            return Verdict(True, "container_running")
    return _process_verdict(owner, observer, process_start)


def _process_verdict(owner: Owner, observer: Owner, process_start: Callable[[int], str | None]) -> Verdict:
    """The verdict on the owner process itself, which only an observer on its host and boot and in its
    pid namespace can give."""
    if owner.host != observer.host:
        return Verdict(None, "other_host")
    if owner.boot_id and observer.boot_id and owner.boot_id != observer.boot_id:
        return Verdict(False, "host_rebooted")  # every process of an earlier boot is gone
    if not owner.pid_namespace or owner.pid_namespace != observer.pid_namespace:
        return Verdict(None, "other_pid_namespace")
    started = process_start(owner.pid)
    if started is None:
        return Verdict(False, "process_gone")
    if started and owner.start_ticks and started != owner.start_ticks:
        return Verdict(False, "pid_reused")  # a later process holds the pid (a restart as PID 1, say)
    return Verdict(True, "process_running")


def orphans(
    entries: Iterable[Mapping[str, Any]],
    observer: Owner,
    container_life: Callable[[str], ContainerLife | None],
    process_start: Callable[[int], str | None],
    now: float,
    grace_s: float,
) -> list[Orphan]:
    """The containers among `entries` (the engine's list entries: `Id`, `Labels`, `Created` in epoch
    seconds) whose owner is gone; a container younger than `grace_s`, or without a readable owner label,
    is never one. Pure but for the look-ups (see `owner_verdict`)."""
    found = []
    for entry in entries:
        label = (entry.get("Labels") or {}).get(OWNER_LABEL, "")
        owner = parse_owner(label)
        if owner is None or now - float(entry.get("Created", now)) < grace_s:
            continue
        verdict = owner_verdict(owner, observer, container_life, process_start)
        if verdict.alive is False:
            found.append(Orphan(str(entry["Id"]), label, verdict.reason))
    return found


# --- reading this host (the edges) ---------------------------------------------------------------------

_CONTAINER_IN_MOUNTS = re.compile(r"/containers/([0-9a-f]{64})/(?:hostname|hosts|resolv\.conf)\b")
_CONTAINER_IN_CGROUP = re.compile(r"(?:/docker/|docker-)([0-9a-f]{64})(?:\.scope)?\s*$", re.MULTILINE)


def container_id_in(mountinfo: str, cgroup: str) -> str:
    """The id of the Docker container whose files these are (/proc/self/mountinfo: the engine bind-mounts
    its per-container hostname file; /proc/self/cgroup under cgroup v1), "" if neither names one; pure."""
    found = _CONTAINER_IN_MOUNTS.search(mountinfo) or _CONTAINER_IN_CGROUP.search(cgroup)
    return found.group(1) if found else ""


def start_ticks_in(stat: str) -> str:
    """Field 22 (starttime) of a /proc/<pid>/stat line; the command name (field 2) may hold spaces and
    parentheses, so fields are counted after its last ')'; pure."""
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in our pid namespace; None if it does not exist, "" if it exists
    but /proc does not show it (another system, or /proc mounted with hidepid)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return start_ticks_in(stat.read())
    except OSError:
        return "" if pid_exists(pid) else None


def _read(path: str) -> str:
    try:
        with open(path) as source:
            return source.read()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    except OSError:
        return ""


def this_process(container_id: str = "", container_started_at: str = "") -> Owner:
    """This process as an owner (its container, if any, found by the caller: it needs the engine)."""
    pid = os.getpid()
    return Owner(
        host=socket.gethostname(),
        pid=pid,
        start_ticks=process_start(pid) or "",
        boot_id=_read("/proc/sys/kernel/random/boot_id").strip(),
        pid_namespace=_pid_namespace(),
        container_id=container_id,
        container_started_at=container_started_at,
    )


_identity: dict[int, Owner] = {}  # by pid: a forked child is another owner


def identify(container_life: Callable[[str], ContainerLife | None]) -> Owner:
    """This process as an owner, worked out once per process. `container_life` asks the engine about the
    container our mounts name (None: not one of that engine's, so we count as a plain process); if it
    raises (no engine yet) nothing is remembered and the error propagates."""
    pid = os.getpid()
    if pid not in _identity:
        container_id = own_container_id()
        life = container_life(container_id) if container_id else None
        _identity[pid] = this_process(container_id, life.started_at) if life else this_process()
    return _identity[pid]


def own_container_id() -> str:
    """The id of the Docker container this process runs in, as its own mounts tell, or ""."""
    return container_id_in(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))
