# GENERATED from src/fencelock/_async/topology.py by tools/gen_sync.py: edit that file instead.
"""Where a lock's keys live, and how its requests get there: one server or a Cluster (this
module), or a Redlock quorum (``quorum.py``).

A topology reaches the servers (``send``: to the server of a key; ``send_all``: to every
node), watches wake-up channels, runs the primitives' and operators' own scripts, and says what
it can do (capability flags). The engine's questions about a grant are its ``grants``
(``grants.py``), written once for every topology.

A topology runs the requests a grant's kind gives it (``_core/kinds.py``) as its protocol
(``protocol.py``, one per client) says: scripts, or the native commands of the kind that stands
in, WAIT for replicas, the server check before the first grant.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Final

from redis.crc import key_slot
from redis.exceptions import RedisError

from .._backend import (
    SyncLoopGuard,
    SyncStateLock,
)
from .._core.inspection import NodeView, inspect_reply
from .._core.kinds import Kind
from .._core.natives import ScriptMode
from .._core.replies import (
    translate_error,
)
from .._core.stats import Counters
from .._scripts import INSPECT, Script
from .._transport import SyncClusterNode, SyncRedis, SyncRedisCluster, sync_node_client
from ..errors import LockConnectionError, LockError
from .grants import SyncGrants
from .protocol import SyncProtocol
from .transport import SyncRequester
from .waiter import Waiter, Watch

ATTEMPTS: Final = 2

server_logger = logging.getLogger("fencelock.server")
waiter_logger = logging.getLogger("fencelock.waiter")


class SyncTopology(abc.ABC):
    """What the lock asks of where its keys live, and what every topology shares."""

    # a release may hand the lock to a local waiter with one script (singleflight.py)
    local_handoff = True
    # a release script may grant the lock to the first queued waiter (wake="one")
    grants_by_release = True
    # contenders re-try after a random pause, so that split votes do not repeat (Redlock)
    jitters = False
    # every server that holds a name holds its one fencing counter (not so for Redlock's nodes)
    one_counter = True
    publish_command = "PUBLISH"

    waiters: dict[object, Waiter]
    protocol: SyncProtocol
    grants: SyncGrants

    def __init__(
        self,
        request_timeout: float,
        counters: Counters,
        owned: Sequence[SyncRedis] = (),
    ) -> None:
        # one request's bound ("one request timeout" in the README): waiting for a connection,
        # connecting and the reply included
        self.request_timeout = request_timeout
        self.counters = counters
        self.owned = list(owned)  # fencelock's own clients: closed with the topology
        # every request goes through it (closed when a dropped client is reaped, too)
        self.requester = SyncRequester(request_timeout)
        self._loop = SyncLoopGuard()

    @property
    def addresses(self) -> list[str]:
        return [self.address]

    @property
    @abc.abstractmethod
    def address(self) -> str: ...

    @abc.abstractmethod
    def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]: ...

    def slot_of(self, key: str) -> int:
        """The Cluster slot of ``key``: one multi-key script call must stay within one slot.
        (0 elsewhere: everything can share a call.)"""
        return 0

    def one_call(self, keys: Sequence[str]) -> bool:
        """Whether one script call can reach every key of ``keys`` (on a Cluster: one slot)."""
        return True

    def wait(self, watch: Watch, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds."""
        counters = self.counters
        counters.add(waiting=1)
        woken = False
        try:
            woken = watch.event.wait(timeout)
        finally:
            counters.add(waiting=-1, wakeups=int(woken), polls=int(not woken))
        return woken

    def supports(self, kind: Kind) -> bool:
        """Whether grants of ``kind`` can be made here."""
        return True

    @property
    def read_timeout(self) -> float:
        """One operator's request's bound (inspect, SCAN, force_release)."""
        return self.request_timeout

    def abandon(self) -> None:
        """The client was dropped unclosed: the listeners end by themselves (they only set
        flags here: this runs in the garbage collector)."""
        for waiter in list(self.waiters.values()):
            waiter.abandon()

    def pools(self) -> list[Any]:
        """The connection pools of fencelock's own clients (reaped when dropped unclosed)."""
        return [node.connection_pool for node in self.owned]

    def close(self) -> None:
        self.grants.detached.close()  # the give-backs first
        self.requester.close()
        for waiter in list(self.waiters.values()):
            waiter.close()
            waiter.redis.connection_pool.disconnect()  # its own pool
        for node in self.owned:
            node.close()
            # a pool of fencelock's own is not closed by aclose()
            node.connection_pool.disconnect()

    @abc.abstractmethod
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[Watch]: ...

    # -- what the operators' tools and the primitives' own scripts need ------------------------

    @abc.abstractmethod
    def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        """``script``'s reply from every server that may hold ``keys`` (one, or each Redlock
        node), each within one request's bound (``read``: a read, sent without WAIT). A server's
        failure is the ``LockError`` of ``what`` in the list, not raised."""

    @abc.abstractmethod
    def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        """The grant at ``keys`` (inspect.lua's) as the servers show it (Redlock: a majority);
        None when not held."""

    @abc.abstractmethod
    def publish(self, channel: str, message: str) -> None:
        """Publish ``message`` on ``channel`` wherever its waiters listen, best effort, within
        one request's bound."""

    @abc.abstractmethod
    def scan(self, match: str, count: int) -> Iterator[bytes]:
        """Every key matching ``match`` on every server (SCAN, each call within one request's
        bound). A server that fails raises, unless the others answered enough for the listing
        to be whole (Redlock: a held name is on a majority)."""

    @abc.abstractmethod
    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        """``script``'s reply from the one server of ``keys``, within one request timeout; a
        failure raised as the ``LockError`` of ``what``."""


