"""`agentrl.trainer.peak_memory.PeakMemory`: a phase's peak resident size sees memory taken and given back
inside the phase, also from a worker thread; the step's metrics name each phase and start afresh; a
`sub_phase` opened inside a phase (also in the worker thread `asyncio.to_thread` starts) is its own phase,
counted in the phase around it too, and nothing where no phase is open.

What this is not: a measurement of the trainer's memory (bench/memory.py).
"""

from __future__ import annotations

import asyncio
import mmap
import threading
import time

import numpy as np

from agentrl.trainer.peak_memory import PeakMemory, resident_mb, sub_phase


def resident_block(megabytes: int) -> mmap.mmap:
    """`megabytes` of fresh resident pages: an anonymous map of its own, written, so no allocator can serve
    it from memory that was already resident (a malloc'd block could be, and then the resident size does
    not move: CI once saw a 200 MB block leave it flat)."""
    block = mmap.mmap(-1, megabytes * 1024 * 1024)
    np.frombuffer(block, dtype=np.uint8)[:] = 1
    return block


def hold(megabytes: int, seconds: float) -> None:
    before = resident_mb()
    block = resident_block(megabytes)
    assert resident_mb() >= before + 0.75 * megabytes, "the block did not become resident"
    time.sleep(seconds)
    block.close()


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


def the_update() -> None:
    """What an update does in its worker thread: a sub-phase that ends holding memory (so its closing
    reading sees it, whatever the sampler's timing), given back before a sub-phase that holds none."""
    with sub_phase("update_backward"):
        block = resident_block(200)
    block.close()
    with sub_phase("update_optimizer"):
        time.sleep(0.05)


async def a_step(peaks: PeakMemory) -> None:
    with peaks.phase("update"):
        await asyncio.to_thread(the_update)


def test_sub_phases_inside_a_phase_are_their_own_phases_and_count_in_the_phase_around_them() -> None:
    peaks = PeakMemory(interval_s=0.005)
    try:
        before = resident_mb()
        asyncio.run(a_step(peaks))
        found = peaks.metrics()
        assert set(found) == {
            "memory/update_peak_mb",
            "memory/update_backward_peak_mb",
            "memory/update_optimizer_peak_mb",
            "memory/step_peak_mb",
        }
        assert found["memory/update_backward_peak_mb"] >= before + 150
        assert found["memory/update_optimizer_peak_mb"] < found["memory/update_backward_peak_mb"] - 100
        assert found["memory/update_peak_mb"] >= found["memory/update_backward_peak_mb"]
        assert found["memory/step_peak_mb"] == found["memory/update_peak_mb"]
    finally:
        peaks.close()


def test_a_sub_phase_with_no_phase_open_records_nothing() -> None:
    peaks = PeakMemory(interval_s=0.005)
    try:
        with sub_phase("update_forward"):
            hold(10, 0.01)
        assert peaks.metrics() == {}
    finally:
        peaks.close()
