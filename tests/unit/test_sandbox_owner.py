"""Who owns a sandbox and whether that owner is alive (`agentrl.sandbox.owner`): the label round trip, the
verdict for every kind of owner against fake look-ups, the orphan selection with its grace, and the readers
of /proc text. Pure: no Docker, no /proc beyond this process's own."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace

import pytest

from agentrl.sandbox.owner import (
    OWNER_LABEL,
    ContainerLife,
    Orphan,
    Owner,
    container_id_in,
    orphans,
    owner_label,
    owner_verdict,
    parse_owner,
    process_start,
    start_ticks_in,
    this_process,
)
from agentrl.service.cleanup import reap_orphans_once
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.settings import ServiceSettings

CONTAINER = "a" * 64
OTHER_CONTAINER = "b" * 64
STARTED = "2025-01-02T03:04:05.123456789Z"
HOST = Owner("node-1", 4242, "1000", "boot-1", "4026531836")  # a process on the host
IN_CONTAINER = Owner("c0ffee", 1, "77", "boot-1", "4026532000", CONTAINER, STARTED)  # PID 1 of a replica


def no_containers(container_id: str) -> ContainerLife | None:
    return None


def containers(**lives: ContainerLife) -> Callable[[str], ContainerLife | None]:
    by_id = {CONTAINER if name == "ours" else OTHER_CONTAINER: life for name, life in lives.items()}
    return lambda container_id: by_id.get(container_id)


def processes(**starts: str) -> Callable[[int], str | None]:
    return lambda pid: starts.get(f"p{pid}")


# --- the label -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("owner", [HOST, IN_CONTAINER, Owner("h", 7)])
def test_a_label_reads_back_as_the_owner_it_names(owner: Owner) -> None:
    assert parse_owner(owner_label(owner)) == owner


def test_the_label_says_the_kind_of_owner() -> None:
    assert owner_label(HOST) == "proc:node-1:boot-1:4026531836:4242:1000"
    assert owner_label(IN_CONTAINER) == f"container:c0ffee:boot-1:4026532000:1:77:{CONTAINER}:{STARTED}"


def test_the_old_host_pid_form_still_reads() -> None:
    assert parse_owner("node-1:4242") == Owner("node-1", 4242, legacy=True)


@pytest.mark.parametrize("label", ["", "node-1", "node-1:x", "proc:a:b", "container:h:b:n:1:2"])
def test_an_unreadable_label_names_no_owner(label: str) -> None:
    assert parse_owner(label) is None


# --- the verdict ---------------------------------------------------------------------------------------


def test_a_process_on_this_host_is_alive_while_its_pid_has_the_same_start_time() -> None:
    observer = replace(HOST, pid=9)
    assert owner_verdict(HOST, observer, no_containers, processes(p4242="1000")).alive is True
    gone = owner_verdict(HOST, observer, no_containers, processes())
    reused = owner_verdict(HOST, observer, no_containers, processes(p4242="5555"))
    assert (gone.alive, gone.reason) == (False, "process_gone")
    assert (reused.alive, reused.reason) == (False, "pid_reused")


def test_an_unreadable_start_time_of_an_existing_pid_counts_as_alive() -> None:
    assert owner_verdict(HOST, replace(HOST, pid=9), no_containers, processes(p4242="")).alive is True


def test_a_restart_as_pid_1_in_the_same_container_sees_its_predecessor_gone() -> None:
    """The bug of issue 39: same hostname, same pid, but another life of the container."""
    restarted_at = "2025-01-02T03:09:00.5Z"
    successor = replace(IN_CONTAINER, start_ticks="91", container_started_at=restarted_at)
    look = containers(ours=ContainerLife(True, restarted_at))
    verdict = owner_verdict(IN_CONTAINER, successor, look, processes(p1="91"))
    assert (verdict.alive, verdict.reason) == (False, "container_restarted")


def test_a_service_restarted_inside_a_running_container_sees_its_predecessor_gone() -> None:
    successor = replace(IN_CONTAINER, pid=40, start_ticks="900")
    look = containers(ours=ContainerLife(True, STARTED))
    assert owner_verdict(IN_CONTAINER, successor, look, processes(p40="900")).reason == "process_gone"
    assert owner_verdict(IN_CONTAINER, successor, look, processes(p1="77")).alive is True


@pytest.mark.parametrize(
    ("life", "alive", "reason"),
    [
        (None, False, "container_gone"),
        (ContainerLife(False, STARTED), False, "container_stopped"),
        (ContainerLife(True, "2025-02-01T00:00:00Z"), False, "container_restarted"),
        (ContainerLife(True, STARTED), True, "container_running"),
    ],
)
def test_any_replica_on_the_engine_judges_a_container_owner_by_the_engine(
    life: ContainerLife | None, alive: bool, reason: str
) -> None:
    other_replica = replace(IN_CONTAINER, host="beef", container_id=OTHER_CONTAINER)
    look = containers(ours=life) if life else no_containers
    for observer in (other_replica, HOST):  # a replica in another container, or a process on the host
        verdict = owner_verdict(IN_CONTAINER, observer, look, processes())
        assert (verdict.alive, verdict.reason) == (alive, reason)


def test_owners_out_of_sight_are_never_gone() -> None:
    other_host = replace(HOST, host="node-2")
    other_namespace = replace(HOST, pid_namespace="4026532999")  # e.g. a host-network container
    unknown_namespace = replace(HOST, pid_namespace="")
    for owner in (other_host, other_namespace, unknown_namespace):
        assert owner_verdict(owner, HOST, no_containers, processes()).alive is None


def test_a_process_of_an_earlier_boot_is_gone() -> None:
    before_reboot = replace(HOST, boot_id="boot-0")
    verdict = owner_verdict(before_reboot, HOST, no_containers, processes(p4242="1000"))
    assert (verdict.alive, verdict.reason) == (False, "host_rebooted")


def test_an_old_label_is_judged_as_before_by_host_and_pid() -> None:
    legacy = Owner("node-1", 4242, legacy=True)
    assert owner_verdict(legacy, HOST, no_containers, processes()).alive is False
    assert owner_verdict(legacy, HOST, no_containers, processes(p4242="1")).alive is True
    assert owner_verdict(replace(legacy, host="x"), HOST, no_containers, processes()).alive is None


# --- choosing orphans ----------------------------------------------------------------------------------


def entry(container_id: str, owner: str, created: float) -> dict[str, object]:
    return {"Id": container_id, "Labels": {OWNER_LABEL: owner}, "Created": created}


def test_orphans_are_the_old_enough_containers_of_gone_owners() -> None:
    dead, live = owner_label(replace(HOST, pid=1)), owner_label(HOST)
    entries = [
        entry("old-dead", dead, 100.0),
        entry("young-dead", dead, 108.0),  # inside the grace: its owner may be creating it right now
        entry("old-live", live, 100.0),
        entry("unlabelled", "", 100.0),
        {"Id": "no-labels", "Labels": None, "Created": 100.0},
    ]
    found = orphans(entries, HOST, no_containers, processes(p4242="1000"), now=110.0, grace_s=5.0)
    assert found == [Orphan("old-dead", dead, "process_gone")]


# --- reading this host ---------------------------------------------------------------------------------


def test_the_start_time_is_field_22_even_when_the_command_name_has_spaces_and_parentheses() -> None:
    stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50"
    assert start_ticks_in(stat) == "987654"
    assert start_ticks_in("garbage") == ""


def test_this_process_reads_its_own_start_time_and_namespace() -> None:
    me = this_process()
    assert me.pid == os.getpid() and me.start_ticks == process_start(os.getpid())
    if os.path.exists("/proc/self/stat"):
        assert me.start_ticks.isdigit() and me.pid_namespace.isdigit()


def test_a_container_is_recognised_by_its_hostname_mount_or_a_v1_cgroup() -> None:
    mount = (
        f"512 480 0:31 /var/lib/docker/containers/{CONTAINER}/hostname /etc/hostname rw - ext4 /dev/sda1 rw"
    )
    assert container_id_in(mount, "0::/") == CONTAINER
    assert container_id_in("", f"12:pids:/docker/{OTHER_CONTAINER}\n") == OTHER_CONTAINER
    assert container_id_in("", f"0::/system.slice/docker-{OTHER_CONTAINER}.scope\n") == OTHER_CONTAINER
    assert container_id_in("25 1 8:1 / / rw - ext4 /dev/sda1 rw", "0::/user.slice") == ""


# --- the service's pass --------------------------------------------------------------------------------


def test_a_pass_counts_reaped_sandboxes_by_reason_and_survives_failures() -> None:
    metrics = ServiceMetrics()
    settings = ServiceSettings(orphan_grace_s=7.0)
    calls: list[float] = []

    def remove(service: str | None, client: None, grace_s: float) -> list[Orphan]:
        calls.append(grace_s)
        return [Orphan("a", "x", "process_gone"), Orphan("b", "y", "container_restarted")]

    def broken(service: str | None, client: None, grace_s: float) -> list[Orphan]:
        raise RuntimeError("engine hiccup")

    assert asyncio.run(reap_orphans_once(settings, metrics, remove)) == 2
    assert asyncio.run(reap_orphans_once(settings, metrics, broken)) == 0
    assert calls == [7.0]
    rendered = metrics.render(live_sessions=0)
    assert 'agentrl_service_sandboxes_reaped_total{reason="container_restarted"} 1' in rendered
    assert 'agentrl_service_sandboxes_reaped_total{reason="process_gone"} 1' in rendered
