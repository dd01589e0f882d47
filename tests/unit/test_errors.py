"""The exception tree: every exception class agentrl defines is in `agentrl/errors.py`, derives from
`AgentRLError`, and is drawn in that module's docstring under its parent.

Two kinds of exception may live elsewhere, listed in `ELSEWHERE` with the reason: one private to a
function's control flow that never leaves it, and one a framework requires to be its own type.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

from agentrl import errors
from agentrl.errors import AgentRLError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agentrl"
ELSEWHERE = {
    ("agentrl/agent/parsing.py", "_Malformed"): "raised and caught inside parse_turn, which never raises: "
    "a malformed tool call is data on the turn (Action.parse_error), not an error",
    ("agentrl/service/protection.py", "BodyTooLarge"): "a Starlette HTTPException, or FastAPI answers 400 "
    "for anything raised while it reads a body",
}
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def base_name(node: ast.expr) -> str:
    """`Name` of `Name` or of `module.Name`."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def exception_classes() -> dict[tuple[str, str], list[str]]:
    """(path, class name) -> base names, for every class under agentrl/ that is an exception: one with a
    builtin exception, a class named *Error or *Exception, or another such class among its bases."""
    classes = {
        (path.relative_to(ROOT).as_posix(), node.name): [base_name(base) for base in node.bases]
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    names = set(BUILTIN_EXCEPTIONS)
    while True:  # a class deriving from an exception class is one: grow the set to its fixpoint
        found = {
            name
            for (_, name), bases in classes.items()
            if any(b in names or b.endswith(("Error", "Exception")) for b in bases)
        }
        if found <= names:
            break
        names |= found
    return {key: bases for key, bases in classes.items() if key[1] in names}


def test_every_exception_class_is_in_errors_py() -> None:
    found = exception_classes()
    assert set(ELSEWHERE) <= set(found), "ELSEWHERE lists a class that is gone; remove it there"
    outside = {
        f"{path}:{name}({', '.join(bases)})"
        for (path, name), bases in found.items()
        if path != "agentrl/errors.py" and (path, name) not in ELSEWHERE
    }
    assert outside == set(), "define these in agentrl/errors.py, under AgentRLError and in its tree"


def error_classes() -> list[type[BaseException]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    ]


def test_every_class_in_errors_py_derives_from_agentrl_error() -> None:
    assert [cls.__name__ for cls in error_classes() if not issubclass(cls, AgentRLError)] == []
    assert {name for path, name in exception_classes() if path == "agentrl/errors.py"} == {
        cls.__name__ for cls in error_classes()
    }


def drawn_tree(docstring: str) -> dict[str, str | None]:
    """Each class name in the docstring's tree -> the name it is drawn under (None for the root)."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in docstring.splitlines():
        if "── " in line:
            column = line.index("── ") + 3
        elif line.strip() == AgentRLError.__name__:
            column = len(line) - len(line.lstrip())
        else:
            continue
        name = line[column:].split()[0]
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    return parents


def test_the_docstring_draws_every_class_under_its_parent() -> None:
    assert errors.__doc__ is not None
    expected = {
        cls.__name__: next((b.__name__ for b in cls.__bases__ if issubclass(b, AgentRLError)), None)
        for cls in error_classes()
    }
    assert drawn_tree(errors.__doc__) == expected
