"""`agentrl.devtools.leak_guard` in a pytest run of its own: a guarded env folder's test does not fail for a
socket that an unguarded module run before it left in the garbage (the order pytest-xdist's workers may
run files in), and still fails for a socket it leaves itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFTEST = """
from pathlib import Path
from agentrl.devtools.leak_guard import closes_what_it_opens, module_closes_what_it_opens, unclosed_is_error

def pytest_collection_modifyitems(config, items):
    unclosed_is_error(items, Path(__file__).resolve().parent)
"""

# gc stays off until a test collects, as if the collector happened to run inside the guarded test
LEAVES_A_SOCKET_IN_A_CYCLE = """
import gc, socket

def test_leaves_garbage():
    gc.disable()
    holder = {"socket": socket.socket()}
    holder["self"] = holder
"""

COLLECTS = """
import gc, socket

def test_collects_during_the_test():
    gc.collect()
"""

LEAKS_ITSELF = """
import gc, socket

def test_leaks_its_own_socket():
    holder = {"socket": socket.socket()}
    holder["self"] = holder
    del holder
    gc.collect()
"""


def run(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write(folder: Path, guarded_test: str) -> None:
    (folder / "a_unguarded").mkdir(parents=True)
    (folder / "a_unguarded" / "test_first.py").write_text(LEAVES_A_SOCKET_IN_A_CYCLE)
    (folder / "b_guarded").mkdir()
    (folder / "b_guarded" / "conftest.py").write_text(CONFTEST)
    (folder / "b_guarded" / "test_second.py").write_text(guarded_test)


def test_another_modules_garbage_is_not_the_guarded_tests_leak(tmp_path: Path) -> None:
    write(tmp_path, COLLECTS)
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout


def test_a_socket_the_guarded_test_leaves_still_fails_it(tmp_path: Path) -> None:
    write(tmp_path, LEAKS_ITSELF)
    done = run(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "left unclosed" in done.stdout
