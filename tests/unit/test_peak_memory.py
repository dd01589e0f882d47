"""`agentrl.trainer.peak_memory.PeakMemory`: a phase's peak resident size sees memory taken and given back
inside the phase, also from a worker thread; the step's metrics name each phase and start afresh.

What this is not: a measurement of the trainer's memory (bench/memory.py).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from agentrl.trainer.peak_memory import PeakMemory, resident_mb


def hold(megabytes: int, seconds: float) -> None:
    block = np.ones(megabytes * 1024 * 1024 // 8)  # written, so resident
    time.sleep(seconds)
    del block


def test_a_phase_sees_a_peak_that_is_gone_by_its_end_even_from_another_thread() -> None:
    peaks = PeakMemory(interval_s=0.005)
    try:
        before = resident_mb()
        with peaks.phase("update"):
            worker = threading.Thread(target=hold, args=(200, 0.3))
            worker.start()
            worker.join()
        with peaks.phase("rollout"):
            time.sleep(0.05)
        found = peaks.metrics()
        assert set(found) == {"memory/update_peak_mb", "memory/rollout_peak_mb", "memory/step_peak_mb"}
        assert found["memory/update_peak_mb"] >= before + 150  # the 200 MB held inside the phase
        assert found["memory/rollout_peak_mb"] < found["memory/update_peak_mb"] - 100  # given back by then
        assert found["memory/step_peak_mb"] == found["memory/update_peak_mb"]
        assert peaks.metrics() == {}  # the next step starts afresh
    finally:
        peaks.close()
