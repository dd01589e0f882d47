"""The env fleet on a Ray cluster: env-service replicas as Ray actors on the nodes that run Docker.

What this is:
- `fleet_up`: K replicas on every live node that carries the Ray custom resource `agentrl_env` (mark the
  nodes that have a Docker engine: `ray start ... --resources '{"agentrl_env": 1}'`, or the same in a
  KubeRay worker group's `rayStartParams`). Each replica is a detached, named actor (`env-<i>` in the
  namespace `agentrl-fleet`) whose process runs the ordinary env service as a child
  (`agentrl.service.embedded.EmbeddedService`: the same one `agentrl train` embeds) on its node's address
  and a free port, with the fleet's token. It is placed on its node with a soft node affinity and
  `max_restarts=-1`, so when its node dies Ray restarts it on another marked node, where it serves on a
  new address. The child exits with its actor (it watches its parent), so a dead actor never leaves a
  service behind; a service that dies without its shutdown (its machine did) leaves its sandboxes to the
  orphan reaper of every live replica on the same Docker engine (`agentrl.service.cleanup`).
- `fleet_status`, `fleet_down`: every replica, where it serves and whether it answers; kill them all.
- `RayReplicas`: how the trainer finds the fleet (`service.fleet=ray`): the URLs of the replicas that
  answer now. `EnvClient` asks again when no replica it knows can take a session and every
  `ClientConfig.rediscover_s`, so a restarted replica takes sessions again.

What this is not: a load balancer (the client spreads sessions, pins each to its replica, and the runner
re-plays the episodes a dead replica held), or a Ray dependency of the rest of agentrl: ray is imported
only inside this module's functions, when a fleet is used (`pip install 'agentrl[ray]'`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError, ServiceUnavailable
from agentrl.wire import TOKEN_ENV

NAMESPACE = "agentrl-fleet"
RESOURCE = "agentrl_env"  # the custom resource that marks a node able to host replicas (it has Docker)
REPLICA_PREFIX = "env-"
PER_REPLICA = 0.001  # of RESOURCE: any marked node fits many replicas, an unmarked one none
INSTALL_HINT = "pip install 'agentrl[ray]'"


@dataclass(frozen=True)
class FleetSpec:
    """What `agentrl fleet up` starts.

    address:            the Ray cluster, as `ray.init` takes it: "HOST:PORT" (the head's GCS, what
                        `ray start --address` takes), "ray://HOST:10001" (Ray Client) or "auto"
    replicas_per_node:  env-service replicas on each node carrying `agentrl_env`
    max_sessions:       each replica's session cap (the service's `--max-sessions`; None: its default)
    preload:            modules each replica imports at start (env plugins outside the installed ones)
    env_kwargs:         {env id: kwargs} for every replica (the service's `--env-kwargs`)
    startup_timeout_s:  how long a replica may take to answer /healthz
    log_dir:            each replica's service log, on its node (default: the node's temp dir)
    """

    address: str = "auto"
    replicas_per_node: int = 1
    max_sessions: int | None = None
    preload: tuple[str, ...] = ()
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    startup_timeout_s: float = 120.0
    log_dir: str | None = None


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica as `fleet_status` sees it: its actor name, and where it serves if it answered."""

    name: str
    url: str | None = None
    node_id: str | None = None
    pid: int | None = None  # the actor's process
    service_pid: int | None = None  # its env service child: the owner its sandboxes name
    error: str | None = None  # why it did not answer (restarting, dead, ...)


class ReplicaActor:
    """The body of a replica actor (`ray.remote` is applied when the fleet starts): an env service child
    on this node's address, started in the constructor, so that a restart starts a fresh one."""

    def __init__(self, name: str, spec: FleetSpec) -> None:
        import ray

        from agentrl.service.embedded import EmbeddedService

        host = ray.util.get_node_ip_address()
        log_dir = Path(spec.log_dir or tempfile.gettempdir()) / "agentrl-fleet"
        self.node_id = ray.get_runtime_context().get_node_id()
        self.service = EmbeddedService(
            log_dir / f"{name}-{os.getpid()}.log",
            preload=spec.preload,
            env_kwargs=spec.env_kwargs,
            startup_timeout_s=spec.startup_timeout_s,
            host=host,
            extra_args=max_sessions_args(spec.max_sessions),
        )
        self.service.start()

    def where(self) -> dict[str, Any]:
        where = {"url": self.service.url, "node_id": self.node_id, "pid": os.getpid()}
        return {**where, "service_pid": self.service.pid}

    def stop(self) -> None:
        self.service.stop()


def max_sessions_args(max_sessions: int | None) -> tuple[str, ...]:
    return () if max_sessions is None else ("--max-sessions", str(max_sessions))


def connect(address: str) -> Any:
    """`ray` connected to the cluster at `address` in the fleet's namespace (once per process)."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"the Ray env fleet needs ray: {INSTALL_HINT}") from exc
    if not ray.is_initialized():
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        except ConnectionError as exc:
            raise ServiceUnavailable(
                f"cannot reach the Ray cluster at {address!r}: {exc}. Start it (`ray start --head`) or pass "
                "the head's address (HOST:PORT, as `ray start --address` takes it)"
            ) from exc
    return ray


def marked_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the live nodes that carry the `agentrl_env` resource (`ray.nodes()` rows), in order."""
    return [
        str(node["NodeID"])
        for node in nodes
        if node.get("Alive") and float(node.get("Resources", {}).get(RESOURCE, 0.0)) > 0.0
    ]


