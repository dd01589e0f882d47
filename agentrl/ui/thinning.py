"""Thin a long metric series for a chart: at most `max_points` points, each bucket's lowest and highest kept.

What this is: `thin(points, max_points)` splits a series (in step order) into `max_points // 2` buckets of
consecutive points and keeps, from each, its lowest and highest value in step order, so a spike or a dip
still shows; the first and last points are always kept. `thin_series` applies it to every series of a
run. A chart of a 10,000-step run is then a few hundred SVG points, not 10,000 (one per pixel at most).

What this is not: an average. The values kept are values the run logged, at the steps it logged them;
the metric summary table (first, last, min, max) is computed from the whole series, not from this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Point = tuple[int, float]
MAX_CHART_POINTS = 120  # per series: a point every 4 pixels or so of a 460-pixel chart


def thin(points: Sequence[Point], max_points: int = MAX_CHART_POINTS) -> list[Point]:
    """The series itself when it has at most `max_points` points, else its buckets' extremes."""
    if len(points) <= max_points:
        return list(points)
    buckets = max(1, (max_points - 2) // 2)  # two points a bucket, plus the first and the last
    size = len(points) / buckets
    kept: list[Point] = []
    for bucket in range(buckets):
        chunk = points[round(bucket * size) : round((bucket + 1) * size)]
        if chunk:
            low = min(chunk, key=lambda point: point[1])
            high = max(chunk, key=lambda point: point[1])
            kept += sorted({low, high})
    ends = {points[0], points[-1]}
    return sorted(set(kept) | ends)


def thin_series(
    series: Mapping[str, Sequence[Point]], max_points: int = MAX_CHART_POINTS
) -> dict[str, list[Point]]:
    """Every series thinned (see `thin`)."""
    return {name: thin(points, max_points) for name, points in series.items()}
