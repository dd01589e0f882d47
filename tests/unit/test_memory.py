"""agentrl.memory: the allocator choice, the LD_PRELOAD round trip, a real re-execution under tcmalloc, and
freed memory given back to the operating system under tcmalloc."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from agentrl import memory

SHOW = (
    "import json, os; from agentrl.memory import choose_allocator; "
    "print(json.dumps([choose_allocator(), os.environ.get('LD_PRELOAD'), os.getpid()]))"
)


def test_preload_then_restore_gives_back_the_environment() -> None:
    for before in ({}, {"LD_PRELOAD": "/opt/libother.so"}):
        env = memory.preload_environment({"PATH": "/bin", **before}, "/usr/lib/libtcmalloc_minimal.so.4")
        assert env["LD_PRELOAD"].split(":")[0] == "/usr/lib/libtcmalloc_minimal.so.4"
        assert env[memory.TCMALLOC_REPORT_ENV] == memory.TCMALLOC_REPORT_BYTES
        memory.restore_environment(env)
        del env[memory.TCMALLOC_REPORT_ENV]
        assert env == {"PATH": "/bin", **before}


def test_a_child_environment_is_preloaded_where_the_child_would_reexecute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = "/usr/lib/libtcmalloc_minimal.so.4"
    monkeypatch.setattr(memory, "find_tcmalloc", lambda: library)
    assert memory.child_environment({"PATH": "/bin"}) == memory.preload_environment({"PATH": "/bin"}, library)
    for kept in ({memory.ALLOCATOR_ENV: "glibc"}, {memory.PRELOADED_ENV: ""}):
        assert memory.child_environment({"PATH": "/bin", **kept}) == {"PATH": "/bin", **kept}
    monkeypatch.setattr(memory, "find_tcmalloc", lambda: None)
    assert memory.child_environment({"PATH": "/bin"}) == {"PATH": "/bin"}


def test_an_unknown_setting_names_the_choices() -> None:
    with pytest.raises(SystemExit, match="auto, tcmalloc, glibc, system"):
        memory.requested({memory.ALLOCATOR_ENV: "jemalloc"})
    assert memory.requested({}) == "auto"


def test_system_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.ALLOCATOR_ENV, "system")
    assert memory.choose_allocator(reexec=False) == "system"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning applies to glibc only")
def test_glibc_accepts_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.ALLOCATOR_ENV, "glibc")
    assert memory.choose_allocator(reexec=False) == "glibc"


def run_show(setting: str) -> list:
    env = {**os.environ, memory.ALLOCATOR_ENV: setting}
    env.pop("LD_PRELOAD", None)
    done = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(memory.find_tcmalloc() is None, reason="libtcmalloc-minimal4 is not installed")
def test_a_command_reexecutes_once_under_tcmalloc_and_its_children_start_clean() -> None:
    allocator, preload, _ = run_show("auto")
    assert allocator == "tcmalloc"  # read from the process's own memory map after the re-exec
    assert preload is None  # taken back out, so docker, git and the sandboxes are not preloaded
    assert run_show("glibc")[:2] == ["glibc", None]


RETURN = """
import json
from agentrl.memory import return_free_memory
from agentrl.trainer.peak_memory import resident_mb
import numpy as np
blocks = [np.ones(8 * 1024 * 1024 // 8) for _ in range(40)]  # 320 MB in 8 MB blocks, written: resident
del blocks
kept = resident_mb()  # tcmalloc keeps the freed spans in its page heap
which = return_free_memory()
print(json.dumps([which, kept, resident_mb()]))
"""


@pytest.mark.skipif(memory.find_tcmalloc() is None, reason="libtcmalloc-minimal4 is not installed")
def test_free_memory_tcmalloc_keeps_goes_back_to_the_system() -> None:
    env = {**os.environ, "LD_PRELOAD": memory.find_tcmalloc() or ""}
    done = subprocess.run([sys.executable, "-c", RETURN], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    which, kept, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert which == "tcmalloc"
    assert kept - after > 200  # most of the 320 MB freed but resident until returned


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_the_allocator_in_use_is_the_one_asked_to_return_memory() -> None:
    expected = "tcmalloc" if "libtcmalloc" in memory.loaded_libraries() else "glibc"
    assert memory.return_free_memory() == expected
