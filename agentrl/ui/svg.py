"""Inline SVG charts for the viewer, drawn by hand (no plotting library in the server).

What this is: `line_chart(series, title)` returns an `<svg>` element (a `markupsafe.Markup`) with one
polyline per series, y ticks at round values with light grid lines, integer step ticks on x, a legend, and
a `<title>` on every point so the browser shows its series, step and value on hover. A chart whose points
all sit at one step (an eval-only run) is drawn as a value card instead: one line per series with its
value, never an axis from step -0.5 to 0.5. `nice_ticks` and `step_ticks` are the pure tick pickers.
Every label is HTML-escaped; coordinates are numbers.

What this is not: interactive beyond hover titles (no zoom, no JavaScript), or a replacement for
`agentrl runs plot` (matplotlib) or TensorBoard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
LEGEND_ROW = 13  # pixels per legend row
CHAR_WIDTH = 6.2  # pixels of one legend character at font-size 11, to cut names that would overlap

Scale = Callable[[float], float]


@dataclass(frozen=True)
class Frame:
    """The chart's size in pixels and the margins around the plotting area (the legend adds rows below)."""

    width: int = 460
    height: int = 180
    left: int = 48
    right: int = 14
    top: int = 24
    bottom: int = 42


def bounds(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) of the values, widened around the value when they are all equal (by a tenth of it, or
    by 1 around zero) so the scale never divides by zero."""
    low, high = min(values), max(values)
    if high - low < 1e-12:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    return low, high


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About `count` evenly spaced round values (1, 2 or 5 times a power of ten apart) covering [low, high]:
    the first at or below `low`, the last at or above `high`."""
    if high <= low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw - 1e-12)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def step_ticks(low: int, high: int, count: int = 6) -> list[int]:
    """Integer steps between `low` and `high` (both included when they are ticks of the spacing): every
    step for short runs, else multiples of a round spacing."""
    if high <= low:
        return [low]
    ticks = nice_ticks(float(low), float(high), count)
    spacing = max(1, round(ticks[1] - ticks[0]))
    first = math.ceil(low / spacing) * spacing
    return list(range(first, high + 1, spacing))


def line_chart(
    series: Mapping[str, Sequence[tuple[int, float]]], title: str, frame: Frame = Frame()
) -> Markup:
    """One line per non-empty series, x = step, y = value; a value card when every point is at one step;
    an explanatory text when all are empty."""
    present = {name: points for name, points in series.items() if points}
    columns = 1 if len(present) < 2 else 2
    rows = max(1, math.ceil(len(present) / columns))
    height = frame.height + LEGEND_ROW * (rows - 1)
    head = _head(frame.width, height, title, "chart")
    if not present:
        return Markup(f'{head}<text x="10" y="30">no {escape(title)} recorded</text></svg>')
    steps = sorted({step for points in present.values() for step, _ in points})
    if len(steps) == 1:
        return value_card(present, title, frame.width)
    values = [value for points in present.values() for _, value in points]
    y_ticks = nice_ticks(*bounds(values))
    x0, x1, y0, y1 = steps[0], steps[-1], y_ticks[0], y_ticks[-1]
    plot_w = frame.width - frame.left - frame.right
    plot_h = frame.height - frame.top - frame.bottom

    def x(step: float) -> float:
        return frame.left + (step - x0) / (x1 - x0) * plot_w

    def y(value: float) -> float:
        return frame.top + (1 - (value - y0) / (y1 - y0)) * plot_h

    parts = [head, _title(title), _y_axis(frame, y_ticks, y), _x_axis(frame, step_ticks(x0, x1), x)]
    column_width = (frame.width - 8) / columns
    chars = max(8, int(column_width / CHAR_WIDTH) - 1)
    for number, (name, points) in enumerate(present.items()):
        colour = COLOURS[number % len(COLOURS)]
        parts.append(_line(name, points, colour, x, y))
        column, row = number % columns, number // columns
        label = name if len(name) <= chars else name[: chars - 1] + "…"
        parts.append(
            f'<text class="legend" x="{8 + column_width * column:.0f}" '
            f'y="{frame.height - 4 + LEGEND_ROW * row}" fill="{colour}" font-size="11">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def value_card(series: Mapping[str, Sequence[tuple[int, float]]], title: str, width: int = 460) -> Markup:
    """Each series' value at its one step, large, with its name and step below: what a chart of one step
    can honestly show."""
    height = 24 + 38 * len(series)
    chars = int((width - 16) / (CHAR_WIDTH * 10 / 11))
    parts = [_head(width, height, title, "chart single"), _title(title)]
    for number, (name, points) in enumerate(series.items()):
        step, value = points[-1]
        colour, top = COLOURS[number % len(COLOURS)], 24 + 38 * number
        note = f"{name} at step {step}, the only step recorded"
        note = note if len(note) <= chars else note[: chars - 1] + "…"
        parts.append(
            f'<text class="pt value" x="8" y="{top + 18}" font-size="18" font-weight="600" fill="{colour}">'
            f"<title>{escape(name)} · step {step}: {value:.6g}</title>{value:.4g}</text>"
            f'<text class="legend" x="8" y="{top + 32}" font-size="10" fill="#555">{escape(note)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _title(title: str) -> str:
    """The chart's name, visible above the plot (the `<title>` only shows on hover)."""
    return f'<text x="8" y="14" font-size="12" font-weight="600">{escape(title)}</text>'


def _head(width: int, height: int, title: str, css: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css}" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
    )


def _line(name: str, points: Sequence[tuple[int, float]], colour: str, x: Scale, y: Scale) -> str:
    coords = " ".join(f"{x(step):.1f},{y(value):.1f}" for step, value in points)
    dots = "".join(
        f'<circle class="pt" cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}" stroke="transparent" '
        f'stroke-width="6"><title>{escape(name)} · step {s}: {v:.6g}</title></circle>'
        for s, v in points
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{coords}"/>{dots}'


def _y_axis(frame: Frame, ticks: Sequence[float], y: Scale) -> str:
    bottom, right = frame.height - frame.bottom, frame.width - frame.right
    parts = [f'<line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" y2="{bottom}" stroke="#888"/>']
    for tick in ticks:
        at = y(tick)
        parts.append(
            f'<line x1="{frame.left}" y1="{at:.1f}" x2="{right}" y2="{at:.1f}" stroke="#eee"/>'
            f'<text x="{frame.left - 4}" y="{at + 3:.1f}" text-anchor="end" font-size="10">{tick:.4g}</text>'
        )
    return "".join(parts)


def _x_axis(frame: Frame, ticks: Sequence[int], x: Scale) -> str:
    bottom, right = frame.height - frame.bottom, frame.width - frame.right
    parts = [f'<line x1="{frame.left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>']
    for tick in ticks:
        at = x(tick)
        parts.append(
            f'<line x1="{at:.1f}" y1="{bottom}" x2="{at:.1f}" y2="{bottom + 4}" stroke="#888"/>'
            f'<text x="{at:.1f}" y="{bottom + 14}" text-anchor="middle" font-size="10">{tick}</text>'
        )
    parts.append(f'<text x="{right}" y="{bottom + 26}" text-anchor="end" font-size="10">step</text>')
    return "".join(parts)
