"""Export a run's episodes (with their turns, rewards, advantages and state keys) as JSONL or Parquet.

What this is: one record per episode, exactly the dicts `repository.load_episodes` returns (times as ISO
8601 strings), written as JSON lines or as a Parquet table whose `turns` column is a list of structs
(pyarrow). What this is not: token data (the store keeps only token counts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

ExportFormat = Literal["jsonl", "parquet"]
FORMATS: tuple[ExportFormat, ...] = ("jsonl", "parquet")


def plain(value: Any) -> Any:
    """The value with datetimes as ISO strings, recursively through dicts and lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def write_jsonl(episodes: Sequence[Mapping[str, Any]], path: Path) -> None:
    with path.open("w") as handle:
        for episode in episodes:
            handle.write(json.dumps(plain(episode)) + "\n")


def write_parquet(episodes: Sequence[Mapping[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [plain(episode) for episode in episodes]
    for row in rows:  # free-form env info: one JSON text per turn (Parquet needs a fixed struct)
        for turn in row.get("turns", []):
            turn["info"] = json.dumps(turn.get("info"))
    pq.write_table(pa.Table.from_pylist(rows), path)


def export_episodes(episodes: Sequence[Mapping[str, Any]], path: Path, fmt: ExportFormat) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (write_jsonl if fmt == "jsonl" else write_parquet)(episodes, path)
