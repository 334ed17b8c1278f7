"""``fencelock doctor`` against real servers, each configured with the hazard it must find; the
rules themselves are tested without a server in tests/core/test_hazards.py."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.chaos.topologies import NodeClock, find_faketime
from fencelock.cli import main
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from fencelock_tools.servers.topology import Cluster, SentinelSetup
from tests.concurrency import TIMEOUT
from tests.conftest import _binary

# AOF with an fsync per write: nothing a restart loses, so a server without other hazards
DURABLE = ["--appendonly", "yes", "--appendfsync", "always"]


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """The command's status and its --json report ({} when it printed none)."""
    status = main(["doctor", "--json", "--timeout", "2", *args])
    out = capsys.readouterr().out
    return status, json.loads(out) if out.strip() else {}


def codes(report: dict[str, Any], severity: str = "hazard") -> set[str]:
    return {f["code"] for f in report["findings"] if f["severity"] == severity}


@pytest.fixture
def durable(server_kind: str) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(_binary(server_kind), args=DURABLE) as srv:
        yield srv


def test_a_sound_server_exits_0_with_its_notes(
    durable: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = doctor(capsys, durable.url)
    assert status == 0, report
    assert codes(report) == set()
    assert report["status"] == 0 and len(report["servers"]) == 1
    # the probe released what it took; what stays a while (a latch's state, the fencing
    # counters) expires, and the limits a semaphore and a read-write lock keep are those of
    # one name, whatever the number of runs
    main(["doctor", durable.url])
    with durable.client() as probe:
        left = {key: probe.pttl(key) for key in probe.scan_iter("fencelock:*")}
    kept = {key for key, ttl in left.items() if ttl < 0}
    assert kept == {
        b"fencelock:{fencelock-doctor}:sem:state",
        b"fencelock:{fencelock-doctor}:rw:state",
    }


def test_the_text_report_says_what_breaks_and_the_fix(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["doctor", server.url])  # the shared server: no persistence
    out = capsys.readouterr().out
    assert status == 1
    assert "HAZARD  persistence" in out and "breaks: a restart empties the server" in out
    assert "fix:" in out and out.rstrip().endswith("a promise is at risk")


def test_an_unreachable_server_exits_69(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["doctor", f"redis://127.0.0.1:{free_port()}/0"])
    assert status == 69
    assert "Connection refused" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_policy(
    server_kind: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*DURABLE, "--maxmemory", "100mb", "--maxmemory-policy", policy]
    with EmbeddedServer(_binary(server_kind), args=args) as srv:
        status, report = doctor(capsys, srv.url)
    assert (status, codes(report)) == (1, {"eviction"})
    [found] = report["findings"][:1]
    assert policy in found["summary"] and "noeviction" in found["fix"]


def test_a_server_nearly_full(durable: EmbeddedServer, capsys: pytest.CaptureFixture[str]) -> None:
    with durable.client() as admin:
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(int(used * 1.05)))
        status, report = doctor(capsys, durable.url)
        admin.config_set("maxmemory", "0")
    assert status == 1 and "memory" in codes(report)


