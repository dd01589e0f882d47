"""The run plot: reward, success, KL, entropy and anchor hit rate against step, one panel each, as a PNG.

What this is: `plot_run(series, path)` over the metric series of `views.metric_series`, drawn with
matplotlib's Agg backend (no display needed). A panel whose metrics were never recorded is left out and
named in the returned list of notes (e.g. KL when the run had no KL term).

What this is not: a live dashboard (TensorBoard and `agentrl ui` are for looking while a run goes on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

Series = Mapping[str, Sequence[tuple[int, float]]]


@dataclass(frozen=True)
class Panel:
    """One subplot: its title and the metric names drawn in it (each a line, when recorded)."""

    title: str
    metrics: tuple[str, ...]


PANELS = (
    Panel("reward", ("reward_mean", "eval/mean_reward")),
    Panel("success", ("success_rate", "eval/success_rate")),
    Panel("KL", ("kl", "approx_kl")),
    Panel("entropy", ("entropy",)),
    Panel("anchor hit rate", ("credit/anchor_hit_rate",)),
)


def present_panels(series: Series, panels: Sequence[Panel] = PANELS) -> tuple[list[Panel], list[str]]:
    """The panels with at least one recorded metric, and a note for each one left out."""
    shown, notes = [], []
    for panel in panels:
        if any(series.get(name) for name in panel.metrics):
            shown.append(panel)
        else:
            notes.append(
                f"no {panel.title} in this run (none of {', '.join(panel.metrics)} recorded); skipped"
            )
    return shown, notes


def plot_run(series: Series, path: Path, title: str = "") -> tuple[bool, list[str]]:
    """Write the PNG to `path`; return whether it was written (not when no panel has data) and the notes
    on skipped panels."""
    panels, notes = present_panels(series)
    if not panels:
        return False, notes
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(
        len(panels), 1, figsize=(7, 1.9 * len(panels) + 0.6), sharex=True, squeeze=False
    )
    for axis, panel in zip(axes[:, 0], panels, strict=True):
        for name in panel.metrics:
            points = series.get(name)
            if points:
                steps, values = zip(*points, strict=True)
                axis.plot(steps, values, marker="o", markersize=3, linewidth=1.4, label=name)
        axis.set_ylabel(panel.title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("step")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True, notes
