"""A warm pool of started, hardened sandboxes for one image: acquire is a dequeue, reset is a discard.

What this is: `SandboxPool` keeps up to `PoolConfig.size` `DockerSandbox`es started (container running,
exec channel open) in a queue. Background threads refill it whenever it falls below `size` plus the number of
callers waiting; `acquire()` pops the oldest ready sandbox after a channel ping; `release()` hands the
sandbox to a background remover (never reused: reset by discard, so no state leaks between episodes).
Sandboxes idle longer than `max_idle_s` are replaced. Starting a pool first reaps orphans of its service left
by a process that died (see `reap_orphans`).

`shared_pool(...)` gives the process-wide pool for one (sandbox config, pool config, labels), started on
first use and closed by `close_shared_pools()` (the service's shutdown, and `atexit`): what envs use, so
every session of a service draws from the same warm containers.

What this is not: a scheduler across images (one pool per image/config) or a bound on live sandboxes held
by callers (a caller that never releases keeps its container until `close()` of that sandbox or its TTL).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import docker

from agentrl.errors import SandboxError, SandboxUnavailable
from agentrl.sandbox.base import StartClose
from agentrl.sandbox.docker import (
    DEFAULT_SERVICE,
    SERVICE_LABEL,
    DockerSandbox,
    docker_client,
    reap_orphans,
)
from agentrl.sandbox.limits import SandboxConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolConfig:
    """Sizes and time limits of one warm pool."""

    size: int = 4  # sandboxes kept started and waiting
    max_idle_s: float = 600.0  # a sandbox waiting longer than this is discarded and replaced
    refill_workers: int = 2  # threads starting containers in parallel (a start is mostly dockerd's work)
    remove_workers: int = 2  # threads removing released sandboxes
    acquire_timeout_s: float = 60.0  # acquire() gives up after this when no sandbox becomes ready
    retry_after_error_s: float = 1.0  # a refill thread waits this long after a failed start


class SandboxPool(StartClose):
    """Warm sandboxes of one `SandboxConfig`. Use as `with SandboxPool(...) as pool:` (or `async with`)."""

    def __init__(
        self,
        sandbox_config: SandboxConfig | None = None,
        config: PoolConfig | None = None,
        labels: Mapping[str, str] | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.sandbox_config = sandbox_config or SandboxConfig()
        self.config = config or PoolConfig()
        self.labels = dict(labels or {})
        self._client = client
        self._ready: collections.deque[tuple[float, DockerSandbox]] = collections.deque()
        self._starting = 0
        self._waiting = 0
        self._running = False
        self._last_error: SandboxError | None = None
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._remover = ThreadPoolExecutor(self.config.remove_workers, thread_name_prefix="sandbox-remove")

    @property
    def ready(self) -> int:
        """How many started sandboxes are waiting right now."""
        return len(self._ready)

    def start(self) -> None:
        """Reap this service's orphans, then start the refill threads (idempotent)."""
        if self._running:
            return
        self._client = self._client or docker_client()
        reaped = reap_orphans(self.labels.get(SERVICE_LABEL, DEFAULT_SERVICE), self._client)
        if reaped:
            logger.info("reaped %d orphaned sandbox containers", reaped)
        self._running = True
        for index in range(self.config.refill_workers):
            thread = threading.Thread(target=self._refill, name=f"sandbox-refill-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_ready(self, count: int | None = None, timeout_s: float = 60.0) -> bool:
        """Block until `count` (default: `size`) sandboxes are waiting; False on timeout."""
        target = self.config.size if count is None else count
        with self._cond:
            return self._cond.wait_for(lambda: len(self._ready) >= target, timeout_s)

    def acquire(self, timeout_s: float | None = None) -> DockerSandbox:
        """A started sandbox for one episode; call `release()` (or use `sandbox()`) when done."""
        deadline = time.monotonic() + (self.config.acquire_timeout_s if timeout_s is None else timeout_s)
        while True:
            sandbox = self._pop(deadline)
            if sandbox.alive():
                sandbox.restart_budget()
                return sandbox
            logger.warning("discarding a dead warm sandbox %s", sandbox.labels)
            self.release(sandbox)

    async def acquire_async(self, timeout_s: float | None = None) -> DockerSandbox:
        return await asyncio.to_thread(self.acquire, timeout_s)

    def release(self, sandbox: DockerSandbox) -> None:
        """Discard `sandbox` (its container is removed in the background, or now during interpreter exit)."""
        try:
            self._remover.submit(sandbox.close)
        except RuntimeError:  # the executor is shut down (atexit runs after concurrent.futures' own hook)
            sandbox.close()

    @contextmanager
    def sandbox(self) -> Iterator[DockerSandbox]:
        """`with pool.sandbox() as sandbox:` acquires one and discards it afterwards."""
        sandbox = self.acquire()
        try:
            yield sandbox
        finally:
            self.release(sandbox)

    def fork(self, sandbox: DockerSandbox) -> DockerSandbox:
        """A sandbox from the pool whose workdir is a copy of `sandbox`'s (see `DockerSandbox.fork`)."""
        return sandbox.fork(target=self.acquire())

    def close(self) -> None:
        """Stop refilling, remove every waiting sandbox and wait for pending removals."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        while self._ready:
            self.release(self._ready.popleft()[1])
        self._remover.shutdown(wait=True)
        self._remover = ThreadPoolExecutor(self.config.remove_workers, thread_name_prefix="sandbox-remove")

    def _pop(self, deadline: float) -> DockerSandbox:
        with self._cond:
            if not self._running:
                raise SandboxUnavailable(
                    "the pool is not started; call start() or use it as a context manager"
                )
            self._waiting += 1
            self._cond.notify_all()
            try:
                while not self._ready:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxUnavailable(self._no_sandbox_message())
                    self._cond.wait(left)
                self._cond.notify_all()  # a refill thread may start the replacement now
                return self._ready.popleft()[1]
            finally:
                self._waiting -= 1

    def _no_sandbox_message(self) -> str:
        cause = f" (last start failed: {self._last_error})" if self._last_error else ""
        return f"no sandbox became ready within the acquire timeout{cause}; check `docker info` and images"

    def _refill(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._wants_more():
                    self._discard_idle()
                    self._cond.wait(timeout=min(self.config.max_idle_s, 5.0))
                if not self._running:
                    return
                self._starting += 1
            sandbox = self._start_one()
            with self._cond:
                self._starting -= 1
                if sandbox is not None and self._running:
                    self._ready.append((time.monotonic(), sandbox))
                elif sandbox is not None:
                    self.release(sandbox)
                self._cond.notify_all()
            if sandbox is None:
                time.sleep(self.config.retry_after_error_s)

    def _wants_more(self) -> bool:
        return len(self._ready) + self._starting < self.config.size + self._waiting

    def _discard_idle(self) -> None:
        now = time.monotonic()
        while self._ready and now - self._ready[0][0] > self.config.max_idle_s:
            self.release(self._ready.popleft()[1])

    def _start_one(self) -> DockerSandbox | None:
        sandbox = DockerSandbox(self.sandbox_config, self.labels, self._client)
        try:
            sandbox.start()
        except Exception as error:  # noqa: BLE001 - any failure must not kill the refill thread
            logger.warning("could not start a warm sandbox: %s", error)
            sandbox.close()
            self._last_error = error if isinstance(error, SandboxError) else SandboxUnavailable(repr(error))
            return None
        self._last_error = None
        return sandbox


_shared: dict[tuple[SandboxConfig, PoolConfig, tuple[tuple[str, str], ...]], SandboxPool] = {}
_shared_lock = threading.Lock()


def shared_pool(
    sandbox_config: SandboxConfig, config: PoolConfig, labels: Mapping[str, str] | None = None
) -> SandboxPool:
    """The process-wide started pool for these settings (created and started on the first call)."""
    key = (sandbox_config, config, tuple(sorted((labels or {}).items())))
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            pool = SandboxPool(sandbox_config, config, labels)
            pool.start()
            if not _shared:
                atexit.register(close_shared_pools)
            _shared[key] = pool
        return pool


def acquire_sandbox(
    config: SandboxConfig, labels: Mapping[str, str], pool_size: int, task: str | None = None
) -> DockerSandbox:
    """An env's sandbox for one episode: a dequeue from the process-wide warm pool when `pool_size` > 0,
    else a freshly started container (labelled with `task`, when given). Give it back with
    `discard_sandbox` and the same settings."""
    if pool_size > 0:
        return shared_pool(config, PoolConfig(size=pool_size), labels).acquire()
    sandbox = DockerSandbox(config, {**labels, **({"agentrl.task": task} if task else {})})
    sandbox.start()
    return sandbox


def discard_sandbox(
    sandbox: DockerSandbox, config: SandboxConfig, labels: Mapping[str, str], pool_size: int
) -> None:
    """End an episode's sandbox: reset by discard, never reused (removed in the background when pooled)."""
    if pool_size > 0:
        shared_pool(config, PoolConfig(size=pool_size), labels).release(sandbox)
    else:
        sandbox.close()


def close_shared_pools() -> int:
    """Close every pool `shared_pool` made (waiting sandboxes are removed); returns how many."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()
    return len(pools)
