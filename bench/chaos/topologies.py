"""The servers of one scenario run, and how a worker builds its client for them.

``ClientSpec`` is what crosses into a worker process (picklable); ``make_client`` turns it into a
``fencelock.LockClient``, ``make_async_client`` into a ``fencelock.asyncio.LockClient`` on the
same servers (over ``redis.asyncio`` clients). Every topology starts real servers on free
loopback ports (through ``fencelock_tools.servers``) and stops them by PID in ``stop()``, on
every path. The fenced resource is a server of its own that no nemesis
touches (``Resource``).

A Redlock node can run under libfaketime (``faketime=``): its wall clock, which Redis uses to
expire keys, then follows an offset that ``NodeClock.jump`` moves forward while it runs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

import fencelock
import fencelock.asyncio
from fencelock_tools.servers.embedded import EmbeddedServer, ServerNotFound, find_server
from fencelock_tools.servers.proxy import TcpProxy
from fencelock_tools.servers.topology import Cluster, SentinelSetup, probe, start_server

SINGLE, REDLOCK, CLUSTER, SENTINEL = "single", "redlock5", "cluster", "sentinel"
REDLOCK_NODES = 5
CLOCK_NODE_START = 4.0  # seconds for a server under libfaketime to answer


class Unavailable(RuntimeError):
    """This machine cannot run the scenario (the message says why): it is skipped."""


@dataclass(frozen=True)
class ClientSpec:
    """How to reach the lock servers: enough for a worker process to build its client."""

    mode: str  # SINGLE, REDLOCK, CLUSTER or SENTINEL
    ports: tuple[int, ...]  # SINGLE: 1 port; REDLOCK: one per node; CLUSTER: startup nodes
    sentinel_port: int = 0
    service: str = ""
    min_replicas: int = 0
    replica_timeout: float = 0.25
    socket_timeout: float = 1.0
    node_timeout: float | None = None  # Redlock: None is the library's default (ttl / 200)
    max_poll: float | None = None  # the library's default: no polling
    # SINGLE/REDLOCK: LockClient.from_url(...) (True), or LockClient(redis.Redis(...)) with
    # redis-py's defaults, its default Retry included (False)
    from_url: bool = True


def _plain(port: int, timeout: float) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout
    )


def make_client(spec: ClientSpec) -> fencelock.LockClient:
    options: dict[str, Any] = {"max_poll": spec.max_poll, "socket_timeout": spec.socket_timeout}
    urls = [f"redis://127.0.0.1:{port}/0" for port in spec.ports]
    if spec.mode == SINGLE:
        if spec.from_url:
            return fencelock.LockClient.from_url(urls[0], **options)
        return fencelock.LockClient(_plain(spec.ports[0], spec.socket_timeout), **options)
    if spec.mode == REDLOCK:
        if spec.from_url:
            return fencelock.LockClient.from_url(urls, node_timeout=spec.node_timeout, **options)
        nodes = [_plain(port, spec.socket_timeout) for port in spec.ports]
        return fencelock.LockClient(nodes, node_timeout=spec.node_timeout, **options)
    if spec.mode == CLUSTER:
        cluster = redis.cluster.RedisCluster(
            startup_nodes=[
                redis.cluster.ClusterNode("127.0.0.1", port)  # type: ignore[no-untyped-call]
                for port in spec.ports
            ],
            socket_timeout=spec.socket_timeout,
            socket_connect_timeout=spec.socket_timeout,
        )
        return fencelock.LockClient(cluster, **options)
    if spec.mode == SENTINEL:
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            [("127.0.0.1", spec.sentinel_port)],
            socket_timeout=spec.socket_timeout,
            socket_connect_timeout=spec.socket_timeout,
        )
        master: redis.Redis = sentinel.master_for(spec.service)  # type: ignore[no-untyped-call]
        return fencelock.LockClient(
            master,
            min_replicas=spec.min_replicas,
            replica_timeout=spec.replica_timeout,
            **options,
        )
    raise ValueError(f"unknown mode {spec.mode!r}")


def close_client(client: fencelock.LockClient) -> None:
    """Close a client of ``make_client``, its cluster connections too (LockClient leaves a
    RedisCluster it was given open)."""
    cluster = getattr(client._wiring.topology, "redis", None)
    client.close()
    if isinstance(cluster, redis.cluster.RedisCluster):
        cluster.close()


def _plain_async(port: int, timeout: float) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout
    )


def make_async_client(spec: ClientSpec) -> fencelock.asyncio.LockClient:
    """``make_client``'s asyncio twin: the same servers and options, through ``redis.asyncio``
    (call it in the event loop that will use the client)."""
    options: dict[str, Any] = {"max_poll": spec.max_poll, "socket_timeout": spec.socket_timeout}
    urls = [f"redis://127.0.0.1:{port}/0" for port in spec.ports]
    client_class = fencelock.asyncio.LockClient
    if spec.mode == SINGLE:
        if spec.from_url:
            return client_class.from_url(urls[0], **options)
        return client_class(_plain_async(spec.ports[0], spec.socket_timeout), **options)
    if spec.mode == REDLOCK:
        if spec.from_url:
            return client_class.from_url(urls, node_timeout=spec.node_timeout, **options)
        nodes = [_plain_async(port, spec.socket_timeout) for port in spec.ports]
        return client_class(nodes, node_timeout=spec.node_timeout, **options)
    if spec.mode == CLUSTER:
        cluster = redis.asyncio.cluster.RedisCluster(
            startup_nodes=[
                redis.asyncio.cluster.ClusterNode("127.0.0.1", port) for port in spec.ports
            ],
            socket_timeout=spec.socket_timeout,
            socket_connect_timeout=spec.socket_timeout,
        )
        return client_class(cluster, **options)
    if spec.mode == SENTINEL:
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            [("127.0.0.1", spec.sentinel_port)],
            socket_timeout=spec.socket_timeout,
            socket_connect_timeout=spec.socket_timeout,
        )
        master: redis.asyncio.Redis = sentinel.master_for(spec.service)
        return client_class(
            master,
            min_replicas=spec.min_replicas,
            replica_timeout=spec.replica_timeout,
            **options,
        )
    raise ValueError(f"unknown mode {spec.mode!r}")


async def close_async_client(client: fencelock.asyncio.LockClient) -> None:
    """Close a client of ``make_async_client``, and what it leaves open: a RedisCluster it was
    given, a Sentinel master client and its connections to the sentinel."""
    given = getattr(client._wiring.topology, "redis", None)
    await client.close()
    if isinstance(given, redis.asyncio.cluster.RedisCluster):
        await given.aclose()
        return
    if given is None:  # Redlock: the client made (and closed) its own node clients
        return
    manager = getattr(given.connection_pool, "sentinel_manager", None)
    await given.aclose()  # closed already if the client owned it: harmless
    await given.connection_pool.disconnect()
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()


# -- libfaketime ---------------------------------------------------------------------------------

FAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/lib64/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
FAKETIME_MISSING = (
    "libfaketime is not installed (Debian/Ubuntu: apt-get install faketime): a node's clock "
    "cannot be moved without it"
)


def find_faketime() -> str | None:
    """The multithreaded libfaketime (the single-threaded one can deadlock valkey at start)."""
    for pattern in FAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


class NodeClock:
    """The wall clock of one server started under libfaketime: an offset in a file that
    libfaketime reads on every call (FAKETIME_NO_CACHE). The monotonic clock is left alone."""

    def __init__(self, directory: Path, binary: str, library: str) -> None:
        self.file = directory / "faketime-offset"
        self.offset = 0.0
        self.file.write_text("+0\n")
        self.wrapper = directory / "server-under-faketime"
        self.wrapper.write_text(
            "#!/bin/sh\n"
            f"export LD_PRELOAD='{library}'\n"
            f"export FAKETIME_TIMESTAMP_FILE='{self.file}'\n"
            "export FAKETIME_NO_CACHE=1\n"
            "export FAKETIME_DONT_FAKE_MONOTONIC=1\n"
            f"exec '{binary}' \"$@\"\n"
        )
        self.wrapper.chmod(self.wrapper.stat().st_mode | stat.S_IXUSR)

    def jump(self, seconds: float) -> None:
        """Move the node's wall clock forward by ``seconds`` (it stays moved)."""
        self.offset += seconds
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"+{self.offset:.3f}\n")
        os.replace(tmp, self.file)  # libfaketime never reads half a file


