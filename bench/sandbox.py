"""Benchmark of the sandbox layer against a real Docker engine; prints ONE JSON object.

    .venv/bin/python bench/sandbox.py            # full: larger counts, 256 live sandboxes at once
    .venv/bin/python bench/sandbox.py --quick    # a few seconds of work, 16 live sandboxes; exits 1 when a
                                                 # target is missed grossly (see QUICK_LIMITS)

Keys (milliseconds unless named otherwise; p50/p95/p99 are nearest-rank percentiles):
- `cold_start_p50_ms`, `cold_start_p95_ms`: a new hardened container plus its exec channel, ready to run;
- `acquire_p50_ms`: `SandboxPool.acquire()` from a warm pool (the pool is refilled between samples);
- `exec_p50_ms`, `exec_p99_ms`: `sandbox.exec(["true"])` through the persistent channel, host wall time,
  over the default transport (`exec_transport`: "socket" with a local engine); `exec_attach_p50_ms`: the
  same through the engine's attach stream (`SandboxConfig(channel="attach")`), measured in the same run;
- `docker_exec_p50_ms`: the baseline, `true` through a fresh `docker exec` (exec_create + exec_start +
  exec_inspect over the API, as the walking skeleton did), measured in the same run;
  `exec_speedup_vs_docker_exec` is their ratio; `exec_inner_p50_ms` is the channel server's own time for the
  command (process spawn and reap inside the container);
- `fork_p50_ms`: `pool.fork(sandbox)` of a sandbox with a small workdir (warm target + a copy of the workdir);
  `commit_p50_ms`: `docker commit` of a running sandbox, the alternative (it would still need a cold start,
  and it cannot see the tmpfs workdir at all);
- `max_concurrent`: sandboxes started and held at once, each answering a command, without any error (the
  probe stops at `concurrency_probe`); `mem_per_sandbox_mb`: mean memory cgroup usage of those containers
  (their processes plus tmpfs/page cache); `host_mem_per_sandbox_mb`: the drop of the host's MemAvailable
  per sandbox (includes the engine's per-container shim); noisy on a shared machine.
- `load_avg_1m` at the start: the machine is shared, so read every figure next to it.

What this is not: a test of isolation (tests/integration/test_sandbox_security.py is) or of the env service.
Every container it starts carries this process as `agentrl.owner` and is removed at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import docker
import harness

from agentrl.sandbox.docker import OWNER_LABEL, DockerSandbox, docker_client, owner, reap
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import PoolConfig, SandboxPool

CGROUP_MEMORY = "/sys/fs/cgroup/memory/docker/{}/memory.usage_in_bytes"  # cgroup v1, cgroupfs driver
QUICK_LIMITS = {  # loose: the targets are 1 ms, 30 ms, 50x; these catch gross regressions only
    "exec_p50_ms": 10.0,
    "acquire_p50_ms": 150.0,
    "exec_speedup_vs_docker_exec": 5.0,
    "fork_p50_ms": 1000.0,
}


@dataclass(frozen=True)
class Counts:
    cold_starts: int
    acquires: int
    execs: int
    docker_execs: int
    forks: int
    commits: int
    concurrency: int
    start_threads: int


QUICK = Counts(
    cold_starts=3, acquires=5, execs=300, docker_execs=10, forks=3, commits=1, concurrency=16, start_threads=4
)
FULL = Counts(
    cold_starts=10,
    acquires=20,
    execs=3000,
    docker_execs=40,
    forks=10,
    commits=3,
    concurrency=256,
    start_threads=6,
)


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile of `samples` in milliseconds (samples in seconds); pure."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return round(ordered[index] * 1000, 3)


def timed(action: Callable[[], Any], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def bench_cold_start(client: docker.DockerClient, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        sandbox = DockerSandbox(SandboxConfig(), client=client)
        started = time.perf_counter()
        sandbox.start()
        samples.append(time.perf_counter() - started)
        sandbox.close()
    return samples


def bench_exec(client: docker.DockerClient, counts: Counts) -> dict[str, Any]:
    with DockerSandbox(SandboxConfig(), client=client) as sandbox:
        transport = sandbox.transport
        timed(lambda: sandbox.exec(["true"]), 20)  # warm up
        channel = timed(lambda: sandbox.exec(["true"]), counts.execs)
        inner = [entry.duration_s for entry in sandbox.exec_log[-counts.execs :]]
        baseline = timed(lambda: docker_exec_true(client, sandbox.container_id), counts.docker_execs)
    with DockerSandbox(SandboxConfig(channel="attach"), client=client) as attached:
        timed(lambda: attached.exec(["true"]), 20)
        through_engine = timed(lambda: attached.exec(["true"]), counts.execs)
    exec_p50, docker_p50 = percentile(channel, 0.5), percentile(baseline, 0.5)
    return {
        "exec_transport": transport,
        "exec_p50_ms": exec_p50,
        "exec_p99_ms": percentile(channel, 0.99),
        "exec_inner_p50_ms": percentile(inner, 0.5),
        "exec_attach_p50_ms": percentile(through_engine, 0.5),
        "docker_exec_p50_ms": docker_p50,
        "exec_speedup_vs_docker_exec": round(docker_p50 / exec_p50, 1),
    }


def docker_exec_true(client: docker.DockerClient, container_id: str) -> int:
    """`docker exec <container> true` through the API, the way the walking skeleton ran each tool call."""
    exec_id = client.api.exec_create(container_id, ["true"], user="1000:1000")["Id"]
    client.api.exec_start(exec_id)
    while (state := client.api.exec_inspect(exec_id))["Running"]:
        time.sleep(0.001)
    return int(state["ExitCode"])


def bench_pool(client: docker.DockerClient, counts: Counts) -> dict[str, float]:
    with SandboxPool(SandboxConfig(), PoolConfig(size=2), client=client) as pool:
        acquires = []
        for _ in range(counts.acquires):
            pool.wait_ready(timeout_s=120)
            started = time.perf_counter()
            sandbox = pool.acquire()
            acquires.append(time.perf_counter() - started)
            pool.release(sandbox)
        forks = []
        with pool.sandbox() as parent:
            parent.exec("mkdir -p repo && for i in $(seq 20); do head -c 4096 /dev/urandom > repo/f$i; done")
            for _ in range(counts.forks):
                pool.wait_ready(timeout_s=120)
                started = time.perf_counter()
                child = pool.fork(parent)
                forks.append(time.perf_counter() - started)
                pool.release(child)
            commits = timed(lambda: commit_and_remove(client, parent.container_id), counts.commits)
    return {
        "acquire_p50_ms": percentile(acquires, 0.5),
        "fork_p50_ms": percentile(forks, 0.5),
        "commit_p50_ms": percentile(commits, 0.5),
    }


def commit_and_remove(client: docker.DockerClient, container_id: str) -> None:
    image = client.api.commit(container_id, repository="agentrl/bench-commit", tag=f"{os.getpid()}")
    client.api.remove_image(image["Id"], force=True)


def bench_concurrency(client: docker.DockerClient, counts: Counts) -> dict[str, Any]:
    available_before = host_available_bytes()
    sandboxes: list[DockerSandbox] = []
    errors: list[str] = []

    def start_one(_: int) -> None:
        sandbox = DockerSandbox(SandboxConfig(), client=client)
        try:
            sandbox.start()
            sandboxes.append(sandbox)
            if sandbox.exec(["true"]).exit_code != 0:
                errors.append("exec failed")
        except Exception as error:  # noqa: BLE001 - counted, the probe reports how many succeeded
            errors.append(repr(error))

    try:
        with ThreadPoolExecutor(counts.start_threads) as executor:
            list(executor.map(start_one, range(counts.concurrency)))
        alive = sum(1 for sandbox in sandboxes if sandbox.alive())
        memory = [cgroup_memory(sandbox.container_id) for sandbox in sandboxes]
        held = len(sandboxes)
        host_drop = (available_before - host_available_bytes()) / max(1, held) / 2**20
    finally:
        with ThreadPoolExecutor(counts.start_threads) as executor:
            list(executor.map(lambda sandbox: sandbox.close(), sandboxes))
    known = [value for value in memory if value is not None]
    return {
        "max_concurrent": alive,
        "concurrency_probe": counts.concurrency,
        "concurrency_errors": errors[:5],
        "mem_per_sandbox_mb": round(sum(known) / len(known) / 2**20, 1) if known else None,
        "host_mem_per_sandbox_mb": round(host_drop, 1),
    }


def cgroup_memory(container_id: str) -> int | None:
    try:
        with open(CGROUP_MEMORY.format(container_id)) as handle:
            return int(handle.read())
    except OSError:
        return None


def host_available_bytes() -> int:
    with open("/proc/meminfo") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return int(fields["MemAvailable"].split()[0]) * 1024


def check(results: dict[str, Any], counts: Counts) -> list[str]:
    """The quick-mode targets that were missed grossly; pure."""
    failures = [
        f"{key}={results[key]} (limit {limit})"
        for key, limit in QUICK_LIMITS.items()
        if (results[key] < limit if key.endswith("_vs_docker_exec") else results[key] > limit)
    ]
    if results["max_concurrent"] < counts.concurrency:
        failures.append(f"max_concurrent={results['max_concurrent']} < {counts.concurrency}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts; exit 1 on a gross miss")
    harness.add_out_argument(parser, "sandbox")
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    client = docker_client()
    client.api.timeout = 120
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "load_avg_1m": os.getloadavg()[0]}
    try:
        cold = bench_cold_start(client, counts.cold_starts)
        results["cold_start_p50_ms"] = percentile(cold, 0.5)
        results["cold_start_p95_ms"] = percentile(cold, 0.95)
        results.update(bench_pool(client, counts))
        results.update(bench_exec(client, counts))
        results.update(bench_concurrency(client, counts))
    finally:
        reap({OWNER_LABEL: owner()}, client)
    failures = check(results, counts) if args.quick else []
    results["failures"] = failures
    baseline = "a cold container start, same run (the pool's and exec's figures are absolute)"
    harness.emit("sandbox", results, baseline=baseline, out=harness.out_path(args, "sandbox"), argv=argv)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
