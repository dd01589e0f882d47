"""Settings of the env service: where it listens, how many sessions it holds, how long idle ones live.

What this is: one frozen dataclass; every default lives here. What this is not: the run config of a
training job (that is `agentrl/config.py`); the service knows nothing about training.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServiceSettings:
    host: str = "127.0.0.1"
    """Interface to bind; loopback only until the service has auth."""
    port: int = 8765
    max_sessions: int = 256
    """Live sessions beyond this get 429 with Retry-After."""
    idle_timeout_s: float = 600.0
    """A session untouched this long is closed by the reaper."""
    reap_interval_s: float = 10.0
    """How often the reaper looks for idle sessions."""
    retry_after_s: int = 5
    """Retry-After sent with 429 when the service is full."""
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per env id, constructor kwargs passed to `make`."""
    preload: tuple[str, ...] = ()
    """Modules imported at startup so that the envs they register can be served (e.g. test envs)."""