# -- topologies ----------------------------------------------------------------------------------


class Topology:
    """Lock servers for one scenario run."""

    mode = ""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.proxies: dict[int, TcpProxy] = {}  # node index -> proxy in front of it

    @property
    def servers(self) -> list[EmbeddedServer]:
        """The servers that hold locks (a nemesis may kill, pause or restart them)."""
        raise NotImplementedError

    def client_spec(self, **options: Any) -> ClientSpec:
        raise NotImplementedError

    def start(self) -> Topology:
        raise NotImplementedError

    def proxy(self, index: int) -> TcpProxy:
        """A TCP proxy in front of ``servers[index]``; workers connect through it (ask for it
        before ``client_spec``)."""
        if index not in self.proxies:
            self.proxies[index] = TcpProxy(self.servers[index].port)
        return self.proxies[index]

    def port_for_clients(self, index: int) -> int:
        proxy = self.proxies.get(index)
        return proxy.port if proxy is not None else self.servers[index].port

    restart_killed = True  # heal() restarts killed servers (not after a failover)

    def heal(self) -> None:
        """Undo whatever a nemesis left: proxies back to normal, paused servers resumed, killed
        ones restarted (empty)."""
        for proxy in self.proxies.values():
            with contextlib.suppress(RuntimeError):
                proxy.normal()
        for server in self.servers:
            if server.process is not None:
                server.resume()
            elif self.restart_killed:
                server.start()

    def key_pttls(self, key: str) -> list[tuple[str, int]]:
        """The PTTL of a lock ``key`` on every lock server (-2: no key, -1: no expiry)."""
        found = []
        for server in self.servers:
            with probe(server.port) as client:
                found.append((f"{server.port}", int(client.pttl(key))))
        return found

    def stop(self) -> None:
        for proxy in self.proxies.values():
            with contextlib.suppress(RuntimeError):
                proxy.close()
        self.proxies.clear()

    def __enter__(self) -> Topology:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Single(Topology):
    mode = SINGLE

    def __init__(self, binary: str, directory: Path) -> None:
        super().__init__(binary, directory)
        self.server: EmbeddedServer | None = None

    @property
    def servers(self) -> list[EmbeddedServer]:
        return [] if self.server is None else [self.server]

    def start(self) -> Single:
        self.server = start_server(lambda: EmbeddedServer(self.binary))
        return self

    def client_spec(self, **options: Any) -> ClientSpec:
        return ClientSpec(SINGLE, (self.port_for_clients(0),), **options)

    def stop(self) -> None:
        super().stop()
        if self.server is not None:
            self.server.stop()


