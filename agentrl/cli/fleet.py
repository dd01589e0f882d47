"""`agentrl fleet up|status|down --ray ADDRESS`: the env-service fleet as actors on a Ray cluster.

What this is: the command line over `agentrl/service/ray_fleet.py`. `up` starts K replicas on every node
that carries the `agentrl_env` resource and prints where each serves; `status` prints every replica and
exits 1 when one does not answer; `down` kills them. A run uses the fleet with `service.fleet=ray
service.ray_address=ADDRESS`.

What this is not: a cluster launcher. The Ray cluster (`ray start`, KubeRay) is yours; ray is imported
only when this command runs (`pip install 'agentrl[ray]'`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("fleet", help="the env-service fleet on a Ray cluster (up, status, down)")
    actions = parser.add_subparsers(dest="fleet_action", required=True)
    for name, help_text in (
        ("up", "start env-service replicas on the nodes marked with the agentrl_env resource"),
        ("status", "every replica and where it serves; exit 1 if one does not answer"),
        ("down", "kill every replica"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument(
            "--ray", dest="address", default="auto", help="Ray cluster: head HOST:PORT, ray://..., auto"
        )
        if name == "up":
            add_up_arguments(action)
        action.set_defaults(handler=run)


def add_up_arguments(action: argparse.ArgumentParser) -> None:
    from agentrl.service.ray_fleet import FleetSpec

    default = FleetSpec()
    action.add_argument("--replicas-per-node", type=int, default=default.replicas_per_node)
    action.add_argument("--max-sessions", type=int, default=default.max_sessions, help="per replica")
    action.add_argument("--preload", action="append", default=[], help="module each replica imports")
    action.add_argument("--startup-timeout", type=float, default=default.startup_timeout_s, help="seconds")


def run(args: argparse.Namespace) -> int:
    from agentrl.service import ray_fleet

    if args.fleet_action == "up":
        spec = ray_fleet.FleetSpec(
            address=args.address,
            replicas_per_node=args.replicas_per_node,
            max_sessions=args.max_sessions,
            preload=tuple(args.preload),
            startup_timeout_s=args.startup_timeout,
        )
        return report(ray_fleet.fleet_up(spec))
    if args.fleet_action == "status":
        return report(ray_fleet.fleet_status(args.address))
    killed = ray_fleet.fleet_down(args.address)
    print(json.dumps({"killed": killed}))
    return 0


def report(infos: Sequence[Any]) -> int:
    """One JSON line per replica; 1 when one does not answer (or there are none), else 0."""
    for info in infos:
        print(json.dumps({key: value for key, value in vars(info).items() if value is not None}))
    return 0 if infos and all(info.url is not None for info in infos) else 1
