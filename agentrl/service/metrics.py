"""Prometheus metrics of the env service, rendered in the text exposition format (version 0.0.4).

What this is: `ServiceMetrics`, a few counters and one histogram kept in plain dicts and rendered by
`render()`; the app serves it at GET /metrics. Written by hand because it is this small and the
`prometheus_client` package is not a dependency. What this is not: a general metrics library (no
registry, no multiprocess mode; one service process, one event loop, so no locks).

Series:
    agentrl_service_sessions_live                       gauge, sessions open now
    agentrl_service_sessions_created_total              counter
    agentrl_service_sessions_closed_total{reason}       counter; reason: client, idle, timeout, shutdown
    agentrl_service_step_seconds (histogram)            env step latency, server side
    agentrl_service_errors_total{type,status}           error responses by error type and HTTP status
    agentrl_service_sandboxes_reaped_total{reason}      orphaned sandboxes this service removed, by the
                                                        reason their owner counts as gone
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

STEP_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
"""Upper bounds of the step latency histogram; +Inf is added when rendering."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[int]:
        running, out = 0, []
        for count in self.counts:
            running += count
            out.append(running)
        return out


@dataclass
class ServiceMetrics:
    sessions_created: int = 0
    sessions_closed: Counter[str] = field(default_factory=Counter)
    errors: Counter[tuple[str, int]] = field(default_factory=Counter)
    step_seconds: Histogram = field(default_factory=lambda: Histogram(STEP_BUCKETS_S))
    sandboxes_reaped: Counter[str] = field(default_factory=Counter)

    def render(self, live_sessions: int) -> str:
        lines = [
            *_header("agentrl_service_sessions_live", "gauge", "Sessions open now."),
            f"agentrl_service_sessions_live {live_sessions}",
            *_header("agentrl_service_sessions_created_total", "counter", "Sessions created."),
            f"agentrl_service_sessions_created_total {self.sessions_created}",
            *_header("agentrl_service_sessions_closed_total", "counter", "Sessions closed, by reason."),
            *(
                f'agentrl_service_sessions_closed_total{{reason="{_escape(reason)}"}} {count}'
                for reason, count in sorted(self.sessions_closed.items())
            ),
            *_header("agentrl_service_errors_total", "counter", "Error responses, by error type and status."),
            *(
                f'agentrl_service_errors_total{{type="{_escape(type_)}",status="{status}"}} {count}'
                for (type_, status), count in sorted(self.errors.items())
            ),
            *_header(
                "agentrl_service_sandboxes_reaped_total",
                "counter",
                "Orphaned sandbox containers removed, by why their owner counts as gone.",
            ),
            *(
                f'agentrl_service_sandboxes_reaped_total{{reason="{_escape(reason)}"}} {count}'
                for reason, count in sorted(self.sandboxes_reaped.items())
            ),
            *_header("agentrl_service_step_seconds", "histogram", "Env step latency in seconds."),
            *_histogram_lines("agentrl_service_step_seconds", self.step_seconds),
        ]
        return "\n".join(lines) + "\n"


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _histogram_lines(name: str, histogram: Histogram) -> list[str]:
    lines = [
        f'{name}_bucket{{le="{bound:g}"}} {count}'
        for bound, count in zip(histogram.buckets, histogram.cumulative(), strict=True)
    ]
    lines.append(f'{name}_bucket{{le="+Inf"}} {histogram.count}')
    lines.append(f"{name}_sum {histogram.total!r}")
    lines.append(f"{name}_count {histogram.count}")
    return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
