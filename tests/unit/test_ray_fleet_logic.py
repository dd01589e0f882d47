"""The Ray fleet's pure parts: which nodes host replicas, the fleet's actor names, the service config's
fleet settings. The fleet on a real Ray cluster: tests/integration/test_ray_fleet.py."""

from __future__ import annotations

import pytest

from agentrl.config import ServiceConfig
from agentrl.errors import ConfigError
from agentrl.service.ray_fleet import RESOURCE, marked_nodes, max_sessions_args, replica_names


def test_only_live_nodes_carrying_the_resource_host_replicas() -> None:
    nodes = [
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "a", "Alive": True, "Resources": {RESOURCE: 1.0}},
        {"NodeID": "dead", "Alive": False, "Resources": {RESOURCE: 1.0}},
        {"NodeID": "b", "Alive": True, "Resources": {RESOURCE: 4.0, "CPU": 8.0}},
    ]
    assert marked_nodes(nodes) == ["a", "b"]
    assert marked_nodes([]) == []


def test_replica_names_are_the_fleets_own_in_index_order() -> None:
    assert replica_names(["env-10", "other", "env-2", "env-0"]) == ["env-0", "env-2", "env-10"]
    assert max_sessions_args(None) == ()
    assert max_sessions_args(8) == ("--max-sessions", "8")


def test_the_service_config_names_its_ray_fleet_or_refuses_a_mix() -> None:
    assert ServiceConfig().ray_fleet_address is None
    assert ServiceConfig(url="http://127.0.0.1:8700").ray_fleet_address is None
    assert ServiceConfig(fleet="ray", ray_address="127.0.0.1:6379").ray_fleet_address == "127.0.0.1:6379"
    assert ServiceConfig(url="ray://head:10001").ray_fleet_address == "ray://head:10001"
    with pytest.raises(ConfigError, match="service.fleet=ray"):
        ServiceConfig(fleet="k8s")
    with pytest.raises(ConfigError, match="not both"):
        ServiceConfig(fleet="ray", url="http://127.0.0.1:8700")
