"""Reads the history rows of an offline W&B run back, for tests (the sink must be checked end to end).

The offline run file is a LevelDB-style log of protobuf `Record`s (wandb's transaction log: a 7-byte
header, then 32 KiB blocks of chunks with a 7-byte header each: CRC32, little-endian length, type);
newer wandb versions no longer ship a Python reader for it.
"""

from __future__ import annotations

import json
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK, CHUNK_HEADER, FILE_HEADER = 32768, 7, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def log_records(data: bytes) -> list[bytes]:
    """Reassemble the records of a LevelDB-format log (FULL, or FIRST MIDDLE* LAST chunks)."""
    records, pending, position = [], bytearray(), FILE_HEADER
    while position + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < CHUNK_HEADER:  # block trailer padding
            position += left_in_block
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        body = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        position += CHUNK_HEADER + length
        if kind == 0 and length == 0:
            break
        pending += body
        if kind in (FULL, LAST):
            records.append(bytes(pending))
            pending.clear()
    return records


def history_rows(run_dir: Path) -> list[dict[str, object]]:
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    assert path.read_bytes()[:4] == b":W&B"
    rows = []
    for raw in log_records(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows
