"""The rules of ``fencelock doctor`` and of the client's warning before its first grant, without
a server (``fencelock._core.hazards``). tests/cli/test_cli_doctor.py shows each against a real
server configured with it."""

from __future__ import annotations

import pytest

from fencelock._core import hazards
from fencelock._core.hazards import HAZARD, NOTE, Finding
from fencelock._core.natives import ServerCommands

WHERE = "127.0.0.1:6379"


def codes(found: list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in found]


@pytest.mark.parametrize(
    ("info", "found"),
    [
        ({"maxmemory": 0, "maxmemory_policy": "allkeys-lru"}, []),  # no limit: nothing evicted
        ({"maxmemory": 104857600, "maxmemory_policy": "noeviction"}, []),
        ({"maxmemory": 104857600, "maxmemory_policy": "volatile-lru"}, [("eviction", HAZARD)]),
        ({"maxmemory": 104857600, "maxmemory_policy": "allkeys-lrm"}, [("eviction", HAZARD)]),
        (
            b"# Memory\r\nmaxmemory:104857600\r\nmaxmemory_policy:volatile-ttl\r\n",
            [("eviction", HAZARD)],
        ),
        ("maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", []),
        (
            {"used_memory": 95, "maxmemory": 100, "maxmemory_policy": "noeviction"},
            [("memory", HAZARD)],
        ),
        (
            {"used_memory": 89, "maxmemory": 100, "maxmemory_policy": "noeviction"},
            [],
        ),
        (None, []),
    ],
)
def test_memory(info: object, found: list[tuple[str, str]]) -> None:
    assert codes(hazards.memory(info, WHERE)) == found


def test_a_clusters_info_is_read_per_node() -> None:
    info = {
        "n1": {"maxmemory": 1, "maxmemory_policy": "noeviction"},
        "n2": {"maxmemory": 1, "maxmemory_policy": "allkeys-lfu"},
    }
    found = [(node, codes(hazards.memory(reply, "?"))) for node, reply in hazards.per_node(info)]
    assert found == [("n1", []), ("n2", [("eviction", HAZARD)])]
    assert hazards.per_node({"maxmemory": 1}) == [(None, {"maxmemory": 1})]


@pytest.mark.parametrize(
    ("aof", "save", "fsync", "found"),
    [
        ("1", "", "always", []),
        ("0", "", "everysec", [("persistence", HAZARD)]),  # nothing survives a restart
        ("0", "3600 1", "everysec", [("persistence", NOTE)]),  # snapshots: a crash loses some
        ("1", "", "everysec", [("persistence", NOTE)]),
        ("0", None, None, [("persistence", NOTE)]),  # CONFIG refused: cannot tell it is off
    ],
)
def test_persistence(aof: str, save: str | None, fsync: str | None, found: list) -> None:
    info = f"aof_enabled:{aof}\r\n"
    assert codes(hazards.persistence(info, save, fsync, WHERE)) == found


@pytest.mark.parametrize(
    ("info", "wanted", "found"),
    [
        ({"role": "slave", "connected_slaves": 0}, 0, [("replica-role", HAZARD)]),
        ({"role": "master", "connected_slaves": 0}, 1, [("replicas", HAZARD)]),
        ({"role": "master", "connected_slaves": 1}, 1, []),
        ({"role": "master", "connected_slaves": 2}, 0, [("replicas", NOTE)]),
        ({"role": "master", "connected_slaves": 0}, 0, []),
    ],
)
def test_replication(info: object, wanted: int, found: list) -> None:
    assert codes(hazards.replication(info, wanted, WHERE)) == found


def test_scripting() -> None:
    old = ServerCommands().detected({"server": "redis", "version": "7.0.15"})
    new = ServerCommands().detected({"server": "valkey", "version": "9.0.0"})
    assert hazards.scripting(None, old, WHERE) == []
    assert codes(hazards.scripting("NOPERM", old, WHERE)) == [("scripts", HAZARD)]
    assert codes(hazards.scripting("NOPERM", new, WHERE)) == [("scripts", NOTE)]


@pytest.mark.parametrize(
    ("server", "found"),
    [
        (100.0, []),
        (100.9 + 0.2, []),  # within the tolerance past the reply
        (102.5, [("clock", HAZARD)]),
        (97.5, [("clock", HAZARD)]),
    ],
)
def test_clock(server: float, found: list) -> None:
    assert codes(hazards.clock(server, 99.9, 100.2, WHERE)) == found
    if found:
        assert ("ahead of" if server > 100 else "behind") in hazards.clock(
            server, 99.9, 100.2, WHERE
        )[0].summary


@pytest.mark.parametrize(
    ("server", "cluster", "scripts", "found"),
    [
        ("redis 7.0.15", False, True, [("version", NOTE)]),  # a line with no upstream fix
        ("redis 7.2.10", False, True, [("version", NOTE)]),
        ("redis 7.2.11", False, True, []),
        ("redis 7.2.10", False, False, []),  # scripts denied: nothing to exploit
        ("redis 8.4.0", False, True, []),  # a line newer than every fixed one
        ("redis 6.2.7", True, True, [("version", HAZARD), ("version", NOTE)]),
        ("valkey 8.1.3", False, True, [("version", NOTE)]),
        ("valkey 9.0.0", True, True, []),
        ("", False, True, []),  # unknown: nothing said
    ],
)
def test_version(server: str, cluster: bool, scripts: bool, found: list) -> None:
    name, _, version = server.partition(" ")
    commands = ServerCommands().detected({"server": name, "version": version})
    assert codes(hazards.version(commands, cluster, scripts, WHERE)) == found


def test_cluster() -> None:
    healthy = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n"
    assert hazards.cluster(healthy, [], "Cluster") == []
    partial = "cluster_state:fail\r\ncluster_slots_assigned:101\r\n"
    assert codes(hazards.cluster(partial, ["10.0.0.1:7000"], "Cluster")) == [
        ("cluster-slots", HAZARD),
        ("cluster-node", HAZARD),
    ]


@pytest.mark.parametrize(
    ("nodes", "down", "found"),
    [
        (5, [], []),
        (3, [], []),
        (4, [], [("redlock-size", NOTE)]),
        (2, [], [("redlock-size", HAZARD)]),
        (5, ["a:1"], [("redlock-node", HAZARD)]),
    ],
)
def test_redlock(nodes: int, down: list[str], found: list) -> None:
    assert codes(hazards.redlock(nodes, down)) == found


def test_permissions_and_the_exit_status() -> None:
    refused = hazards.permissions({"a waiter's SUBSCRIBE": "NOPERM ..."}, WHERE)
    assert codes(refused) == [("acl", HAZARD)]
    assert "SUBSCRIBE" in refused[0].summary
    assert hazards.exit_status(refused) == 1
    note = hazards.replication({"role": "master", "connected_slaves": 1}, 0, WHERE)
    assert hazards.exit_status(note) == 0
    assert hazards.exit_status([]) == 0
