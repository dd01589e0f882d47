"""Settings of the env service: where it listens, who may call it, and its limits (sessions, body, time).

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
    """Interface to bind; anything but loopback requires `token`."""
    port: int = 8765
    max_sessions: int = 256
    """Live sessions beyond this get 429 with Retry-After (forks count like created sessions)."""
    max_forks: int = 16
    """Most copies one fork request may ask for (`POST /v1/sessions/{id}/fork` with `{"n": ...}`)."""
    idle_timeout_s: float = 600.0
    """A session untouched this long is closed by the reaper."""
    reap_interval_s: float = 10.0
    """How often the reaper looks for idle sessions."""
    retry_after_s: int = 5
    """Retry-After sent with 429 (service full) and 503 (sandbox failure)."""
    token: str | None = field(default=None, repr=False)
    """Bearer token every request but /healthz must carry; `python -m agentrl.service` reads it from the
    AGENTRL_SERVICE_TOKEN environment variable (never from the command line, where `ps` would show it)."""
    max_body_bytes: int = 1_048_576
    """Request bodies larger than this get 413."""
    step_timeout_s: float = 90.0
    """An env step running longer gets 504 and its session is closed once the step returns; below the
    client's own timeout (`agentrl.client.ClientConfig.timeout_s`) so the client hears why."""
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per env id, constructor kwargs passed to `make`."""
    preload: tuple[str, ...] = ()
    """Modules imported at startup so that the envs they register can be served (e.g. test envs)."""
    orphan_grace_s: float = 5.0
    """Sandboxes younger than this are never taken for orphans by the reaper (the owner of one being
    created is surely alive); see `orphan_reap_interval_s`."""
    orphan_reap_interval_s: float = 30.0
    """The orphan reaper runs at start-up, then this often, then once at shutdown: it removes every sandbox
    on the engine whose owner is gone (`agentrl.sandbox.docker.remove_orphans`), whoever started it; 0
    turns it off."""
    shutdown_timeout_s: float = 5.0
    """On SIGTERM, requests still running after this are cancelled, and sessions still closing after as
    long again are abandoned; then `python -m agentrl.service` force-removes every sandbox it owns. Keep
    the stop grace period of the process manager above twice this plus a few seconds."""
    ws_ping_interval_s: float = 30.0
    """How often the service pings each WebSocket client."""
    ws_ping_timeout_s: float = 900.0
    """How long a pong may take before the socket (and every session on it) is dropped: long, because a
    training process may hold its event loop for minutes (a model update) and a closed socket loses its
    episodes; a dead peer is noticed sooner by TCP itself."""