class Redlock(Topology):
    mode = REDLOCK

    def __init__(self, binary: str, directory: Path, *, faketime: Sequence[int] = ()) -> None:
        super().__init__(binary, directory)
        self.faketime = tuple(faketime)
        self.clocks: dict[int, NodeClock] = {}
        self.clock_binaries: dict[int, str] = {}
        self.nodes: list[EmbeddedServer] = []

    @property
    def servers(self) -> list[EmbeddedServer]:
        return self.nodes

    def start(self) -> Redlock:
        library = find_faketime() if self.faketime else None
        if self.faketime and library is None:
            raise Unavailable(FAKETIME_MISSING)
        for i in range(REDLOCK_NODES):
            if i in self.faketime:
                assert library is not None
                self.nodes.append(self._start_clock_node(i, library))
            else:
                self.nodes.append(start_server(lambda: EmbeddedServer(self.binary)))
        return self

    def _start_clock_node(self, index: int, library: str) -> EmbeddedServer:
        """A node under libfaketime: the run's binary if it starts there, else valkey-server.
        (redis-server 7 with its bundled jemalloc hangs at start under libfaketime 0.9.10,
        "unexpected recursive calls to clock_gettime()"; valkey, built with libc malloc,
        does not.)"""
        candidates = [self.binary]
        with contextlib.suppress(ServerNotFound):
            candidates.append(find_server("valkey"))
        failures = []
        for n, binary in enumerate(dict.fromkeys(candidates)):
            directory = self.directory / f"clock-{index}-{n}"
            directory.mkdir(parents=True, exist_ok=True)
            clock = NodeClock(directory, binary, library)
            server = EmbeddedServer(str(clock.wrapper))
            try:
                server.start(timeout=CLOCK_NODE_START)
            except RuntimeError as exc:
                server.stop()
                failures.append(f"{binary}: {exc}")
                continue
            self.clocks[index] = clock
            self.clock_binaries[index] = binary
            return server
        raise Unavailable(f"no server binary starts under libfaketime: {'; '.join(failures)}")

    def client_spec(self, **options: Any) -> ClientSpec:
        ports = tuple(self.port_for_clients(i) for i in range(len(self.nodes)))
        return ClientSpec(REDLOCK, ports, **options)

    def stop(self) -> None:
        super().stop()
        for node in self.nodes:
            node.stop()


