"""Which charts the viewer draws: every logged metric of a run as small multiples, and several runs overlaid.

What this is: `panels(names)` decides the panels (reward and success each pair the training metric with its
held-out twin; every other metric gets a panel of its own, in name order), `run_charts(series)` draws one
run's panels and `overlay_charts(runs)` draws one panel per metric with a line per run. Pure functions over
the `{name: [(step, value)]}` series of `views.metric_series`; the drawing is `svg.line_chart`'s.

What this is not: a metric reader (callers pass the series) or a place that decides what a run logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from agentrl.ui.svg import Frame, line_chart

Series = Mapping[str, Sequence[tuple[int, float]]]
SMALL = Frame(width=320, height=180, left=48, right=12, top=24, bottom=42)


@dataclass(frozen=True)
class Panel:
    """One small chart: its title and the metrics drawn in it."""

    title: str
    metrics: tuple[str, ...]


PAIRED = (
    Panel("reward", ("reward_mean", "eval/mean_reward")),
    Panel("success", ("success_rate", "eval/success_rate")),
)
"""Training metrics drawn with their held-out twin; every other metric is a panel of its own."""


def panels(names: Sequence[str]) -> list[Panel]:
    """The paired panels that have a metric in `names`, then one panel per remaining name, sorted."""
    present = set(names)
    chosen = [panel for panel in PAIRED if present & set(panel.metrics)]
    paired = {name for panel in PAIRED for name in panel.metrics}
    return chosen + [Panel(name, (name,)) for name in sorted(present - paired)]


def run_charts(series: Series, frame: Frame = SMALL) -> list[Markup]:
    """One chart per panel of the run's metrics (none for a run with no metrics yet)."""
    return [
        line_chart({name: series.get(name, []) for name in panel.metrics}, panel.title, frame)
        for panel in panels(list(series))
    ]


def overlay_charts(runs: Sequence[tuple[str, Series]], frame: Frame = SMALL) -> list[Markup]:
    """One chart per metric any of the runs logged, with a line per run that logged it (labelled by run)."""
    names = sorted({name for _, series in runs for name in series})
    return [
        line_chart({label: series.get(name, []) for label, series in runs}, name, frame) for name in names
    ]
