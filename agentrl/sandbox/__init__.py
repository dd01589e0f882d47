"""Sandboxes: where agents' code runs.

What this is: the `Sandbox` protocol and result types (`base.py`), their limits (`limits.py`), the hardened
Docker backend (`docker.py`, which lists what is and is not protected), the persistent in-container exec
channel it talks through (`channel.py` on the host, `channel_server.py` inside, which copies a workdir for
a fork with `workdir_stream.py`), and a warm pool with reset-by-discard and fork (`pool.py`). What this is
not: image building (`scripts/build_images.sh`, `agentrl sandbox build`) or grading (envs own that).
"""

from agentrl.errors import SandboxFileError
from agentrl.sandbox.base import ExecLogEntry, ExecResult, Sandbox, truncate_output
from agentrl.sandbox.docker import DockerSandbox, reap, reap_orphans
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import PoolConfig, SandboxPool

__all__ = [
    "DockerSandbox",
    "ExecLogEntry",
    "ExecResult",
    "PoolConfig",
    "Sandbox",
    "SandboxConfig",
    "SandboxFileError",
    "SandboxPool",
    "reap",
    "reap_orphans",
    "truncate_output",
]
