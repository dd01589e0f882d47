"""The memory allocator of every `agentrl` process: tcmalloc when the machine has it, tuned glibc otherwise.

What this is: `choose_allocator()`, called first by the `agentrl` command (and by the benchmarks and the
credit study's run processes). With `AGENTRL_ALLOCATOR=auto` (the default) or `tcmalloc`, and
libtcmalloc_minimal on the machine (Debian: `libtcmalloc-minimal4`, installed by `make setup`), the process
re-executes itself once, the same command line, with the library in `LD_PRELOAD`; the re-executed process
takes `LD_PRELOAD` back out of its environment, so its own children (docker, git, torchrun ranks, which
make the same choice themselves) start as they would have. Without the library, or with
`AGENTRL_ALLOCATOR=glibc`, glibc is capped at 2 arenas and serves allocations of 1 MiB or more with their
own mmap. `AGENTRL_ALLOCATOR=system` changes nothing.

Why: PyTorch on CPU allocates and frees its activations, logits and KV buffers on every step, from several
threads, in sizes that vary with each batch.
- glibc's defaults (up to 8 arenas per core, a mmap threshold that adapts up to 32 MiB) fragment: a maze
  training run (studies/scripts/credit_study.py) grew many fully resident arena heaps (/proc/PID/smaps) and
  the machine thrashed.
- The glibc cap fixed that but makes every large buffer a fresh mmap whose pages the kernel faults in and
  zeroes, so training spent much of its time in the kernel.
- tcmalloc avoids both. The measurements (update time, kernel time and peak memory under each allocator)
  come from `bench/allocator.py`; its results are in bench/results/allocator.json and docs/features.md
  ("Allocator").

What this is not: a fix for real leaks (memory that is still referenced). Calls made in-process with an
explicit argv (tests) never re-execute; they get the glibc tuning.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Literal

Allocator = Literal["tcmalloc", "glibc", "system"]
CHOICES = ("auto", "tcmalloc", "glibc", "system")
ALLOCATOR_ENV = "AGENTRL_ALLOCATOR"
PRELOADED_ENV = "AGENTRL_PRELOADED"  # set on the re-executed process: the LD_PRELOAD to restore
TCMALLOC_GLOBS = (
    "/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
    "/usr/lib/libtcmalloc_minimal.so.4",
    "/usr/local/lib/libtcmalloc_minimal.so.4",
)
# tcmalloc prints a line for every allocation above this (default 1 GiB); the logits of a long batch pass it
TCMALLOC_REPORT_ENV = "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"
TCMALLOC_REPORT_BYTES = str(1 << 40)
M_ARENA_MAX = -8  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
ARENAS = 2
MMAP_THRESHOLD_BYTES = 1 << 20


def requested(environ: Mapping[str, str]) -> str:
    """The `AGENTRL_ALLOCATOR` setting; a value that is not one of CHOICES is an error that names them."""
    value = environ.get(ALLOCATOR_ENV, "auto") or "auto"
    if value not in CHOICES:
        raise SystemExit(f"{ALLOCATOR_ENV}={value!r} is not one of {', '.join(CHOICES)}")
    return value


def find_tcmalloc() -> str | None:
    """The path of libtcmalloc_minimal.so.4 on this machine, if any."""
    for pattern in TCMALLOC_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def loaded_libraries() -> str:
    """This process's memory map (the shared objects it has loaded); empty where there is no /proc."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return maps.read()
    except OSError:
        return ""


def preload_environment(environ: Mapping[str, str], library: str) -> dict[str, str]:
    """The environment to re-execute with: `library` first in LD_PRELOAD, the previous LD_PRELOAD kept in
    PRELOADED_ENV (so the new process can restore it, and knows not to re-execute again)."""
    before = environ.get("LD_PRELOAD", "")
    env = dict(environ)
    env["LD_PRELOAD"] = f"{library}:{before}" if before else library
    env[PRELOADED_ENV] = before
    env.setdefault(TCMALLOC_REPORT_ENV, TCMALLOC_REPORT_BYTES)
    return env


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment to start a Python child in that calls `choose_allocator()` after heavy imports (the
    credit study's run processes): already under tcmalloc where `choose_allocator` would re-execute it, so
    the child never imports torch twice; `environ` as it is otherwise (or when it is itself preloaded)."""
    library = find_tcmalloc() if requested(environ) in ("auto", "tcmalloc") else None
    if library is None or PRELOADED_ENV in environ:
        return dict(environ)
    return preload_environment(environ, library)


def restore_environment(environ: MutableMapping[str, str]) -> None:
    """Undo `preload_environment`'s LD_PRELOAD in the re-executed process, so its children start clean."""
    before = environ.pop(PRELOADED_ENV)
    if before:
        environ["LD_PRELOAD"] = before
    else:
        environ.pop("LD_PRELOAD", None)


def choose_allocator(reexec: bool = True) -> Allocator:
    """Pick this process's allocator as the module docstring says; returns the one in use. With `reexec`
    (the command-line entry points) it may replace this process by the same command under tcmalloc, and
    then does not return; without it (in-process calls) it never does."""
    choice = requested(os.environ)
    reexecuted = PRELOADED_ENV in os.environ  # this is the re-executed process: never again
    if reexecuted:
        restore_environment(os.environ)
    if choice == "system":
        return "system"
    if "libtcmalloc" in loaded_libraries():
        return "tcmalloc"
    library = find_tcmalloc() if choice in ("auto", "tcmalloc") else None
    if library and reexec and not reexecuted and sys.orig_argv:
        sys.stdout.flush()
        sys.stderr.flush()
        command = [sys.executable, *sys.orig_argv[1:]]
        os.execve(sys.executable, command, preload_environment(os.environ, library))
    if choice == "tcmalloc":
        reason = "it did not load" if library else "libtcmalloc_minimal.so.4 was not found"
        print(
            f"agentrl: {ALLOCATOR_ENV}=tcmalloc but {reason}; install libtcmalloc-minimal4 (`make setup`"
            " does); using tuned glibc",
            file=sys.stderr,
        )
    return "glibc" if tune_glibc() else "system"


def load_libc() -> ctypes.CDLL | None:
    """glibc through ctypes (errno kept for `ctypes.get_errno`), or None where the C library is not glibc
    (musl, macOS). Also used by `trainer.distributed.die_with_parent` (prctl)."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


def tune_glibc() -> bool:
    """Cap glibc at ARENAS arenas and mmap allocations of MMAP_THRESHOLD_BYTES or more; True when applied
    (False where the C library is not glibc)."""
    libc = load_libc()
    if libc is None:  # nothing to tune
        return False
    # a fixed M_MMAP_THRESHOLD also turns glibc's adaptive threshold off; mallopt returns 1 on success
    return bool(libc.mallopt(M_ARENA_MAX, ARENAS)) and bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )


def return_free_memory() -> str:
    """Give the pages the allocator holds free back to the operating system, so that memory a phase of a
    step freed (the engine's KV before the update, the update's activations and gradients after it) does
    not stay resident under the next phase's: tcmalloc's `MallocExtension_ReleaseFreeMemory` where tcmalloc
    is loaded, glibc's `malloc_trim(0)` otherwise. Returns which ran ("" where neither is there). The pages
    are faulted in again when next allocated (`update.return_free_memory`)."""
    process = ctypes.CDLL(None)  # the symbols of everything loaded, LD_PRELOAD's tcmalloc first
    release = getattr(process, "MallocExtension_ReleaseFreeMemory", None)
    if release is not None:
        release()
        return "tcmalloc"
    libc = load_libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
        return "glibc"
    return ""
