"""The code blocks of the docs, for the tests that run them.

What this is: `doc_blocks(doc)`, every fenced block of a page (docs/environments.md by default) with its
language, its info string, its `file=` (the file `agentrl envs new` writes that the block quotes, as
`<plugin folder>/<path>`) and its text; `indented_blocks`, a page's indented (four-space) code blocks;
`commands`, the shell commands of a block (comments dropped, continuation lines joined); `quoted_pieces`,
the parts of a quote between `...` lines; and `bash_script`, the page's shell blocks joined into one script.
What this is not: a test file (tests/unit/test_environments_doc.py checks environments.md's quotes,
tests/smoke/test_envs_new.py runs its shell blocks, tests/unit/test_doc_snippets.py runs every other page's
blocks).
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
    info: str = ""


def doc_blocks(doc: Path = DOC) -> list[Block]:
    blocks = []
    for match in BLOCK.finditer(doc.read_text(encoding="utf-8")):
        file = FILE.search(match["info"])
        info = match["info"].strip()
        blocks.append(Block(match["lang"], file.group(1) if file else None, match["text"], info))
    return blocks


def indented_blocks(doc: Path) -> list[str]:
    """The page's indented code blocks (four spaces, after a blank line, outside fenced blocks and lists)."""
    text = BLOCK.sub(lambda fenced: "\n" * fenced.group(0).count("\n"), doc.read_text(encoding="utf-8"))
    lines = text.split("\n")
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].startswith("    ") and index and not lines[index - 1].strip():
            end = index
            while end < len(lines) and (
                lines[end].startswith("    ")
                or (not lines[end].strip() and end + 1 < len(lines) and lines[end + 1].startswith("    "))
            ):
                end += 1
            blocks.append("\n".join(line[4:] for line in lines[index:end]))
            index = end
        else:
            index += 1
    return blocks


def commands(text: str) -> list[str]:
    """The block's shell commands: `\\` continuations joined, `#` comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]


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