def replica_names(existing: Sequence[str]) -> list[str]:
    """The fleet's actor names among `existing` (all named actors of the namespace), sorted by index."""
    ours = [name for name in existing if name.startswith(REPLICA_PREFIX)]
    return sorted(ours, key=lambda name: int(name.removeprefix(REPLICA_PREFIX) or 0))


def existing_replicas(ray: Any) -> list[str]:
    return replica_names([str(entry) for entry in ray.util.list_named_actors()])


def fleet_up(spec: FleetSpec) -> list[ReplicaInfo]:
    """Start `replicas_per_node` replicas on every marked node; wait until each answers."""
    if spec.replicas_per_node < 1:
        raise ConfigError(f"--replicas-per-node must be at least 1, got {spec.replicas_per_node}")
    ray = connect(spec.address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    running = existing_replicas(ray)
    if running:
        raise ConfigError(
            f"a fleet is already up on this cluster ({len(running)} replicas): `agentrl fleet status` shows "
            "it, `agentrl fleet down` stops it"
        )
    nodes = marked_nodes(ray.nodes())
    if not nodes:
        raise ConfigError(
            f"no live Ray node carries the resource {RESOURCE!r}: start the nodes that have a Docker engine "
            f"with `ray start --address HEAD:PORT --resources '{{\"{RESOURCE}\": 1}}'`"
        )
    remote = ray.remote(ReplicaActor)
    placement = [node for node in nodes for _ in range(spec.replicas_per_node)]
    handles = []
    for index, node in enumerate(placement):
        name = f"{REPLICA_PREFIX}{index}"
        options = remote.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            resources={RESOURCE: PER_REPLICA},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=True),
            runtime_env=replica_runtime_env(),
        )
        handles.append((name, options.remote(name, spec)))
    # Ray starts a node's worker processes a few at a time (as many as it has CPUs), so a node's replicas
    # may come up one after another: wait for them all against one deadline
    deadline = time.monotonic() + spec.startup_timeout_s * spec.replicas_per_node + 30.0
    return [describe(ray, name, handle, max(1.0, deadline - time.monotonic())) for name, handle in handles]


def replica_runtime_env() -> dict[str, Any]:
    """The token goes to every replica's service through its actor's environment (when one is set here)."""
    token = os.environ.get(TOKEN_ENV)
    return {"env_vars": {TOKEN_ENV: token}} if token else {}


def describe(ray: Any, name: str, handle: Any, timeout_s: float) -> ReplicaInfo:
    """Where replica `name` serves, or why it did not say within `timeout_s`."""
    return answer(ray, name, handle.where.remote(), timeout_s)


def answer(ray: Any, name: str, where: Any, timeout_s: float) -> ReplicaInfo:
    """Replica `name`'s reply to `where` (an object ref), or why there was none within `timeout_s`."""
    try:
        reply = ray.get(where, timeout=timeout_s)
    except Exception as exc:  # restarting, dead, timed out: Ray raises several types for these
        return ReplicaInfo(name, error=f"{type(exc).__name__}: {first_line(str(exc))}")
    return ReplicaInfo(
        name,
        url=str(reply["url"]),
        node_id=str(reply["node_id"]),
        pid=int(reply["pid"]),
        service_pid=int(reply["service_pid"]),
    )


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def fleet_status(address: str, timeout_s: float = 10.0) -> list[ReplicaInfo]:
    """Every replica of the fleet and where it serves (or why it does not answer within `timeout_s`)."""
    ray = connect(address)
    asked: dict[str, Any] = {}  # every replica asked at once, answers awaited against one deadline
    for name in existing_replicas(ray):
        try:
            asked[name] = ray.get_actor(name, namespace=NAMESPACE).where.remote()
        except ValueError as exc:  # killed between the listing and now
            asked[name] = exc
    deadline = time.monotonic() + timeout_s
    return [
        ReplicaInfo(name, error=str(where))
        if isinstance(where, ValueError)
        else answer(ray, name, where, max(0.0, deadline - time.monotonic()))
        for name, where in asked.items()
    ]


def fleet_down(address: str) -> list[str]:
    """Kill every replica (no restart); their services exit with them. Returns the names killed."""
    ray = connect(address)
    killed = []
    for name in existing_replicas(ray):
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(handle.stop.remote(), timeout=30.0)
        except Exception:  # a dead or restarting replica cannot stop its service; its child exits anyway
            pass
        ray.kill(handle, no_restart=True)
        killed.append(name)
    return killed


class RayReplicas:
    """The live replicas' URLs of the fleet on the cluster at `address`, for `EnvClient(discover=...)`."""

    def __init__(self, address: str, timeout_s: float = 5.0) -> None:
        self.address = address
        self.timeout_s = timeout_s

    def urls(self) -> list[str]:
        """The URLs of the replicas that answer now; `ServiceUnavailable` when none does."""
        infos = fleet_status(self.address, self.timeout_s)
        live = [info.url for info in infos if info.url is not None]
        if not live:
            problems = "; ".join(f"{info.name}: {info.error}" for info in infos) or "no replicas"
            raise ServiceUnavailable(
                f"no env-service replica of the Ray fleet at {self.address!r} answers ({problems}); start "
                "one with `agentrl fleet up --ray ADDRESS`"
            )
        return live

    async def discover(self) -> list[str]:
        """`urls()` off the event loop (Ray's calls block)."""
        import asyncio

        return await asyncio.to_thread(self.urls)