def test_persistence(server_kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    with EmbeddedServer(_binary(server_kind)) as off:  # --save "" --appendonly no
        assert "persistence" in codes(doctor(capsys, off.url)[1])
    snapshots = ["--save", "3600 1"]
    with EmbeddedServer(_binary(server_kind), args=snapshots) as rdb:
        status, report = doctor(capsys, rdb.url)
    assert (status, codes(report)) == (0, set())
    assert "persistence" in codes(report, "note")


def test_a_replica_given_as_the_server_and_replicas_missing(
    replicated: tuple[EmbeddedServer, EmbeddedServer], capsys: pytest.CaptureFixture[str]
) -> None:
    master, replica = replicated
    assert "replica-role" in codes(doctor(capsys, replica.url)[1])
    status, report = doctor(capsys, master.url, "--min-replicas", "2")
    assert status == 1 and "replicas" in codes(report)
    assert "replicas" not in codes(doctor(capsys, master.url, "--min-replicas", "1")[1])
    assert "replicas" in codes(doctor(capsys, master.url)[1], "note")  # nobody waits for it


def test_scripts_refused(
    durable: EmbeddedServer, server_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with durable.client() as admin:
        admin.execute_command(
            "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-@scripting"
        )
    url = f"redis://app:pw@127.0.0.1:{durable.port}/0"
    status, report = doctor(capsys, url)
    with durable.client() as admin:
        server = admin.info("server")
    native = "valkey_version" in server and int(str(server["valkey_version"]).split(".")[0]) >= 9
    if native:  # plain locks by native commands: a note; the rest raise ScriptsRequired
        assert (status, codes(report)) == (0, set()) and "scripts" in codes(report, "note")
    else:
        assert status == 1 and "scripts" in codes(report)
    assert "acl" not in codes(report)  # what needs scripts is not counted twice


def test_a_user_without_channels_is_a_permission_hazard(
    durable: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with durable.client() as admin:
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "resetchannels", "+@all")
    status, report = doctor(capsys, f"redis://app:pw@127.0.0.1:{durable.port}/0")
    assert status == 1 and "acl" in codes(report)
    refused = [f["summary"] for f in report["findings"] if f["code"] == "acl"]
    assert any("waiter" in line or "release" in line for line in refused), refused


@pytest.mark.skipif(find_faketime() is None, reason="libfaketime is not installed")
def test_a_server_clock_far_from_this_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    """valkey's binary: Debian's redis-server cannot start under libfaketime (its allocator
    calls clock_gettime while libfaketime initialises)."""
    library = find_faketime()
    assert library is not None
    with tempfile.TemporaryDirectory() as directory:
        clock = NodeClock(Path(directory), _binary("valkey"), library)
        with EmbeddedServer(str(clock.wrapper), args=DURABLE) as srv:
            clock.jump(3600.0)
            status, report = doctor(capsys, srv.url)
    assert status == 1 and "clock" in codes(report)
    [found] = [f for f in report["findings"] if f["code"] == "clock"]
    assert "ahead of" in found["summary"]


def redlock_urls(servers: Sequence[EmbeddedServer]) -> list[str]:
    return [s.url for s in servers]


def test_redlock(server_kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    binary = _binary(server_kind)
    with (
        EmbeddedServer(binary, args=DURABLE) as a,
        EmbeddedServer(binary, args=DURABLE) as b,
        EmbeddedServer(binary, args=DURABLE) as c,
    ):
        status, report = doctor(capsys, *redlock_urls([a, b, c]))
        assert (status, codes(report), len(report["servers"])) == (0, set(), 3), report
        c.stop()
        status, report = doctor(capsys, *redlock_urls([a, b, c]))
        assert status == 1 and "redlock-node" in codes(report)
        b.stop()
        assert doctor(capsys, *redlock_urls([a, b, c]))[0] == 69  # no majority


def test_a_cluster(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = doctor(capsys, "--cluster", cluster.startup_url)
    assert len(report["servers"]) == 6, report  # 3 masters, 3 replicas
    assert codes(report) & {"cluster-slots", "cluster-node", "acl"} == set()
    assert status == 1 and "persistence" in codes(report)  # (the test cluster keeps nothing)


def test_a_cluster_with_slots_unassigned(
    server_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bus = ["--cluster-port", str(free_port())]  # (the default, port + 10000, may not exist)
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", *bus, *DURABLE]
    with EmbeddedServer(_binary(server_kind), args=args) as node:
        with node.client() as admin:
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 100)
        status, report = doctor(capsys, "--cluster", node.url)
    assert status == 1 and "cluster-slots" in codes(report)


def test_sentinel(sentinel_setup: SentinelSetup, capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{sentinel_setup.sentinel_port}"
    service = sentinel_setup.service_name
    _, report = doctor(capsys, "--sentinel", address, "--service", service)
    assert report["servers"], report
    assert codes(report) & {"sentinel-quorum", "acl", "replica-role"} == set()
    missing = main(["doctor", "--sentinel", address, "--service", "no-such-master"])
    assert missing == 69


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--sentinel", "127.0.0.1:1"], ["--cluster", "redis://a", "redis://b"]):
        with pytest.raises(SystemExit) as exited:
            main(["doctor", *args])
        assert exited.value.code == 64


def test_the_command_itself(durable: EmbeddedServer) -> None:
    """As an operator runs it: the installed command, the URL from the environment."""
    done = subprocess.run(
        [sys.executable, "-m", "fencelock", "doctor", "--json"],
        env={"FENCELOCK_URL": durable.url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == 0


def test_the_client_warns_of_a_nearly_full_server_as_doctor_reports_it(
    durable: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """One code path: the client's warning before its first grant is doctor's memory rule."""
    from fencelock import LockClient

    with durable.client() as admin:
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(int(used * 1.5)))
        admin.config_set("maxmemory-policy", "allkeys-lru")
        try:
            with LockClient.from_url(durable.url) as client:
                client.lock("x", 10).acquire(timeout=0)
        except redis.RedisError:
            pass
        finally:
            admin.config_set("maxmemory", "0")
    warned = [r.getMessage() for r in caplog.records if r.name == "fencelock.server"]
    assert any("maxmemory-policy is allkeys-lru" in m for m in warned), warned