class SyncOneServer(SyncTopology):
    """One server's word is final: a plain Redis, or a Sentinel master (``min_replicas``: every
    grant and extension waits for that many replicas to acknowledge it)."""

    def __init__(
        self,
        redis: SyncRedis | SyncRedisCluster,
        waiters: dict[object, Waiter],
        request_timeout: float,
        counters: Counters,
        mode: ScriptMode | None = None,
        *,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        owned: Sequence[SyncRedis] = (),
    ) -> None:
        super().__init__(request_timeout, counters, owned)
        self.redis = redis
        self.waiters = waiters
        mode = ScriptMode("auto", self.publish_command) if mode is None else mode
        self.protocol = SyncProtocol(
            self,
            mode,
            request_timeout,
            one_server=not isinstance(redis, SyncRedisCluster),
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
        )
        # (the requester's own method: the hot path of every acquire stays short)
        self.send = partial(self.requester.request, redis)
        self.grants = SyncGrants(self.protocol, request_timeout, self.send)
        if min_replicas:
            # no local hand-off, no grant by a release: one script cannot wait for replicas
            self.local_handoff = self.grants_by_release = False

    @property
    def address(self) -> str:
        return server_address(self.redis)

    def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        """``command`` to the server (a Cluster: to every master)."""
        return self.requester.fan_out(self._nodes(), command, timeout)

    def _nodes(self) -> Sequence[SyncRedis | SyncClusterNode]:
        redis = self.redis
        return redis.get_primaries() if isinstance(redis, SyncRedisCluster) else [redis]

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        try:
            reply, _ = self.protocol.script(script, keys, args, self.request_timeout, what)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        return reply

    def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        try:
            reply, _ = self.protocol.script(
                script, keys, args, self.request_timeout, what, read=read
            )
        except RedisError as exc:
            return [translate_error(exc, what)]
        return [reply]

    def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        [reply] = self.run_all(INSPECT, keys, (listed,), what, read=True)
        if isinstance(reply, LockError):
            raise reply
        view = inspect_reply(reply)
        return view if view.holder else None

    def publish(self, channel: str, message: str) -> None:
        try:
            command = (self.publish_command, channel, message)
            self.send([command], self.request_timeout, channel)
        except RedisError as exc:
            raise translate_error(exc, f"publish on {channel!r}") from exc

    def scan(self, match: str, count: int) -> Iterator[bytes]:
        for node in self._nodes():
            for key in scan_node(self.requester, node, match, count, self.request_timeout):
                yield key

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[Watch]:
        """Subscribe to a lock's wake-up channel and yield what a message on it sets. The
        subscription is confirmed within ``timeout`` seconds (None: one request timeout);
        ``what``: the object that waits, for errors. A client that runs no scripts waits by
        re-trying instead (at the end of the holder's lease, or every ``max_poll``) where
        subscribing is refused: a watch never set."""
        self._loop.check()
        return self.protocol.watch(self.waiters[0].watch(channel, what, timeout=timeout))


class SyncCluster(SyncOneServer):
    """A ``RedisCluster``: each lock lives on the node of its hash slot (every key of a lock is
    in one slot, thanks to the hash tag); wake-ups use sharded pub/sub, renewals batch per slot."""

    # a plain PUBLISH on a Cluster is broadcast to every node
    publish_command = "SPUBLISH"

    def __init__(self, redis: SyncRedisCluster, request_timeout: float, counters: Counters):
        # one waiter per node, made as channels on it are first watched
        super().__init__(redis, {}, request_timeout, counters)
        self._guard = SyncStateLock()

    def slot_of(self, key: str) -> int:
        return key_slot(key.encode())

    def one_call(self, keys: Sequence[str]) -> bool:
        return len({self.slot_of(key) for key in keys}) == 1

    @contextmanager
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> Iterator[Watch]:
        self._loop.check()
        with self._shard_waiter(channel).watch(channel, what, timeout=timeout) as watch:
            yield watch

    def _shard_waiter(self, channel: str) -> Waiter:
        """The waiter on the node that serves ``channel``'s slot: sharded pub/sub messages are
        only delivered by that node."""
        cluster = self.redis
        assert isinstance(cluster, SyncRedisCluster)
        node = cluster.get_node_from_key(channel)
        if node is None:
            raise LockConnectionError(f"no Cluster node serves {channel!r}")
        with self._guard:
            waiter = self.waiters.get(node.name)
            if waiter is None:
                redis = sync_node_client(node, self.request_timeout)
                waiter = Waiter(redis, confirm_timeout=self.request_timeout, sharded=True)
                self.waiters[node.name] = waiter
        return waiter


def scan_node(
    requester: SyncRequester,
    node: SyncRedis | SyncClusterNode,
    match: str,
    count: int,
    timeout: float,
) -> Iterator[bytes]:
    """The keys of one server matching ``match`` (SCAN, each call within ``timeout``)."""
    cursor = 0
    while True:
        command = ("SCAN", cursor, "MATCH", match, "COUNT", count)
        [reply] = requester.fan_out([node], command, timeout)
        if isinstance(reply, RedisError):
            # (the server, not the pattern: that is fencelock's key layout, not the user's)
            where = node.name if isinstance(node, SyncClusterNode) else server_address(node)
            raise translate_error(reply, f"listing the names held on {where}")
        cursor = int(reply[0])
        for key in reply[1]:
            yield key
        if cursor == 0:
            return


def server_address(redis: SyncRedis | SyncRedisCluster) -> str:
    """host:port (or the socket path) of a client's server, for messages."""
    pool = getattr(redis, "connection_pool", None)  # (a RedisCluster has one per node)
    if pool is None:
        return "the Cluster's default node"
    options = pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"
