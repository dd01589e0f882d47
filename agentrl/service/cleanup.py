"""The env service's part in sandbox cleanup: the orphan reaper while it runs, and its own sandboxes when it
stops.

What this is:
- `reap_orphans_forever`, started by the app's lifespan: a pass at start-up, then one every
  `ServiceSettings.orphan_reap_interval_s`. A pass removes every sandbox on this Docker engine whose owner is
  gone (`agentrl.sandbox.docker.remove_orphans`), whoever started it, so the sandboxes of a replica that was
  killed, restarted, or never comes back are removed by any live replica on the same engine; each removal
  is logged with its reason and counted in `ServiceMetrics.sandboxes_reaped`.
- `close_sessions_and_sandboxes`, the lifespan's shutdown: close every session (bounded by
  `shutdown_timeout_s`), close the warm pools (their waiting sandboxes are removed), one last orphan pass.
- `remove_own_sandboxes`, the last step of `python -m agentrl.service`: force-remove every container that
  names this process as its owner (a session whose close did not finish in time leaves one). Not in the
  lifespan: tests serve several apps in one process, which share that owner label.

What this is not: the decision who is gone (`agentrl.sandbox.owner`). A service without a Docker engine
skips all of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agentrl.errors import SandboxUnavailable
from agentrl.sandbox.docker import OWNER_LABEL, owner, reap, remove_orphans
from agentrl.sandbox.owner import Orphan
from agentrl.sandbox.pool import close_shared_pools
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.sessions import SessionManager
from agentrl.service.settings import ServiceSettings

log = logging.getLogger(__name__)

RemoveOrphans = Callable[[str | None, None, float], list[Orphan]]


async def reap_orphans_forever(
    settings: ServiceSettings, metrics: ServiceMetrics, remove: RemoveOrphans = remove_orphans
) -> None:
    """The orphan reaper: a pass now, then every `orphan_reap_interval_s`; cancel it to stop."""
    while True:
        await reap_orphans_once(settings, metrics, remove)
        await asyncio.sleep(settings.orphan_reap_interval_s)


async def reap_orphans_once(
    settings: ServiceSettings, metrics: ServiceMetrics, remove: RemoveOrphans = remove_orphans
) -> int:
    """One pass over every agentrl sandbox on the engine; returns how many were removed. Never raises: a
    failed pass is logged and the next one tries again."""
    try:
        removed = await asyncio.to_thread(remove, None, None, settings.orphan_grace_s)
    except SandboxUnavailable as error:  # a service of sandbox-free envs needs no engine
        log.debug("orphan reaper: no Docker engine (%s)", error)
        return 0
    except Exception:
        log.exception("orphan reaper: the pass failed; the next one tries again")
        return 0
    metrics.sandboxes_reaped.update(orphan.reason for orphan in removed)
    return len(removed)


async def close_sessions_and_sandboxes(
    manager: SessionManager, settings: ServiceSettings, metrics: ServiceMetrics
) -> None:
    """Shutdown: close the sessions (their sandboxes go back to the pools or are removed), give up on those
    still closing after `shutdown_timeout_s`, close the warm pools, then a last orphan pass."""
    closing = asyncio.ensure_future(manager.close_all())
    done, _ = await asyncio.wait({closing}, timeout=settings.shutdown_timeout_s)
    if not done:
        log.warning(
            "sessions still closing after %g s (shutdown_timeout_s); their sandboxes are removed by force",
            settings.shutdown_timeout_s,
        )
    await asyncio.to_thread(close_shared_pools)
    if settings.orphan_reap_interval_s > 0:
        await reap_orphans_once(settings, metrics)


def remove_own_sandboxes() -> int:
    """Force-remove every sandbox this process owns; how many there were (0 without an engine)."""
    try:
        removed = reap({OWNER_LABEL: owner()})
    except SandboxUnavailable:
        return 0
    if removed:
        log.warning("removed %d sandbox(es) still running at exit", removed)
    return removed
