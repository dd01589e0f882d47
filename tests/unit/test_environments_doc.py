"""docs/environments.md: every code block is accounted for, and what it shows works.

A Python, YAML or TOML block quotes a file `agentrl envs new` writes (`file=<plugin folder>/<path>` in its
fence); each quote is checked verbatim here against the rendered plugin, and those files run: the written
plugins pass their own tests (the ones that need neither Docker nor training) and ruff. The shell blocks run
in order, from an empty folder, in tests/smoke/test_envs_new.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import Block, bash_script, doc_blocks, quoted_pieces

from agentrl.devtools.scaffold import render_plugin, write_plugin

PLUGINS = {"hilo": False, "lookup": True}  # the page's plugins, and whether each is sandboxed
RENDERED = {name: render_plugin(name, sandboxed=sandboxed) for name, sandboxed in PLUGINS.items()}


def quotes() -> list[Block]:
    return [block for block in doc_blocks() if block.file]


def test_every_block_is_a_shell_block_or_a_quote_of_a_written_file() -> None:
    blocks = doc_blocks()
    unaccounted = [block.text[:60] for block in blocks if not (block.lang == "bash" or block.file)]
    assert blocks and unaccounted == []
    assert {block.file.split("/")[0] for block in quotes() if block.file} == set(PLUGINS)


@pytest.mark.parametrize("block", quotes(), ids=lambda block: block.file)
def test_a_quote_is_verbatim_in_the_file_envs_new_writes(block: Block) -> None:
    assert block.file is not None
    folder, _, path = block.file.partition("/")
    text = RENDERED[folder][path]
    position = 0
    for piece in quoted_pieces(block):
        found = text.find(piece, position)
        assert found >= 0, f"{block.file} does not contain, after what the page quoted before:\n{piece}"
        position = found + len(piece)


def test_the_shell_blocks_go_from_nothing_to_a_trained_run() -> None:
    script = bash_script()
    steps = [
        "agentrl envs new hilo",
        "pip install -e hilo --no-deps --no-build-isolation",
        'pytest -q -m "not slow"',
        "agentrl envs check hilo/Hilo-v0",
        "agentrl train --task hilo",
        "agentrl eval --task hilo",
    ]
    positions = [script.index(step) for step in steps]
    assert positions == sorted(positions)


def test_the_first_quote_of_each_python_file_shows_its_imports() -> None:
    """A reader copying a quote gets the imports too: the first quote of each Python file the page shows
    opens with that file's import lines, verbatim."""
    first: dict[str, Block] = {}
    for block in quotes():
        if block.lang == "python" and block.file:
            first.setdefault(block.file, block)
    for file, block in first.items():
        folder, _, path = file.partition("/")
        lines = RENDERED[folder][path].splitlines()
        imports = [
            line for line in lines if line.startswith(("from ", "import ")) and "__future__" not in line
        ]
        shown = quoted_pieces(block)[0].splitlines()
        assert [line for line in shown if line in imports] == imports, f"{file}: the quote lacks its imports"


def test_the_readme_links_the_tutorial(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    assert "## Your own environment" in readme and "(docs/environments.md)" in readme


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("name", list(PLUGINS))
def test_a_written_plugin_passes_its_own_tests_and_ruff(name: str, tmp_path: Path) -> None:
    folder = tmp_path / name
    write_plugin(name, folder, sandboxed=PLUGINS[name])
    tests = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not docker"],
        folder,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout
    for command in (["check", "."], ["format", "--check", "."]):
        linted = run([sys.executable, "-m", "ruff", *command], folder)
        assert linted.returncode == 0, linted.stdout + linted.stderr
