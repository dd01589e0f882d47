"""The one way the bench's report scripts rewrite a generated block of a document (README, docs pages):
the text between a start and an end marker, markers kept. What this is not: a template engine."""

from __future__ import annotations


def replace_block(text: str, block: str, start: str, end: str, where: str = "README") -> str:
    """`text` with the part between `start` and `end` replaced by `block`; a missing marker stops with the
    file (`where`) and the markers it lacks."""
    if start not in text or end not in text:
        raise SystemExit(f"{where} has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    return head + start + "\n" + block + "\n" + end + rest.split(end, 1)[1]
