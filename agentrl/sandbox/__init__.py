"""Sandboxes: where agents' code runs. What this is: the per-episode Docker backend (`docker.py`), its
limits (`limits.py`) and result types (`base.py`); `docker.py` lists what is and is not protected.
What this is not (yet): a warm pool or a long-lived in-container exec channel.
"""

from agentrl.sandbox.base import ExecLogEntry, ExecResult, truncate_output
from agentrl.sandbox.docker import DockerSandbox, reap
from agentrl.sandbox.limits import SandboxConfig

__all__ = ["DockerSandbox", "ExecLogEntry", "ExecResult", "SandboxConfig", "reap", "truncate_output"]
