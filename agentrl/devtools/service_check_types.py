"""What the parts of `agentrl envs check` (`agentrl/devtools/service_check.py`) pass each other: the check's
config, what one episode through the service showed, and one line of the report.

What this is: `CheckConfig` (how many episodes, how long, the warnings' thresholds), `EpisodeTrace` (filled
in while an episode plays, read by the findings) and `Finding` (a status, a topic, a message), plain data.

What this is not: the report they end up in (`agentrl/devtools/service_check_report.py`), or any of the
checks (the episodes through the service: `service_check_play.py`; the findings read from the traces:
`service_check_findings.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "FAIL"]


@dataclass(frozen=True)
class CheckConfig:
    """How many episodes, how long, and the thresholds of the warnings.

    episodes:      episodes played through the service, in groups of `group_size` on one task and seed
    max_turns:     turns before an episode is cut (the runner's `rollout.max_turns`)
    slow_step_ms:  a non-blocking env (`blocking = False`) whose step p99 is above this gets a warning: its
                   steps run on the service's event loop and stall every other session
    large_observation_chars: an observation longer than this gets a warning (it fills the context)
    teardown_s:    how long to wait for the sandboxes to be removed after the service stopped
    """

    episodes: int = 8
    group_size: int = 2
    max_turns: int = 10
    seed: int = 0
    slow_step_ms: float = 50.0
    large_observation_chars: int = 8000
    teardown_s: float = 20.0

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.group_size < 1 or self.max_turns < 1:
            raise ValueError("episodes, group_size and max_turns must be at least 1")


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    status: Status
    topic: str
    message: str


@dataclass
class EpisodeTrace:
    """What one episode through the service showed."""

    group: int
    reset_key: Any = None
    reset_key_present: bool = False
    keys: list[Any] = field(default_factory=list)
    keys_missing: int = 0
    observation_chars: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    plain_turns: int = 0  # turns sent without a parseable tool call
    plain_flagged: int = 0  # of those, how many the env flagged info["invalid"] = True
    plain_unflagged: int = 0  # of those, how many it said were valid (info["invalid"] = False)
    context_resets: int = 0  # steps that set info["context_reset"] = True
    context_errors: list[str] = field(default_factory=list)  # malformed context_reset / state_text, per step
    ended: bool = False
    success: bool = False
    episode_return: float = 0.0
    error: str | None = None
    refused: str | None = None  # the env refused the task at reset (InvalidTask): the task's fault
