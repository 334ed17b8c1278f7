# GENERATED from src/fencelock/_async/transport.py by tools/gen_sync.py: edit that file instead.
"""How fencelock's requests reach the servers: the transport policy, written once.

* Every request is bounded by the deadline of the call it serves: waiting for a free connection,
  connecting and the reply all count (a renewal must not outlive the lease it renews; a lock
  call must meet its documented bound).
* On connections of fencelock's own per server, kept idle between requests, made from the
  settings of fencelock's own client (or of a Cluster node), with one connect attempt: never
  redis-py's retries, nor a pool's connect with the full socket timeout.
* At most the pool's ``max_connections`` requests in flight per server; more wait for one to
  end, within their deadline.
* NOSCRIPT (SCRIPT FLUSH, a restart: nothing ran) is answered by sending the script's EVAL once.
* A connection that failed, or timed out with a reply maybe still to come, is closed: never
  reused with a late reply pending. A request sent that got no reply in time raises
  ``NoReply``: the server, silent, may still run it (an acquire's grant is then given back
  late: ``_core/giveback.py``). A connection the server closed ran it or not by then.
* On a Cluster, a request goes to the node of its key's slot; MOVED, ASK, TRYAGAIN, CLUSTERDOWN
  or a node that failed over send it through the cluster client, which re-learns the slots, in
  the time left; while a migration or a failover keeps answering TRYAGAIN or CLUSTERDOWN
  (nothing ran), again after a pause, until the deadline.
* Redlock's fan-out writes to every node at once, then reads the replies, all bounded by one
  node timeout counted from the writes.
* asyncio: a caller cancelled with its request in flight gets the cancellation at once, while
  the request goes on within its bound (it may be granting something): whoever gives back for
  the caller goes after it (``async_inflight``).

The few primitives that differ between asyncio and threads (a slot with a deadline, connecting,
reading a reply, a Cluster node's settings) are the ``async_*``/``sync_*`` pairs of
``_transport.py``.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Sequence
from typing import Any, Final

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    ConnectionError,
    NoScriptError,
    RedisError,
    TryAgainError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._backend import SyncLoopGuard, sync_at_once, sync_cancelled, sync_sleep
from .._core.replies import NoReply
from .._core.resp import Packer
from .._transport import (
    SyncClusterNode,
    SyncConnection,
    SyncRedis,
    SyncRedisCluster,
    SyncSlots,
    Template,
    sync_carry_on,
    sync_connect,
    sync_drop,
    sync_node_of,
    sync_one,
    sync_read,
    sync_take,
    sync_template,
    sync_within,
)

# A pool of this size (redis-py's default) sets no limit: its requests take no slot.
UNLIMITED: Final = 2**31
# A Cluster node's replies that mean "not here" (MOVED is an AskError) or "not now": TRYAGAIN (a
# request whose keys a migration has split between two nodes), CLUSTERDOWN (a failover under
# way). Nothing ran: the request goes through the cluster client, which follows them.
REDIRECTED: Final = (AskError, TryAgainError, ClusterDownError)
NOT_NOW: Final = (TryAgainError, ClusterDownError)
AGAIN_AFTER: Final = 0.05  # seconds between two sends while the cluster answers "not now"


class _Server:
    """fencelock's own connections to one server."""

    __slots__ = ("idle", "packer", "slots", "template", "unreachable_until")

    def __init__(self, template: Template, packer: Packer) -> None:
        self.template = template
        self.packer = packer
        size = template.max_connections
        self.slots = SyncSlots(size) if size < UNLIMITED else None
        self.idle: list[SyncConnection] = []
        # a fan-out could not connect to it: not tried again before (monotonic time)
        self.unreachable_until = 0.0

    def reachable(self) -> bool:
        return time.monotonic() >= self.unreachable_until

    def take(self, deadline: float) -> None:
        if self.slots is not None:
            sync_take(self.slots, deadline)

    def free(self) -> None:
        if self.slots is not None:
            self.slots.release()

    def connected(self, deadline: float) -> SyncConnection:
        """An idle connection of ours to the server, else a new one, ready by ``deadline``."""
        try:
            conn = self.idle.pop()
        except IndexError:
            conn = self.template.make()
        try:
            sync_connect(conn, deadline)
        except BaseException as exc:
            sync_drop(conn, exc)
            raise
        return conn

    def fan_out_connection(self) -> SyncConnection | RedisError:
        """A fan-out's connection to the server, its slot taken, by its connect timeout, or
        the ``RedisError`` that kept it from one. A server it could not connect to is not tried
        again for one connect timeout: the rounds of one call (one sent again, the give-back
        after it) cost it one in all, not one each."""
        if not self.reachable():
            return ConnectionError("connecting failed a moment ago: not tried again yet")
        connect = self.template.connect_timeout
        deadline = time.monotonic() + connect
        try:
            self.take(deadline)
        except RedisError as exc:
            return exc
        try:
            return self.connected(deadline)
        except BaseException as exc:
            self.free()
            if isinstance(exc, ConnectionError | RedisTimeoutError):
                self.unreachable_until = time.monotonic() + connect
            if isinstance(exc, RedisError):
                return exc
            raise


