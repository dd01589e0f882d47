"""Resource and isolation limits of one sandbox container, as a typed config.

What this is: the single place where every sandbox default lives (image, CPU, memory, pids, tmpfs size,
per-command time, output and file-read caps, network, runtime, user, container TTL, exec-channel
transport). What this is not:
the code that enforces them (`agentrl/sandbox/docker.py`) or a per-task override mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.errors import ConfigError

CHANNEL_TRANSPORTS = ("auto", "socket", "attach")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one sandbox container; the defaults suit a small Python tool call."""

    image: str = "agentrl/sandbox-python:latest"
    cpus: float = 1.0  # CPU quota in cores (nano_cpus)
    memory: str = "256m"  # memory limit; swap is set to the same value, so no swap at all
    pids: int = 64  # max processes/threads in the container; contains fork bombs
    tmpfs_size: str = "64m"  # size of each writable tmpfs (/tmp and the workdir)
    command_timeout_s: float = 10.0  # per-exec wall-clock limit, enforced inside the container
    episode_budget_s: float | None = None  # total exec time from acquire/start; None: only the TTL bounds it
    output_limit_bytes: int = 8192  # per stream; head and tail are kept
    read_limit_bytes: int = 65536  # read_file returns at most this many bytes (the head, with a marker)
    network: str = "none"  # docker network mode; "none" leaves only the loopback interface
    runtime: str | None = None  # e.g. "runsc" for gVisor; None is the engine default (runc)
    user: str = "1000:1000"  # uid:gid of every process in the container; never root
    workdir: str = "/work"
    ttl_s: int = 3600  # the container's keep-alive process exits after this, so leaks end on their own
    start_timeout_s: float = 30.0  # how long to wait for the exec channel's server to say hello
    # exec-channel transport (agentrl/sandbox/channel.py): "socket" (a unix socket bind-mounted from this
    # host; needs a local engine and runc), "attach" (through the engine; works anywhere), or "auto":
    # socket where possible, else attach (a failed socket connect falls back to attach with a warning)
    channel: str = "auto"

    def __post_init__(self) -> None:
        if self.channel not in CHANNEL_TRANSPORTS:
            raise ConfigError(
                f"sandbox channel must be one of {', '.join(CHANNEL_TRANSPORTS)}, got {self.channel!r}"
            )
