"""`HarnessConfig`: which external agent harness plays the episodes (`rollout.harness.*`), and its bounds.

What this is: a frozen config with no imports beyond the standard library, so that `RolloutConfig` (and with
it every run config) can hold it without pulling in FastAPI or uvicorn; the endpoint and the runner import
it, never the other way round.

What this is not: the harness itself (`agentrl.harness.runner`) or the endpoint (`agentrl.harness.endpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HarnessConfig:
    """An external harness instead of agentrl's own episode loop (docs/harness.md).

    target:            "package.module:function", a harness called once per episode with a
                       `HarnessContext` (a plain function runs in a worker thread, an `async def` on the event
                       loop); empty: agentrl's own loop plays the episodes
    command:           argv of a harness run as a subprocess per episode instead (OPENAI_BASE_URL,
                       OPENAI_API_KEY and AGENTRL_HARNESS_URL in its environment); exclusive with `target`
    finish_tool:       a tool the runner calls with no arguments when the harness returns before the env
                       ended the episode (e.g. "submit" for SWE-bench, so the final workspace is graded);
                       empty: none
    timeout_s:         wall-clock limit of one harness run; then the episode stops (`max_turns`)
    honour_sampling:   use the request's temperature, top_p and seed; by default every call samples with the
                       run's `sampling` (the temperature the trainer's loss assumes)
    max_request_bytes: the largest request body the endpoint reads (413 above it)
    rate_per_s:        calls per second one episode may make (token bucket, burst `rate_burst`; 429 above)
    rate_burst:        the bucket's size
    max_concurrent:    calls of one episode in flight at once (429 above)
    served_name:       the model id `/v1/models` lists
    """

    target: str = ""
    command: tuple[str, ...] = ()
    finish_tool: str = ""
    timeout_s: float = 1800.0
    honour_sampling: bool = False
    max_request_bytes: int = 8 * 1024 * 1024
    rate_per_s: float = 50.0
    rate_burst: int = 20
    max_concurrent: int = 4
    served_name: str = "agentrl"

    def __post_init__(self) -> None:
        if self.target and self.command:
            raise ValueError("rollout.harness: set target or command, not both")
        if self.target and ":" not in self.target:
            raise ValueError(f"rollout.harness.target must be 'module:function', got {self.target!r}")
        if self.timeout_s <= 0 or self.rate_per_s <= 0 or self.rate_burst < 1 or self.max_concurrent < 1:
            raise ValueError(
                "rollout.harness: timeout_s and rate_per_s must be > 0, rate_burst and max_concurrent >= 1"
            )
        if self.max_request_bytes < 1024:
            raise ValueError("rollout.harness.max_request_bytes must be at least 1024")

    @property
    def enabled(self) -> bool:
        return bool(self.target or self.command)
