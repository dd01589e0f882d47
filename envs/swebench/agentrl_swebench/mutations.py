"""Bug injection by AST mutation, and the unified diffs that undo it (SWE-smith style).

What this is: pure functions. `find_mutations(path, source)` lists every single-line mutation of a module
that still parses, each a small edit of one line that keeps the rest of the file byte for byte:
    flip_comparison  `<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`, `in` <-> `not in`, `is` <-> `is not`
    off_by_one       an integer literal n -> n + 1
    swap_bool_op     `and` <-> `or`
    drop_not         `not x` -> `x`
    change_return    `return True` <-> `return False`, `return name` -> `return None`
`unified_diff` writes a git-style diff (`diff --git a/P b/P`) that `git apply` accepts; the gold patch of an
instance is the diff from the mutated file back to the original.

What this is not: the judge of a mutation. Whether a mutation makes a bug worth keeping (some tests fail,
the rest still pass, twice) is decided by running the tests (`scripts/swebench_make_tasks.py`).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass

COMPARISON_FLIPS = {"<=": "<", "<": "<=", ">=": ">", ">": ">=", "==": "!=", "!=": "==", "is not": "is",
                    "not in": "in", "in": "not in", "is": "is not"}  # fmt: skip
# longest first, so "is not" is found before "is" and "<=" before "<"
_COMPARISON_TOKEN = re.compile(r"(?<![\w<>=!])(is\s+not|not\s+in|<=|>=|==|!=|<|>|\bin\b|\bis\b)(?![\w<>=])")
_BOOL_TOKEN = re.compile(r"\b(and|or)\b")


@dataclass(frozen=True)
class Mutation:
    """One single-line edit: line `line` (1-based) of `path` changes from `before` to `after`."""

    path: str
    kind: str
    line: int
    column: int
    before: str
    after: str


def find_mutations(path: str, source: str) -> list[Mutation]:
    """All mutations of `source` (in source order) whose result still parses and differs from it."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    docstrings = _docstring_nodes(tree)
    found: list[Mutation] = []
    seen: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if node in docstrings or not _single_line(node):
            continue
        for kind, new_segment in _edits(node, lines):
            mutation = _mutation(path, kind, node, lines, new_segment)
            if (
                mutation is not None
                and (mutation.line, mutation.after) not in seen
                and _parses(source, mutation)
            ):
                seen.add((mutation.line, mutation.after))
                found.append(mutation)
    return sorted(found, key=lambda m: (m.line, m.column, m.kind, m.after))


def apply_mutation(source: str, mutation: Mutation) -> str:
    """`source` with the mutation's line replaced; `ValueError` if that line is not `mutation.before`."""
    lines = source.splitlines(keepends=True)
    if not 0 < mutation.line <= len(lines) or lines[mutation.line - 1] != mutation.before:
        raise ValueError(f"{mutation.path}:{mutation.line} does not match the mutation's original line")
    lines[mutation.line - 1] = mutation.after
    return "".join(lines)


def unified_diff(path: str, before: str, after: str, context: int = 3) -> str:
    """A git-style unified diff of one file from `before` to `after` ('' when equal)."""
    if before == after:
        return ""
    if not (before.endswith("\n") and after.endswith("\n")):
        raise ValueError(f"{path}: files without a final newline are not supported")
    body = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
        n=context,
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def _edits(node: ast.AST, lines: list[str]) -> Iterator[tuple[str, str]]:
    """(kind, replacement text of the node's source segment) for each mutation of one node."""
    segment = _segment(node, lines)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        yield from _replace_in_gap("flip_comparison", node, node.left, node.comparators[0], lines, _flip)
    elif isinstance(node, ast.BoolOp) and len(node.values) >= 2:
        swap = {"and": "or", "or": "and"}
        yield from _replace_in_gap(
            "swap_bool_op", node, node.values[0], node.values[1], lines, lambda m: swap[m.group(1)]
        )
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _single_line(node.operand):
        yield "drop_not", _segment(node.operand, lines)
    elif isinstance(node, ast.Constant) and type(node.value) is int and segment.isdigit():
        yield "off_by_one", str(node.value + 1)
    elif isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            yield "change_return", f"return {not value.value}"
        elif isinstance(value, ast.Name):
            yield "change_return", "return None"


def _flip(match: re.Match[str]) -> str:
    return COMPARISON_FLIPS[" ".join(match.group(1).split())]


def _replace_in_gap(kind, node, left, right, lines, replace):  # type: ignore[no-untyped-def]
    """Replace the one operator token between `left` and `right` inside `node`'s segment."""
    if not (_single_line(left) and _single_line(right)):
        return
    line = lines[node.lineno - 1].encode("utf-8")
    start, gap_start, gap_end = node.col_offset, left.end_col_offset, right.col_offset
    gap = line[gap_start:gap_end].decode("utf-8")
    pattern = _COMPARISON_TOKEN if kind == "flip_comparison" else _BOOL_TOKEN
    matches = list(pattern.finditer(gap))
    if len(matches) != 1:
        return
    new_gap = gap[: matches[0].start()] + replace(matches[0]) + gap[matches[0].end() :]
    head = line[start:gap_start].decode("utf-8")
    tail = line[gap_end : node.end_col_offset].decode("utf-8")
    yield kind, head + new_gap + tail


def _mutation(path: str, kind: str, node: ast.AST, lines: list[str], new_segment: str) -> Mutation | None:
    line = lines[node.lineno - 1]  # type: ignore[attr-defined]
    data = line.encode("utf-8")
    start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    after = (data[:start].decode("utf-8")) + new_segment + data[end:].decode("utf-8")
    if after == line:
        return None
    return Mutation(path, kind, node.lineno, start, line, after)  # type: ignore[attr-defined]


def _segment(node: ast.AST, lines: list[str]) -> str:
    data = lines[node.lineno - 1].encode("utf-8")  # type: ignore[attr-defined]
    return data[node.col_offset : node.end_col_offset].decode("utf-8")  # type: ignore[attr-defined]


def _single_line(node: ast.AST) -> bool:
    line = getattr(node, "lineno", None)
    return line is not None and line == getattr(node, "end_lineno", None)


def _parses(source: str, mutation: Mutation) -> bool:
    try:
        ast.parse(apply_mutation(source, mutation))
    except (SyntaxError, ValueError):
        return False
    return True


def _docstring_nodes(tree: ast.AST) -> set[ast.AST]:
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                nodes.add(body[0].value)
    return nodes
