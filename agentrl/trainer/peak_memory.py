"""Where a training step's memory goes: the peak resident size (and on CUDA the peak allocated memory) of
each phase of a step, as metrics.

What this is: `PeakMemory`, a sampler of this process's resident set size (/proc/self/statm, every
`interval_s` on a daemon thread, so a phase that runs in a worker thread is covered too) and `phase(name)`,
a context manager that records the highest sample (and `torch.cuda.max_memory_allocated` since its start)
while it is open. `metrics()` gives `memory/<phase>_peak_mb` for each phase of the step (and
`memory/<phase>_cuda_peak_mb` on CUDA) and `memory/step_peak_mb`, then starts the next step afresh. The
training loop opens a phase around the rollouts (with credit) and one around the update (with the weights'
way back into the engine); phases nest, and code inside an open phase opens its own with `sub_phase(name)`
(the sampler open there, found through a context variable that `asyncio.to_thread` carries into the
update's worker thread; a no-op where none is open): the update's old log-probs pass, each micro batch's
forward and backward, the optimiser step and the weights' sync. The metrics go to metrics.jsonl, the store
and the viewer like any other.

What this is not: an allocation profiler (it does not say which tensor holds the memory: bench/memory.py
and the allocator's own statistics do that) or a limit (nothing is refused for using memory).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path

import torch

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MB = 1024 * 1024


def resident_mb() -> float:
    """This process's resident set size in MB (0 where /proc is not there)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * PAGE_BYTES / MB


class PeakMemory:
    """Peaks of the resident size per phase of a step (module docstring)."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self._open: dict[str, float] = {}  # each open phase's peak so far
        self._open_cuda: dict[str, float] = {}
        self._phases: dict[str, float] = {}
        self._cuda: dict[str, float] = {}
        self._lock = threading.Lock()
        self._active = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            if self._active.wait(timeout=0.5):
                value = resident_mb()
                with self._lock:
                    self._open = {name: max(peak, value) for name, peak in self._open.items()}
                self._stop.wait(self.interval_s)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)
            self._thread.start()

    def _fold_cuda(self) -> None:
        """The CUDA peak since the last reset into every open phase (before a nested phase resets it)."""
        allocated = torch.cuda.max_memory_allocated() / MB
        self._open_cuda = {name: max(peak, allocated) for name, peak in self._open_cuda.items()}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak resident size (and CUDA allocation) while the block runs, as phase `name`; the
        phases open around it keep counting it too."""
        self._start()
        cuda = torch.cuda.is_available()
        if cuda:
            self._fold_cuda()
            self._open_cuda[name] = 0.0
            torch.cuda.reset_peak_memory_stats()
        with self._lock:
            self._open[name] = resident_mb()
        self._active.set()
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            value = resident_mb()
            with self._lock:
                self._open = {other: max(peak, value) for other, peak in self._open.items()}
                peak = self._open.pop(name)
                if not self._open:
                    self._active.clear()
            self._phases[name] = max(self._phases.get(name, 0.0), peak)
            if cuda:
                self._fold_cuda()
                self._cuda[name] = max(self._cuda.get(name, 0.0), self._open_cuda.pop(name))

    def metrics(self) -> dict[str, float]:
        """This step's `memory/...` metrics; the next step starts afresh."""
        found = {f"memory/{name}_peak_mb": round(value, 1) for name, value in self._phases.items()}
        found.update({f"memory/{name}_cuda_peak_mb": round(value, 1) for name, value in self._cuda.items()})
        if self._phases:
            found["memory/step_peak_mb"] = round(max(self._phases.values()), 1)
        self._phases, self._cuda = {}, {}
        return found

    def close(self) -> None:
        self._stop.set()
        self._active.set()  # wake the sampler so it sees the stop
        if self._thread is not None:
            self._thread.join(timeout=2.0)


_CURRENT: ContextVar[PeakMemory | None] = ContextVar("agentrl_peak_memory", default=None)


def sub_phase(name: str) -> AbstractContextManager[None]:
    """Phase `name` of the sampler whose phase is open around this code (module docstring); nothing where
    none is (a bare `ppo_update`, a test)."""
    peaks = _CURRENT.get()
    return peaks.phase(name) if peaks is not None else nullcontext()
