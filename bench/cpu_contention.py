"""How much a second, `nice`d process slows a 2-thread torch job on this machine (why a study slowed down).

What this is: a ratio measurement. One fixed torch workload (fp32 matmuls the size of SmolLM2-135M's MLP
over a short batch, `torch.set_num_threads(T)`) is timed alone and then beside one CPU-bound busy loop
started at a given `nice` level, in the same run, several rounds each; the report gives each setting's
throughput as a ratio to the first setting's. The question it answers: with 2 cores and the study's torch
job on both, does a `nice 19` neighbour cost the job only the little CPU time the scheduler gives it, or
more (a thread of the job waiting at every parallel region for its other thread, which the neighbour
delays)?

What this is not: a model benchmark (no engine, no trainer), nor a measure of memory-bandwidth contention
(the busy loop touches no memory).

    .venv/bin/python bench/cpu_contention.py            # -> bench/results/cpu_contention.json
    .venv/bin/python bench/cpu_contention.py --rounds 2 --repeats 50 --out -   # print only
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import harness
import torch

BUSY_LOOP = "while True:\n    pass\n"
SETTINGS = (  # (name, torch threads, neighbour's nice level or None for no neighbour)
    ("alone, 2 threads", 2, None),
    ("beside a nice 19 busy loop, 2 threads", 2, 19),
    ("beside a nice 0 busy loop, 2 threads", 2, 0),
    ("alone, 1 thread", 1, None),
    ("beside a nice 19 busy loop, 1 thread", 1, 19),
)


def workload_s(threads: int, repeats: int) -> float:
    """Seconds for `repeats` passes of x @ W1 -> @ W2 (576 -> 1536 -> 576, 64 rows), fp32."""
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 576, generator=generator)
    w1, w2 = torch.randn(576, 1536, generator=generator), torch.randn(1536, 576, generator=generator)
    for _ in range(20):  # warm-up
        (x @ w1).relu_() @ w2
    start = time.perf_counter()
    for _ in range(repeats):
        (x @ w1).relu_() @ w2
    return time.perf_counter() - start


def with_neighbour(nice: int | None, threads: int, repeats: int) -> float:
    if nice is None:
        return workload_s(threads, repeats)
    neighbour = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(0.5)
        return workload_s(threads, repeats)
    finally:
        neighbour.kill()
        neighbour.wait()


def measure(rounds: int, repeats: int) -> dict[str, object]:
    times: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
    for _ in range(rounds):  # interleaved, so drift in the machine's load hits every setting alike
        for name, threads, nice in SETTINGS:
            times[name].append(with_neighbour(nice, threads, repeats))
    baseline = sorted(times[SETTINGS[0][0]])[rounds // 2]
    rows = {}
    for name, values in times.items():
        median = sorted(values)[rounds // 2]
        rows[name] = {"median_s": round(median, 4), "throughput_vs_first": round(baseline / median, 3)}
    return {
        "command": "bench/cpu_contention.py " + " ".join(sys.argv[1:]),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "rounds": rounds,
        "repeats": repeats,
        "settings": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=300)
    harness.add_out_argument(parser, "cpu_contention")
    args = parser.parse_args()
    report = measure(args.rounds, args.repeats)
    baseline = "the first setting (alone, 2 threads), its rounds interleaved with the others' in the same run"
    harness.emit("cpu_contention", report, baseline=baseline, out=harness.out_path(args, "cpu_contention"))


if __name__ == "__main__":
    main()
