"""How `make test`'s pytest-xdist workers share the CPU: each worker's PyTorch threads, and the order in which
the test files reach the workers.

What this is, for tests/conftest.py:
- `worker_threads(cores, environ)`: the intra-op threads a worker (and the `agentrl` processes it
  starts, through `OMP_NUM_THREADS`) should use: the cores (`usable_cores()`) shared out, at least one;
  None where the caller set `OMP_NUM_THREADS` itself or pytest runs in one process. Two workers that each
  run PyTorch's default of a thread per core on the same cores spin against each other
  (bench/cpu_contention.py: a 2-thread job beside one busy loop kept 0.27 of its speed, a 1-thread job
  alone 0.66); `make test`'s time with and without this is in docs/benchmarks.md, "How long `make test`
  takes".
- `long_files_first(tests)`: the order of the test files: those with a `slow` test (the real model, a
  training) first, then those with a `docker` test, then the rest (pure logic, mostly under a second a
  test), each group in collection order. With `--dist loadfile --no-loadscope-reorder` xdist hands the
  files out in this order, so the long files start early and the many short ones fill in at the end,
  instead of one long file running alone while the other worker waits (xdist's own reorder, by number of
  tests, puts the long files with one or two tests last).

What this is not: a scheduler (xdist's loadfile mode hands the files out) or a timing of the tests
(bench/make_test_time.py measures `make test`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

THREADS_ENV = "OMP_NUM_THREADS"
WORKER_COUNT_ENV = "PYTEST_XDIST_WORKER_COUNT"  # set by pytest-xdist in each worker


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_threads(cores: int, environ: Mapping[str, str]) -> int | None:
    """This worker's thread count (module docstring); None: leave PyTorch's default alone."""
    if THREADS_ENV in environ:
        return None
    try:
        workers = int(environ.get(WORKER_COUNT_ENV, "0"))
    except ValueError:
        return None
    if workers < 2:
        return None
    return max(1, cores // workers)


def start_rank(slow: bool, docker: bool) -> int:
    """0 for a slow test, 1 for a Docker test, 2 for the rest: how early its file should start."""
    return 0 if slow else 1 if docker else 2


def long_files_first(tests: Sequence[tuple[str, int]]) -> list[int]:
    """Indices of `tests` (each test's file and `start_rank`, in collection order) reordered so that the files
    come by their lowest rank, ties in collection order; a file's tests stay together and in their order."""
    start: dict[str, tuple[int, int]] = {}
    for index, (file, rank) in enumerate(tests):
        lowest, first = start.get(file, (rank, index))
        start[file] = (min(lowest, rank), first)
    return sorted(range(len(tests)), key=lambda index: (start[tests[index][0]], index))
