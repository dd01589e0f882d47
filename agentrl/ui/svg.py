"""Inline SVG line charts for the viewer's run page, drawn by hand (no plotting library in the server).

What this is: `line_chart(series)` returns an `<svg>` element (a `markupsafe.Markup`) with one polyline per
metric, axes with min/max labels and a legend. Every label is HTML-escaped; coordinates are numbers.
What this is not: interactive, or a replacement for `agentrl runs plot` (matplotlib) or TensorBoard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")


@dataclass(frozen=True)
class Frame:
    """The chart's size in pixels and the margins around the plotting area."""

    width: int = 460
    height: int = 180
    left: int = 44
    right: int = 12
    top: int = 12
    bottom: int = 42


def bounds(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) of the values, widened when they are all equal so the scale never divides by zero."""
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return low - 0.5, high + 0.5
    return low, high


def line_chart(
    series: Mapping[str, Sequence[tuple[int, float]]], title: str, frame: Frame = Frame()
) -> Markup:
    """One line per non-empty series, x = step, y = value; an explanatory text when all are empty."""
    present = {name: points for name, points in series.items() if points}
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{frame.width}" '
        f'height="{frame.height}" viewBox="0 0 {frame.width} {frame.height}"><title>{escape(title)}</title>'
    )
    if not present:
        return Markup(f'{head}<text x="10" y="30">no {escape(title)} recorded</text></svg>')
    steps = [step for points in present.values() for step, _ in points]
    values = [value for points in present.values() for _, value in points]
    (x0, x1), (y0, y1) = bounds([float(s) for s in steps]), bounds(values)
    width = frame.width - frame.left - frame.right
    height = frame.height - frame.top - frame.bottom

    def x(step: float) -> float:
        return frame.left + (step - x0) / (x1 - x0) * width

    def y(value: float) -> float:
        return frame.top + (1 - (value - y0) / (y1 - y0)) * height

    parts = [head, _axes(frame, x0, x1, y0, y1)]
    for number, (name, points) in enumerate(present.items()):
        colour = COLOURS[number % len(COLOURS)]
        coords = " ".join(f"{x(step):.1f},{y(value):.1f}" for step, value in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        parts += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>' for s, v in points]
        parts.append(
            f'<text x="{frame.left + 150 * number}" y="{frame.height - 4}" fill="{colour}" '
            f'font-size="11">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _axes(frame: Frame, x0: float, x1: float, y0: float, y1: float) -> str:
    bottom, right = frame.height - frame.bottom, frame.width - frame.right
    return (
        f'<line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" y2="{bottom}" stroke="#888"/>'
        f'<line x1="{frame.left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>'
        f'<text x="{frame.left - 4}" y="{frame.top + 8}" text-anchor="end" font-size="10">{y1:.3g}</text>'
        f'<text x="{frame.left - 4}" y="{bottom}" text-anchor="end" font-size="10">{y0:.3g}</text>'
        f'<text x="{frame.left}" y="{bottom + 14}" font-size="10">step {x0:g}</text>'
        f'<text x="{right}" y="{bottom + 14}" text-anchor="end" font-size="10">step {x1:g}</text>'
    )