class ClusterTopology(Topology):
    mode = CLUSTER

    def __init__(self, binary: str, directory: Path, *, node_timeout_ms: int = 2000) -> None:
        super().__init__(binary, directory)
        self.cluster = Cluster(binary, node_timeout_ms=node_timeout_ms)

    @property
    def servers(self) -> list[EmbeddedServer]:
        return self.cluster.nodes

    def start(self) -> ClusterTopology:
        self.cluster.start()
        return self

    def client_spec(self, **options: Any) -> ClientSpec:
        return ClientSpec(CLUSTER, tuple(node.port for node in self.cluster.nodes), **options)

    def key_pttls(self, key: str) -> list[tuple[str, int]]:
        master = self.cluster.master_for_key(key)
        with probe(master.port) as client:
            return [(f"{master.port}", int(client.pttl(key)))]

    restart_killed = False

    def heal(self) -> None:
        super().heal()
        self.cluster.wait_ready()

    def stop(self) -> None:
        super().stop()
        self.cluster.stop()


class SentinelTopology(Topology):
    mode = SENTINEL
    SERVICE = "chaos"

    def __init__(self, binary: str, directory: Path) -> None:
        super().__init__(binary, directory)
        self.setup = SentinelSetup(binary, service_name=self.SERVICE)

    @property
    def servers(self) -> list[EmbeddedServer]:
        return list(self.setup.servers)

    def start(self) -> SentinelTopology:
        self.setup.start()
        return self

    def client_spec(self, **options: Any) -> ClientSpec:
        return ClientSpec(
            SENTINEL, (), sentinel_port=self.setup.sentinel_port, service=self.SERVICE, **options
        )

    def key_pttls(self, key: str) -> list[tuple[str, int]]:
        master = self.setup.master
        with probe(master.port) as client:
            return [(f"{master.port}", int(client.pttl(key)))]

    restart_killed = False  # a master killed in a failover stays down: its replica took over

    def stop(self) -> None:
        super().stop()
        self.setup.stop()


def make_topology(mode: str, binary: str, directory: Path, **options: Any) -> Topology:
    kinds: dict[str, type[Topology]] = {
        SINGLE: Single,
        REDLOCK: Redlock,
        CLUSTER: ClusterTopology,
        SENTINEL: SentinelTopology,
    }
    return kinds[mode](binary, directory, **options)


class Resource:
    """The fenced resource: a Redis server of its own, untouched by every nemesis."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._server: EmbeddedServer | None = None

    def start(self) -> Resource:
        self._server = start_server(lambda: EmbeddedServer(self.binary))
        return self

    @property
    def server(self) -> EmbeddedServer:
        assert self._server is not None, "not started"
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    def client(self) -> redis.Redis:
        return self.server.client()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def counter_key(name: str) -> str:
    return f"counter:{name}"
