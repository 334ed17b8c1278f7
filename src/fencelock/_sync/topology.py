# GENERATED from src/fencelock/_async/topology.py by tools/gen_sync.py: edit that file instead.
"""Where a lock's keys live, and how its requests get there: one server or a Cluster (this
module), or a Redlock quorum (``quorum.py``).

A topology answers the few questions the lock's lifecycle asks (try to acquire, release, renew
a batch, is it held, watch a wake-up channel) and says what it can do (capability flags). The
lock (``lock.py``, ``contention.py``, ``handoff.py``) runs the lifecycle once for all of them.

Every request is bounded by the deadline of the call it serves: a request that timed out, or
whose connection broke (a Sentinel failover closes every client connection), is sent once more,
in the time left. With the same holder token it cannot count twice (acquire.lua).

A topology runs the requests a grant's kind gives it (``_core/kinds.py``) as its protocol
(``protocol.py``, one per client) says: scripts, or the native commands of the kind that stands
in, WAIT for replicas, the server check before the first grant.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import time
from collections.abc import Iterator, Awaitable, Sequence
from contextlib import contextmanager
from typing import Any, Final

from redis.crc import key_slot
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from .._backend import (
    SyncDetached,
    SyncLoopGuard,
    SyncStateLock,
    sync_checkpoint,
    sync_shield,
    sync_wait_done,
)
from .._core.inspection import NodeView, inspect_reply
from .._core.kinds import Kind, LeaseSpec, Released, per_grant, raised, renewal
from .._core.lease import arrived_late, time_left
from .._core.natives import ScriptMode
from .._core.replies import (
    Busy,
    Granted,
    check_replicated,
    renew_reply,
    reserved_block,
    translate_error,
)
from .._core.stats import Counters
from .._keys import ttl_to_ms
from .._scripts import INSPECT, RENEW, Script
from .._transport import SyncClusterNode, SyncRedis, SyncRedisCluster, sync_node_client
from ..errors import LockConnectionError, LockError, ScriptsRequired
from .protocol import SyncProtocol
from .transport import SyncRequester
from .waiter import Waiter, Watch

ATTEMPTS: Final = 2

server_logger = logging.getLogger("fencelock.server")
waiter_logger = logging.getLogger("fencelock.waiter")


class GaveBack(Exception):
    """A grant came back after its lease and was given back. Its holder token must not be used
    again: the give-back (or a copy redis-py re-sent) may reach the server later still, and it
    would delete a grant made later to the same token."""


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
        # give-backs left to finish when their caller was cancelled (finished by close(), or
        # as the loop shuts down)
        self.detached = SyncDetached(request_timeout)
        self._loop = SyncLoopGuard()

    def time_left(self, deadline: float | None) -> float:
        return time_left(deadline, self.request_timeout, time.monotonic())

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

    def give_back(
        self,
        spec: LeaseSpec,
        holder: str,
        deadline: float | None = None,
        after: Awaitable[object] | None = None,
    ) -> bool:
        """Give back what ``holder`` may have been granted, best effort, within what is left of
        the bound of the call whose ``deadline`` it serves (``after``: a request of that call
        still in flight, answered or cut off by its own bound first, so that the give-back
        cannot overtake it). No time left (the server did not answer for all that): not sent,
        and the lease expires on its own."""
        if after is not None:
            sync_wait_done(after)
        try:
            return (self.release(spec, holder, timeout=self.time_left(deadline))).freed
        except (RedisError, LockError):  # unreachable: the lease expires on its own
            return False

    def abandon(self) -> None:
        """The client was dropped unclosed: the listeners end by themselves (they only set
        flags here: this runs in the garbage collector)."""
        for waiter in list(self.waiters.values()):
            waiter.abandon()

    def pools(self) -> list[Any]:
        """The connection pools of fencelock's own clients (reaped when dropped unclosed)."""
        return [node.connection_pool for node in self.owned]

    def close(self) -> None:
        self.detached.close()  # the give-backs first
        self.requester.close()
        for waiter in list(self.waiters.values()):
            waiter.close()
            waiter.redis.connection_pool.disconnect()  # its own pool
        for node in self.owned:
            node.close()
            # a pool of fencelock's own is not closed by aclose()
            node.connection_pool.disconnect()

    # -- the interface: what differs --------------------------------------------------------

    @abc.abstractmethod
    def try_acquire(
        self,
        spec: LeaseSpec,
        holder: str,
        depth: int = 0,
        block: int = 1,
        waiter: str = "",
        *,
        deadline: float | None = None,
    ) -> Granted | Busy: ...

    @abc.abstractmethod
    def release(
        self, spec: LeaseSpec, holder: str, leaving: str = "", timeout: float | None = None
    ) -> Released: ...

    @abc.abstractmethod
    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> Sequence[int | LockError]: ...

    @abc.abstractmethod
    def held(self, spec: LeaseSpec, holder: str) -> bool: ...

    @abc.abstractmethod
    def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy: ...

    @abc.abstractmethod
    def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool: ...

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
        if min_replicas:
            # no local hand-off, no grant by a release: one script cannot wait for replicas
            self.local_handoff = self.grants_by_release = False

    def send(
        self,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        """Send ``commands`` on one connection to the server of ``key`` within ``timeout``
        seconds: their replies, error replies as values (``noscript``: sent instead of the first
        command if the server answers NOSCRIPT)."""
        self._loop.check()
        return self.requester.request(self.redis, commands, timeout, key, noscript)

    @property
    def address(self) -> str:
        return server_address(self.redis)

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
        redis = self.redis
        nodes: Sequence[SyncRedis | SyncClusterNode] = (
            redis.get_primaries() if isinstance(redis, SyncRedisCluster) else [redis]
        )
        for node in nodes:
            for key in scan_node(self.requester, node, match, count, self.request_timeout):
                yield key

    # -- the lock's questions ---------------------------------------------------------------

    def try_acquire(
        self,
        spec: LeaseSpec,
        holder: str,
        depth: int = 0,
        block: int = 1,
        waiter: str = "",
        *,
        deadline: float | None = None,
    ) -> Granted | Busy:
        """One try at the lock, ended by the caller's ``deadline`` (None: none) plus one
        request timeout however often the server fails to answer. ``GaveBack`` when the grant
        came too late to be used."""
        protocol = self.protocol
        if not protocol.server_checked:
            protocol.check_server(spec.keys.lock)
        kind = spec.kind if protocol.runs_scripts else protocol.stand_in(spec)
        self._loop.check()
        key, wait, spelled = spec.acquire_keys[0], protocol.wait, protocol.commands
        commands, noscript = kind.acquire_request(spec, holder, depth, block, waiter, spelled)
        attempt, first = 1, None
        while True:
            sent_at = time.monotonic()
            try:
                # (not through self.request: the hot path of every acquire stays short)
                sent = [*commands, *wait] if wait else commands
                replies = self.requester.request(
                    self.redis, sent, self.time_left(deadline), key, noscript
                )
                acked = int(raised(replies.pop())) if wait else None
                result = kind.acquire_result(replies)
            except (TimeoutError, ConnectionError) as exc:
                if attempt < ATTEMPTS and self.time_left(deadline) > 0:
                    attempt, first = attempt + 1, exc
                    continue
                raise translate_error(unanswered(first, exc), spec.what) from exc
            except RedisError as exc:
                if not protocol.refused(exc, key):
                    raise translate_error(exc, spec.what) from exc
                # nothing ran: again, without scripts
                kind = protocol.stand_in(spec)
                commands, noscript = kind.acquire_request(
                    spec, holder, depth, block, waiter, protocol.commands
                )
                continue
            sync_checkpoint()
            if isinstance(result, Busy):
                return result
            check_replicated(acked, protocol.min_replicas, f"grant of {spec.what}")
            if depth == 0 and arrived_late(sent_at, spec.ttl, time.monotonic()):
                sync_shield(self.give_back(spec, holder, deadline))
                raise GaveBack
            granted = reserved_block(result.fence, block)
            return Granted(
                granted.fence,
                reserved=granted.reserved,
                sent_at=sent_at,
                more_fences=result.more_fences,
            )
        raise AssertionError("unreachable")

    def release(
        self, spec: LeaseSpec, holder: str, leaving: str = "", timeout: float | None = None
    ) -> Released:
        """Release ``holder``'s grant (``leaving``: a queue entry removed first, a simple lock's
        waiter giving up), within ``timeout`` seconds (default: one request timeout)."""
        protocol = self.protocol
        kind = protocol.kind_of(spec)
        commands, noscript = kind.release_request(spec, holder, leaving, protocol.commands)
        bound = self.request_timeout if timeout is None else timeout
        try:
            replies, _ = protocol.request(commands, noscript, bound, spec.release_keys[0])
            return kind.release_result(replies)
        except RedisError as exc:
            if protocol.refused(exc, spec.release_keys[0]):  # nothing ran: again
                return self.release(spec, holder, leaving, timeout)
            raise translate_error(exc, spec.what) from exc

    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> list[int | LockError]:
        """Renew a batch of leases (each ``specs[i]``'s grant of ``holders[i]``, for
        ``ttls[i]`` seconds): per lease, ``RENEWED``, ``GONE`` or ``TAKEN`` (replies.py), or
        the error that kept it from being renewed. Raises when the server cannot be reached,
        or the replicas did not acknowledge (a failover could undo the renewal)."""
        protocol = self.protocol
        ttls_ms = [ttl_to_ms(ttl) for ttl in ttls]
        renewed = protocol.renew_natively(specs, holders, ttls_ms, timeout, what)
        if renewed is not None:
            return renewed
        keys, args = renewal(specs, holders, ttls_ms)
        try:
            reply, acked = protocol.script(RENEW, keys, args, timeout, what)
        except ScriptsRequired:
            if not protocol.switches:
                raise
            return self.renew(specs, holders, ttls, timeout, what)  # (refused just now)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        check_replicated(acked, protocol.min_replicas, what)
        return per_grant(specs, renew_reply(reply, len(keys) // 2))

    def held(self, spec: LeaseSpec, holder: str) -> bool:
        """Whether the server shows ``holder`` holding the grant. A read is safe to send again,
        within one request timeout in all."""
        key, kind = spec.keys.lock, spec.kind
        commands = kind.held_commands(spec.keys, holder)
        self._loop.check()
        end = time.monotonic() + self.request_timeout
        first = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                replies = self.requester.request(
                    self.redis, commands, end - time.monotonic(), key
                )
            except (TimeoutError, ConnectionError) as exc:
                if attempt < ATTEMPTS and time.monotonic() < end:
                    first = exc
                    continue
                raise translate_error(unanswered(first, exc), spec.what) from exc
            except RedisError as exc:
                raise translate_error(exc, spec.what) from exc
            if isinstance(replies[0], RedisError):
                if "WRONGTYPE" in str(replies[0]):
                    return False  # a grant of another kind holds the name now
                raise translate_error(replies[0], spec.what) from replies[0]
            return kind.held_reply(replies, holder)
        raise AssertionError("unreachable")

    def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy:
        """One request: the lease of ``holder``'s grant restarts at ``ttl_ms`` and a block of
        fencing tokens is reserved for a streak of local hand-offs."""
        protocol = self.protocol
        kind = protocol.kind_of(spec)
        commands, noscript = kind.handoff_request(
            spec, holder, ttl_ms, block, protocol.commands
        )
        try:
            replies, _ = protocol.request(
                commands, noscript, self.request_timeout, spec.acquire_keys[0]
            )
            return kind.handoff_result(replies)
        except RedisError as exc:
            if protocol.refused(exc, spec.acquire_keys[0]):  # nothing ran: again
                return self.hand_off(spec, holder, ttl_ms, block)
            raise translate_error(exc, spec.what) from exc

    def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool:
        raise AssertionError("one server's tokens need no confirmation")

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


def unanswered(first: RedisError | None, last: RedisError) -> RedisError:
    """What to report of a request sent again after ``first`` failed, and failed again with
    ``last``: ``first`` if ``last`` timed out too, which tells nothing new (the re-send is on a
    new connection; the first was on the one in use: "connected, but no reply", not "no answer
    while connecting", of a server that hangs)."""
    return first if first is not None and isinstance(last, TimeoutError) else last
