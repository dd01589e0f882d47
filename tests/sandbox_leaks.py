"""Counting sandbox containers in tests: by label, and by owner process (`agentrl.owner`).

What this is: `labelled_sandboxes(labels)`, the sandbox containers (any state) carrying `labels`;
`sandboxes_of_processes(pids)`, those whose owner is one of `pids` in this host's pid namespace (the env
services a test started as child processes); `assert_none_left(...)`, which fails naming what leaked and
removes it so that one leak does not spill into the next test. What this is not: a fixture (tests call it
where their replicas are known), or the reaper (`agentrl.sandbox.docker.remove_orphans`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentrl.errors import SandboxUnavailable
from agentrl.sandbox.docker import OWNER_LABEL, SERVICE_LABEL, labelled_containers, reap
from agentrl.sandbox.owner import parse_owner, this_process


def labelled_sandboxes(labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Sandbox containers carrying `labels` ("" matches any value); none where no engine answers."""
    try:
        return labelled_containers({SERVICE_LABEL: "", **labels})
    except SandboxUnavailable:
        return []


def sandboxes_of_processes(pids: Iterable[int]) -> list[dict[str, Any]]:
    """Sandboxes whose owner label names a process of `pids` on this host, in our pid namespace."""
    wanted, here = set(pids), this_process()
    found = []
    for entry in labelled_sandboxes({}):
        owner = parse_owner((entry.get("Labels") or {}).get(OWNER_LABEL, ""))
        if (
            owner is not None
            and owner.pid in wanted
            and owner.host == here.host
            and owner.pid_namespace == here.pid_namespace
            and not owner.container_id
        ):
            found.append(entry)
    return found


def assert_none_left(leaked: list[dict[str, Any]], what: str) -> None:
    """Fail if `leaked` is not empty, after removing those containers."""
    for entry in leaked:
        reap({"agentrl.session": (entry.get("Labels") or {}).get("agentrl.session", "-")})
    assert not leaked, f"{len(leaked)} sandbox container(s) of {what} leaked (removed now): " + ", ".join(
        f"{entry['Id'][:12]} owner {(entry.get('Labels') or {}).get(OWNER_LABEL)}" for entry in leaked
    )
