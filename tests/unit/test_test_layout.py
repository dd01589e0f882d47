"""The test tree's own rule: every test module has a basename no other test module uses.

The test folders have no `__init__.py`, so pytest imports each test module by its basename; two files with
the same name in different folders (tests/unit and tests/smoke, say) break collection for the whole suite,
and only on a clean clone, where no stale `__pycache__` hides it. This is not a style rule.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def duplicate_basenames(paths: list[Path]) -> dict[str, list[str]]:
    """Basename -> the paths that share it, for basenames held by more than one path."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        seen[path.name].append(str(path))
    return {name: sorted(held) for name, held in seen.items() if len(held) > 1}


def test_duplicate_basenames_finds_a_clash() -> None:
    paths = [Path("tests/unit/test_a.py"), Path("tests/smoke/test_a.py"), Path("tests/unit/test_b.py")]
    assert duplicate_basenames(paths) == {"test_a.py": ["tests/smoke/test_a.py", "tests/unit/test_a.py"]}


def test_test_modules_have_unique_basenames() -> None:
    modules = [
        p.relative_to(ROOT)
        for folder in ("tests", "envs")
        for p in (ROOT / folder).rglob("test_*.py")
        if ".venv" not in p.parts
    ]
    assert len(modules) > 100, "the test tree was not found"
    clashes = duplicate_basenames(modules)
    assert clashes == {}, "rename one of each pair: pytest imports test modules by basename"
