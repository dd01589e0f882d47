"""The retriever as the env uses it: one sandbox per process shared by its episodes, queried over exec.

What this is: `shared_retriever(config, labels)` returns the process-wide `SandboxRetriever` for those
settings, which starts its container (image `agentrl/sandbox-search`, network none, read-only root, the
usual limits) on the first query. The image bakes the index in at /opt/search/index and its entrypoint
starts `retriever.py serve` when the container starts, so the index is loaded once per container, not per
query. `search(query, k)` is one exec of the stdlib-only client /opt/search/ask.py (a `python3 -I -S`
start plus a unix-socket round trip to the server) with the request on stdin. The container lives while
any episode that has searched is open (leases, see `SandboxRetriever`): about one start per batch of
concurrent episodes.

Why one container for all episodes rather than one per episode (as the calc env's python tool has): the
retriever holds no per-episode state and the agent never runs code in it — its query is data, passed as
JSON on stdin — so a fresh container per episode would isolate nothing, while each would load numpy,
bm25s and the index again, a start-up cost paid per episode instead of per process. Queries from concurrent
episodes are serialised by the exec channel's lock.

Why the index is baked in rather than copied in at reset: copying it per container costs its size in
channel traffic each time, and a corpus the size of Wikipedia does not fit the sandbox's tmpfs at all.
Users bake their own index with `SEARCH_CORPUS=their.jsonl bash sandboxes/search/build.sh`.

What this is not: a pool. A container that dies (TTL, crash) is replaced on the next query; the query that
found it dead raises `SandboxLost`, an infrastructure failure the runner retries, never a reward of 0.
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Mapping
from typing import Any

from agentrl.errors import ConfigError, SandboxLost
from agentrl.sandbox.docker import DockerSandbox, reap_orphans
from agentrl.sandbox.limits import SandboxConfig

IMAGE = "agentrl/sandbox-search:latest"
ASK = ["python3", "-I", "-S", "/opt/search/ask.py"]
QUERY_ONCE = ["python3", "/opt/search/retriever.py", "query", "--index", "/opt/search/index"]
DEFAULT_SANDBOX = SandboxConfig(image=IMAGE, memory="512m", output_limit_bytes=1 << 18)


class SandboxRetriever:
    """A retriever container, started on the first query; `search` is safe to call from several threads.

    Envs hold a lease (`acquire` / `release`) from their first search until they close: the last lease
    released removes the container, so a service that shuts down (closing its sessions) leaves none behind
    even when its process then dies of the signal that stopped it (atexit alone would not run).
    """

    def __init__(self, config: SandboxConfig, labels: Mapping[str, str]) -> None:
        self.config = config
        self.labels = dict(labels)
        self._sandbox: DockerSandbox | None = None
        self._lock = threading.Lock()
        self._leases = 0
        self._reaped = False

    def acquire(self) -> None:
        with self._lock:
            self._leases += 1

    def release(self) -> None:
        """Give a lease back; the last one removes the container (the next search starts another)."""
        with self._lock:
            self._leases = max(0, self._leases - 1)
            if self._leases:
                return
            sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    @property
    def started(self) -> bool:
        return self._sandbox is not None

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The top-k passages for `query`, best first; `SandboxError` when the retriever cannot answer."""
        return self.request({"query": query, "k": k}, ASK)

    def request(self, request: Mapping[str, Any], command: list[str]) -> list[dict[str, Any]]:
        sandbox = self.sandbox()
        result = sandbox.exec(command, stdin=json.dumps(request))
        try:
            reply = json.loads(result.stdout) if result.exit_code == 0 and not result.truncated else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or "hits" not in reply:
            self._drop(sandbox)
            problem = (reply or {}).get("error") if isinstance(reply, dict) else None
            detail = problem or (result.stderr or result.stdout)[-500:] or f"exit code {result.exit_code}"
            raise SandboxLost(
                f"the retriever sandbox did not answer ({detail}); the next query starts a new one"
            )
        return list(reply["hits"])

    def sandbox(self) -> DockerSandbox:
        """The live container, started (or replaced, if it died) under the lock."""
        with self._lock:
            if self._sandbox is not None and not self._sandbox.alive():
                self._sandbox.close()
                self._sandbox = None
            if self._sandbox is None:
                if not self._reaped:  # containers of processes that died before they could remove theirs
                    reap_orphans()
                    self._reaped = True
                sandbox = DockerSandbox(self.config, self.labels)
                sandbox.start()
                self._sandbox = sandbox
            return self._sandbox

    def close(self) -> None:
        with self._lock:
            sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    def _drop(self, sandbox: DockerSandbox) -> None:
        with self._lock:
            if self._sandbox is sandbox:
                self._sandbox = None
        sandbox.close()


_shared: dict[tuple[SandboxConfig, tuple[tuple[str, str], ...]], SandboxRetriever] = {}
_shared_lock = threading.Lock()


def shared_retriever(config: SandboxConfig, labels: Mapping[str, str]) -> SandboxRetriever:
    """The process-wide retriever for these settings (its container starts on the first query)."""
    key = (config, tuple(sorted(labels.items())))
    with _shared_lock:
        retriever = _shared.get(key)
        if retriever is None:
            if not _shared:
                atexit.register(close_shared_retrievers)
            retriever = _shared[key] = SandboxRetriever(config, labels)
        return retriever


def close_shared_retrievers() -> int:
    """Remove every shared retriever's container; returns how many retrievers there were."""
    with _shared_lock:
        retrievers = list(_shared.values())
        _shared.clear()
    for retriever in retrievers:
        retriever.close()
    return len(retrievers)


def sandbox_config(value: SandboxConfig | Mapping[str, Any] | None) -> SandboxConfig:
    """The env's `sandbox` kwarg: a SandboxConfig, a mapping of its fields (from a YAML config), or None."""
    if value is None or isinstance(value, SandboxConfig):
        return value or DEFAULT_SANDBOX
    try:
        return SandboxConfig(**{**_fields(DEFAULT_SANDBOX), **dict(value)})
    except TypeError as error:
        raise ConfigError(f"bad env.kwargs.sandbox {dict(value)!r}: {error}; see SandboxConfig") from error


def _fields(config: SandboxConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}
