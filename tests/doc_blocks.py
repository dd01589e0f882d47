"""The fenced code blocks of docs/environments.md, for the tests that run them.

What this is: `doc_blocks()`, every block with its language, its `file=` (the file `agentrl envs new` writes
that the block quotes, as `<plugin folder>/<path>`) and its text; `quoted_pieces`, the parts of a quote
between `...` lines; and `bash_script`, the page's shell blocks joined into one script. What this is not:
a test file (tests/unit/test_environments_doc.py checks the quotes, tests/smoke/test_envs_new.py runs the
shell blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "environments.md"
BLOCK = re.compile(r"^```(?P<lang>\w*)(?P<info>[^\n]*)\n(?P<text>.*?)^```$", re.MULTILINE | re.DOTALL)
FILE = re.compile(r"\bfile=(\S+)")
GAP = re.compile(r"^\s*\.\.\.\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    lang: str
    file: str | None
    text: str


def doc_blocks(doc: Path = DOC) -> list[Block]:
    blocks = []
    for match in BLOCK.finditer(doc.read_text(encoding="utf-8")):
        file = FILE.search(match["info"])
        blocks.append(Block(match["lang"], file.group(1) if file else None, match["text"]))
    return blocks


def quoted_pieces(block: Block) -> list[str]:
    """The block's text split at lines holding only `...` (a gap in the quote)."""
    return [piece.strip("\n") for piece in GAP.split(block.text) if piece.strip()]


def bash_script(doc: Path = DOC, marker: str = "@@ block") -> str:
    """Every shell block of the page, in order, as one `set -euo pipefail` script that echoes
    `<marker> <index> <seconds since the epoch>` before each block and after the last."""
    lines = ["set -euo pipefail"]
    shells = [block for block in doc_blocks(doc) if block.lang == "bash"]
    for index, block in enumerate(shells):
        lines += [f'echo "{marker} {index} $(date +%s.%N)"', block.text.rstrip("\n")]
    lines.append(f'echo "{marker} {len(shells)} $(date +%s.%N)"')
    return "\n".join(lines) + "\n"