class SyncRequester:
    """Requests bounded by a deadline of their own, on connections of their own (see above).
    ``timeout``: how long connecting may take where a Cluster node's settings do not say."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        # per server: fencelock's client of it, or a Cluster node's name
        self._servers: dict[object, _Server] = {}
        self._packers: dict[tuple[str, str], Packer] = {}  # one per encoding in use
        self._closed = False
        self._loop = SyncLoopGuard()  # its connections are the first loop's
        _requesters.add(self)

    def _server(self, target: SyncRedis | SyncClusterNode) -> _Server:
        key = target.name if isinstance(target, SyncClusterNode) else target
        server = self._servers.get(key)
        if server is None:
            template = sync_template(target, self.timeout)
            packer = self._packers.setdefault(template.encoding, Packer(*template.encoding))
            server = self._servers.setdefault(key, _Server(template, packer))
        return server

    def request(
        self,
        redis: SyncRedis | SyncRedisCluster,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        """Send ``commands`` on one connection (a pipeline; on a Cluster, to the node of
        ``key``) and return their replies, error replies included; ``TimeoutError`` after
        ``timeout`` seconds, connecting included (at once, sending nothing, if none is left),
        ``NoReply`` if the commands were sent by then.
        ``noscript``: sent instead of the first command (an EVALSHA) if the server answers
        NOSCRIPT."""
        self._loop.check()
        if timeout <= 0:
            raise RedisTimeoutError("no time left to send the request")
        deadline = time.monotonic() + timeout
        cluster: SyncRedisCluster | None = None
        # A client of one server met before is a key of its own (a Cluster's keys are its
        # nodes): it is not asked again whether it is a Cluster (a slow isinstance: redis-py's
        # Cluster class is a typing Protocol's).
        server = self._servers.get(redis)
        if server is None:
            if isinstance(redis, SyncRedisCluster):
                cluster, node = redis, sync_node_of(redis, key)
                if node is None:  # the cluster client does not know yet: it finds out
                    return self._rerouted(redis, commands, deadline, noscript)
                server = self._server(node)
            else:
                server = self._server(redis)
        slots = server.slots
        if slots is not None:
            sync_take(slots, deadline)
        handed = moved = False
        try:
            conn = server.connected(deadline)
            replies: list[Any] = []
            try:
                # Sent here, not in a helper: the hot path of every lock call stays short.
                conn.send_packed_command([server.packer.pack(commands)], False)
                while len(replies) < len(commands):
                    replies.append(sync_read(conn, deadline))
                if noscript is not None and isinstance(replies[0], NoScriptError):
                    commands, replies = [noscript, *commands[1:]], []
                    conn.send_packed_command([server.packer.pack(commands)], False)
                    while len(replies) < len(commands):
                        replies.append(sync_read(conn, deadline))
            except BaseException as exc:
                if sync_cancelled(exc):  # the caller's cancellation, with the request sent
                    sync_carry_on(self._rest(server, conn, replies, len(commands), deadline))
                    handed = True
                    raise
                sync_drop(conn, exc)  # else late replies come next
                if cluster is not None and isinstance(exc, ConnectionError):
                    moved = True  # the node failed over
                elif isinstance(exc, RedisTimeoutError):  # sent: the server may still run it
                    raise NoReply(str(exc)) from exc
                else:
                    raise
            else:
                if self._closed:
                    sync_drop(conn)
                else:
                    server.idle.append(conn)
                moved = cluster is not None and isinstance(replies[0], REDIRECTED)
        except ConnectionError:  # (from connecting: the node is gone, say after a failover)
            if cluster is None:
                raise
            moved = True
        finally:
            if not handed and slots is not None:
                slots.release()
        if moved and cluster is not None:
            try:
                return self._rerouted(cluster, commands, deadline, noscript)
            except RedisTimeoutError as exc:  # (sent once already)
                raise NoReply(str(exc)) from exc
        return replies

    def _rest(
        self,
        server: _Server,
        conn: SyncConnection,
        replies: list[Any],
        count: int,
        deadline: float,
    ) -> None:
        """The replies still to come of a request whose caller was cancelled (bounded by the
        request's deadline); then its connection is free again."""
        try:
            while len(replies) < count:
                replies.append(sync_read(conn, deadline))
        except BaseException as exc:
            sync_drop(conn, exc)
            raise
        else:
            server.idle.append(conn)
        finally:
            server.free()

    def _rerouted(
        self,
        cluster: SyncRedisCluster,
        commands: Sequence[Sequence[Any]],
        deadline: float,
        noscript: Sequence[Any] | None,
    ) -> list[Any]:
        """Through the cluster client, which re-learns which node serves the slot (and sends it
        again on TRYAGAIN and CLUSTERDOWN a few times), in the time left: again, after a pause,
        while the cluster answers "not now" and the deadline allows."""
        assert len(commands) == 1  # (no WAIT on a Cluster)
        while True:
            try:
                replies = sync_within(
                    deadline - time.monotonic(), sync_one, cluster, commands[0]
                )
                if noscript is not None and isinstance(replies[0], NoScriptError):
                    replies = sync_within(
                        deadline - time.monotonic(), sync_one, cluster, noscript
                    )
            except ClusterError:  # redis-py's "TTL exhausted": redirected at each of its tries
                if deadline - time.monotonic() <= AGAIN_AFTER:
                    raise
            else:
                if (
                    not isinstance(replies[0], NOT_NOW)
                    or deadline - time.monotonic() <= AGAIN_AFTER
                ):
                    return replies
            sync_sleep(AGAIN_AFTER)

    def fan_out(
        self,
        nodes: Sequence[SyncRedis | SyncClusterNode],
        command: Sequence[Any],
        timeout: float,
    ) -> list[Any]:
        """Send ``command`` to every node at once; per node, its reply or the ``RedisError`` it
        raised (a node silent for ``timeout`` seconds gets a ``NoReply``).

        Connecting is not part of ``timeout``: every node's connection is made first, all at
        once, each bounded by its own connect timeout, and ``timeout`` counts from the writes
        (a fresh client's first handshake must not eat a node timeout of a few milliseconds).
        Past it, a reply already arrived is still taken."""
        self._loop.check()
        servers = [self._server(node) for node in nodes]
        made = self._connections(servers)
        replies: list[Any] = [None] * len(nodes)
        waiting: list[tuple[int, _Server, SyncConnection]] = []  # connected, not sent yet
        for i, (server, conn) in enumerate(zip(servers, made, strict=True)):
            if isinstance(conn, RedisError):
                replies[i] = conn
            else:
                waiting.append((i, server, conn))
        sent: list[tuple[int, _Server, SyncConnection]] = []
        packer, data = None, b""
        try:
            while waiting:
                i, server, conn = waiting[0]
                if server.packer is not packer:
                    packer, data = server.packer, server.packer.pack((command,))
                try:
                    conn.send_packed_command([data], False)
                except RedisError as exc:
                    del waiting[0]
                    replies[i] = exc
                    self._end(server, conn, ok=False)
                    continue
                sent.append(waiting.pop(0))
        except BaseException as exc:
            for _, server, conn in sent + waiting:
                self._end(server, conn, ok=False, error=exc)
            raise
        deadline = time.monotonic() + timeout
        cancelled: BaseException | None = None
        for n, (i, server, conn) in enumerate(sent):
            while True:
                try:
                    replies[i] = sync_read(conn, deadline)
                except RedisError as exc:  # timed out (a reply may come late), or broken
                    timed_out = isinstance(exc, RedisTimeoutError)
                    replies[i] = NoReply(str(exc)) if timed_out else exc
                    self._end(server, conn, ok=False)
                except BaseException as exc:
                    if sync_cancelled(exc):
                        # The requests sent finish first (bounded as above): a release sent
                        # right after on another connection could otherwise overtake them.
                        cancelled = exc
                        continue
                    for _, other, left in sent[n:]:
                        self._end(other, left, ok=False, error=exc)
                    raise
                else:
                    self._end(server, conn, ok=True)
                break
        if cancelled is not None:
            raise cancelled
        return replies

    def _connections(self, servers: Sequence[_Server]) -> list[Any]:
        """Per server, a connection of ours with its slot taken, or the ``RedisError`` that
        kept it from one, each by the server's connect timeout: idle ones (the hot path), and
        those not to be tried now, in this task; where more than one connection is to be made,
        those all at once (one after another, servers that do not answer would cost a connect
        timeout each, and a lock call that many past its bound)."""
        made: list[Any] = [None] * len(servers)
        to_make: list[int] = []
        try:
            for i, server in enumerate(servers):
                if len(servers) == 1 or server.idle or not server.reachable():
                    made[i] = server.fan_out_connection()
                else:
                    to_make.append(i)
            if len(to_make) == 1:
                made[to_make[0]] = servers[to_make[0]].fan_out_connection()
            elif to_make:

                def unused(n: int, conn: object) -> None:
                    if isinstance(conn, SyncConnection):
                        self._end(servers[to_make[n]], conn, ok=False)

                calls = [servers[i].fan_out_connection for i in to_make]
                for i, conn in zip(to_make, sync_at_once(calls, unused), strict=True):
                    made[i] = conn
                failure = next((c for c in made if isinstance(c, BaseException)
                                and not isinstance(c, RedisError)), None)  # fmt: skip
                if failure is not None:  # (not a server's failure: a bug, an interrupt)
                    raise failure
        except BaseException:
            for server, conn in zip(servers, made, strict=True):
                if conn is not None and not isinstance(conn, BaseException):
                    self._end(server, conn, ok=False)
            raise
        return made

    def _end(
        self, server: _Server, conn: SyncConnection, ok: bool, error: BaseException | None = None
    ) -> None:
        """A fan-out's request on ``conn`` ended (with ``error``, if it failed): its slot is
        free, and ``conn`` is kept if ``ok`` (else closed: broken, or a late reply may come)."""
        server.free()
        if ok and not self._closed:
            server.idle.append(conn)
        else:
            sync_drop(conn, error)

    def close(self) -> None:
        """Close the idle connections; those in use are closed as their requests end."""
        self._closed = True
        for server in list(self._servers.values()):
            while server.idle:
                sync_drop(server.idle.pop())

    def _forget(self) -> None:
        """In a child process: the connections are the parent's."""
        self._servers = {}


_requesters: weakref.WeakSet[SyncRequester] = weakref.WeakSet()


def _forked() -> None:
    for requester in list(_requesters):
        requester._forget()


os.register_at_fork(after_in_child=_forked)
