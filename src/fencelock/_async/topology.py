"""Where a lock's keys live, and how its requests get there: one server or a Cluster (this
module), or a Redlock quorum (``quorum.py``).

A topology answers the few questions the lock's lifecycle asks (try to acquire, release, renew
a batch, is it held, watch a wake-up channel) and says what it can do (capability flags). The
lock (``lock.py``, ``contention.py``, ``handoff.py``) runs the lifecycle once for all of them.

Every request is bounded by the deadline of the call it serves: a request that timed out, or
whose connection broke (a Sentinel failover closes every client connection), is sent once more,
in the time left. With the same holder token it cannot count twice (acquire.lua).

A topology runs the requests a grant's kind gives it (``_core/kinds.py``): scripts, or, in a
client that runs none (``ScriptMode``: made so, or refused by the server), the plain commands of
the kind that stands in (``Kind.without_scripts``); one server only (``runs_without_scripts``).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Final

from redis.crc import key_slot
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from .._backend import (
    AsyncDetached,
    AsyncLoopGuard,
    async_checkpoint,
    async_shield,
    async_wait_done,
)
from .._core.hazards import memory, per_node
from .._core.inspection import NodeView, inspect_reply
from .._core.kinds import Command, Kind, LeaseSpec, Released, per_grant, raised, renewal
from .._core.lease import arrived_late, time_left
from .._core.natives import ScriptMode
from .._core.replies import (
    Busy,
    Granted,
    NoReply,
    check_replicated,
    renew_reply,
    reserved_block,
    translate_error,
)
from .._core.stats import Counters
from .._keys import ttl_to_ms
from .._scripts import INSPECT, RENEW, Script
from .._transport import AsyncClusterNode, AsyncRedis, AsyncRedisCluster
from ..errors import LockError, ScriptsRequired
from . import natives
from .transport import AsyncRequester
from .waiter import AsyncClusterWaiters, AsyncWaiter, Watch

ATTEMPTS: Final = 2
# seconds between two tries at subscribing a waiter where its slot moved, while none succeeds
FOLLOW_PAUSE: Final = 0.5

server_logger = logging.getLogger("fencelock.server")
waiter_logger = logging.getLogger("fencelock.waiter")


class GaveBack(Exception):
    """A grant came back after its lease and was given back. Its holder token must not be used
    again: the give-back (or a copy redis-py re-sent) may reach the server later still, and it
    would delete a grant made later to the same token."""


class AsyncTopology(abc.ABC):
    """What the lock asks of where its keys live, and what every topology shares."""

    # a release may hand the lock to a local waiter with one script (singleflight.py)
    local_handoff = True
    # a release script may grant the lock to the first queued waiter (wake="one")
    grants_by_release = True
    # contenders re-try after a random pause, so that split votes do not repeat (Redlock)
    jitters = False
    # every server that holds a name holds its one fencing counter (not so for Redlock's nodes)
    one_counter = True
    # a plain lock can be held here without scripts, where the server has the native commands
    runs_without_scripts = False
    publish_command = "PUBLISH"
    # the servers a late give-back must reach, each on its own (``release_at``): Redlock's nodes;
    # elsewhere one, the server of the name's keys
    node_count = 1

    waiters: dict[object, AsyncWaiter]
    # whether the servers' eviction policy was looked at (once per client, at the first acquire)
    server_checked = False

    def __init__(
        self,
        request_timeout: float,
        counters: Counters,
        owned: Sequence[AsyncRedis] = (),
        mode: ScriptMode | None = None,
    ) -> None:
        # one request's bound ("one request timeout" in the README): waiting for a connection,
        # connecting and the reply included
        self.request_timeout = request_timeout
        self.counters = counters
        self.owned = list(owned)  # fencelock's own clients: closed with the topology
        # every request goes through it (closed when a dropped client is reaped, too)
        self.requester = AsyncRequester(request_timeout)
        # whether the client runs scripts, and what its server has natively (the client's own)
        self.mode = ScriptMode("auto", self.publish_command) if mode is None else mode
        # give-backs left to finish when their caller was cancelled (finished by close(), or
        # as the loop shuts down)
        self.detached = AsyncDetached(request_timeout)
        self._loop = AsyncLoopGuard()

    def time_left(self, deadline: float | None) -> float:
        return time_left(deadline, self.request_timeout, time.monotonic())

    def slot_of(self, key: str) -> int:
        """The Cluster slot of ``key``: one multi-key script call must stay within one slot.
        (0 elsewhere: everything can share a call.)"""
        return 0

    def one_call(self, keys: Sequence[str]) -> bool:
        """Whether one script call can reach every key of ``keys`` (on a Cluster: one slot)."""
        return True

    async def wait(self, watch: Watch, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds."""
        counters = self.counters
        counters.add(waiting=1)
        woken = False
        try:
            woken = await watch.event.wait(timeout)
        finally:
            counters.add(waiting=-1, wakeups=int(woken), polls=int(not woken))
        return woken

    def warn_of_hazards(self, info: object, where: str) -> None:
        """Warn of what a server's ``INFO memory`` shows threatening the locks (eviction, a
        server nearly full): ``fencelock doctor``'s rules (_core/hazards.py), once per client.
        (INFO, not CONFIG GET: managed servers refuse CONFIG, and it would show an ACL user
        passwords.)"""
        if isinstance(info, Exception):  # refused (an ACL without +info), or down
            server_logger.debug("fencelock: %s: cannot read its memory settings: %s", where, info)
            return
        for node, reply in per_node(info):
            at = node or where
            for finding in memory(reply, at):
                server_logger.warning("fencelock: %s: %s", at, finding.line(), extra={"server": at})

    def supports(self, kind: Kind) -> bool:
        """Whether grants of ``kind`` can be made here."""
        return True

    def running(self, kind: Kind) -> Kind:
        """The kind whose requests this client sends for grants of ``kind``: ``kind``, or, in a
        client that runs no scripts, the kind that stands in for it (if none can, ``kind``,
        whose requests are then refused)."""
        if not self.mode.no_scripts:
            return kind
        return kind.without_scripts() or kind

    def scripts_required(self, what: str, why: str = "") -> ScriptsRequired:
        """The error of ``what``, which needs scripts (``why``: what they do for it)."""
        because = f": {why}" if why else ""
        return ScriptsRequired(
            f"{what} needs Lua scripts{because}. This client runs none: "
            f"{self.mode.no_scripts} (docs/modes.md, 'Without scripts')"
        )

    def require_scripts(self, what: str, why: str) -> None:
        """``ScriptsRequired`` (of ``what``, because ``why``) when this client runs no
        scripts (docs/modes.md)."""
        if self.mode.no_scripts:
            raise self.scripts_required(what, why)

    @property
    def read_timeout(self) -> float:
        """One operator's request's bound (inspect, SCAN, force_release)."""
        return self.request_timeout

    async def give_back(
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
            await async_wait_done(after)
        try:
            return (await self.release(spec, holder, timeout=self.time_left(deadline))).freed
        except (RedisError, LockError):  # unreachable: the lease expires on its own
            return False

    async def release_at(self, spec: LeaseSpec, holder: str, node: int, timeout: float) -> Released:
        """Release ``holder``'s grant on server ``node`` only (< ``node_count``), within
        ``timeout`` seconds: one try of a late give-back (``giveback.py``)."""
        return await self.release(spec, holder, timeout=timeout)

    def abandon(self) -> None:
        """The client was dropped unclosed: the listeners end by themselves (they only set
        flags here: this runs in the garbage collector)."""
        for waiter in list(self.waiters.values()):
            waiter.abandon()

    def pools(self) -> list[Any]:
        """The connection pools of fencelock's own clients (reaped when dropped unclosed)."""
        return [node.connection_pool for node in self.owned]

    async def close(self) -> None:
        await self.detached.close()  # the give-backs first
        await self.requester.close()
        for waiter in list(self.waiters.values()):
            await waiter.close()
            await waiter.redis.connection_pool.disconnect()  # its own pool
        for node in self.owned:
            await node.aclose()
            # a pool of fencelock's own is not closed by aclose()
            await node.connection_pool.disconnect()

    # -- the interface: what differs --------------------------------------------------------

    @abc.abstractmethod
    async def try_acquire(
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
    async def release(
        self,
        spec: LeaseSpec,
        holder: str,
        leaving: str = "",
        timeout: float | None = None,
        *,
        depth: int = 1,
        held_until: float | None = None,
    ) -> Released:
        """``depth``: the holds a reentrant holder has before this release (1: its last);
        ``held_until``: the local deadline of the lease released, if known (Redlock decides a
        release that a node answered late by it)."""

    @abc.abstractmethod
    async def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> Sequence[int | LockError]: ...

    @abc.abstractmethod
    async def held(self, spec: LeaseSpec, holder: str) -> bool: ...

    @abc.abstractmethod
    async def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy: ...

    @abc.abstractmethod
    async def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool: ...

    @abc.abstractmethod
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]: ...

    # -- what the operators' tools and the primitives' own scripts need ------------------------

    @abc.abstractmethod
    async def run_all(
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
    async def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        """The grant at ``keys`` (inspect.lua's) as the servers show it (Redlock: a majority);
        None when not held."""

    @abc.abstractmethod
    async def publish(self, channel: str, message: str) -> None:
        """Publish ``message`` on ``channel`` wherever its waiters listen, best effort, within
        one request's bound."""

    @abc.abstractmethod
    def scan(self, match: str, count: int) -> AsyncIterator[bytes]:
        """Every key matching ``match`` on every server (SCAN, each call within one request's
        bound). A server that fails raises, unless the others answered enough for the listing
        to be whole (Redlock: a held name is on a majority)."""

    @abc.abstractmethod
    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        """``script``'s reply from the one server of ``keys``, within one request timeout; a
        failure raised as the ``LockError`` of ``what``."""


class AsyncOneServer(AsyncTopology):
    """One server's word is final: a plain Redis, or a Sentinel master (``min_replicas``: every
    grant and extension waits for that many replicas to acknowledge it)."""

    runs_without_scripts = True
    # sent once per client, before its first grant: what the server is; what may evict keys
    first_requests: tuple[Command, ...] = (("HELLO",), ("INFO", "memory"))

    def __init__(
        self,
        redis: AsyncRedis | AsyncRedisCluster,
        waiters: dict[object, AsyncWaiter],
        request_timeout: float,
        counters: Counters,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        owned: Sequence[AsyncRedis] = (),
        mode: ScriptMode | None = None,
    ) -> None:
        super().__init__(request_timeout, counters, owned, mode)
        self.redis = redis
        self.waiters = waiters
        self.min_replicas = min_replicas
        self.replica_timeout = replica_timeout
        self._wait: tuple[tuple[Any, ...], ...] = ()
        self.polls = False  # waiters re-try instead of listening: subscribing was refused
        if min_replicas:
            # no local hand-off, no grant by a release: one script cannot wait for replicas
            self.local_handoff = self.grants_by_release = False
            self._wait = (("WAIT", min_replicas, ttl_to_ms(replica_timeout)),)

    async def request(
        self, commands: list[Command], noscript: Command | None, timeout: float, key: str
    ) -> tuple[list[Any], int | None]:
        """Send ``commands``, then WAIT for the replicas on the same connection (WAIT counts its
        own connection's writes), within ``timeout`` seconds: their replies (error replies as
        values), and the replicas that acknowledged (None without ``min_replicas``)."""
        self._loop.check()
        wait = self._wait
        replies = await self.requester.request(
            self.redis, [*commands, *wait] if wait else commands, timeout, key, noscript
        )
        return replies, int(raised(replies.pop())) if wait else None

    @property
    def address(self) -> str:
        return server_address(self.redis)

    async def ask(self, commands: list[Command], key: str) -> list[Any]:
        """Send ``commands`` within one request timeout (no WAIT: they write nothing)."""
        self._loop.check()
        return await self.requester.request(self.redis, commands, self.request_timeout, key)

    async def script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float,
        what: str,
        *,
        read: bool = False,
    ) -> tuple[Any, int | None]:
        """Run ``script`` within ``timeout`` seconds: its reply (an error reply raised), and how
        many replicas acknowledged it (None without ``min_replicas``, and for a ``read``: a
        read has nothing for replicas to acknowledge, and with none attached a WAIT would hold
        it for the whole replica timeout). ``ScriptsRequired`` where no script runs."""
        if self.mode.no_scripts:
            raise self.scripts_required(what)
        self._loop.check()
        commands, noscript = [script.evalsha(keys, args)], script.eval(keys, args)
        try:
            if read:
                [reply] = await self.requester.request(
                    self.redis, commands, timeout, keys[0], noscript
                )
                return raised(reply), None
            replies, acked = await self.request(commands, noscript, timeout, keys[0])
            return raised(replies[0]), acked
        except RedisError as exc:
            if await natives.refused(self, exc, keys[0]):
                raise self.scripts_required(what) from exc
            raise

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        try:
            reply, _ = await self.script(script, keys, args, self.request_timeout, what)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        return reply

    async def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        try:
            reply, _ = await self.script(script, keys, args, self.request_timeout, what, read=read)
        except RedisError as exc:
            return [translate_error(exc, what)]
        return [reply]

    async def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        [reply] = await self.run_all(INSPECT, keys, (listed,), what, read=True)
        if isinstance(reply, LockError):
            raise reply
        view = inspect_reply(reply)
        return view if view.holder else None

    async def publish(self, channel: str, message: str) -> None:
        try:
            await self.ask([(self.publish_command, channel, message)], channel)
        except RedisError as exc:
            raise translate_error(exc, f"publish on {channel!r}") from exc

    async def scan(self, match: str, count: int) -> AsyncIterator[bytes]:
        redis = self.redis
        nodes: Sequence[AsyncRedis | AsyncClusterNode] = (
            redis.get_primaries() if isinstance(redis, AsyncRedisCluster) else [redis]
        )
        for node in nodes:
            async for key in scan_node(self.requester, node, match, count, self.request_timeout):
                yield key

    # -- the lock's questions ---------------------------------------------------------------

    async def try_acquire(
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
        came too late to be used; a ``LockConnectionError`` caused by ``NoReply`` when an
        attempt got no reply (it may still grant: ``replies.unanswered``)."""
        if not self.server_checked:
            await natives.check_server(self, spec.keys.lock)
        mode = self.mode
        kind = spec.kind if not mode.no_scripts else await natives.stand_in(self, spec)
        self._loop.check()
        key, wait = spec.acquire_keys[0], self._wait
        commands, noscript = kind.acquire_request(spec, holder, depth, block, waiter, mode.commands)
        attempt, first = 1, None
        no_reply: NoReply | None = None  # an attempt sent that got no reply: it may still grant
        while True:
            sent_at = time.monotonic()
            try:
                # (not through self.request: the hot path of every acquire stays short)
                sent = [*commands, *wait] if wait else commands
                replies = await self.requester.request(
                    self.redis, sent, self.time_left(deadline), key, noscript
                )
                acked = int(raised(replies.pop())) if wait else None
                result = kind.acquire_result(replies)
            except (TimeoutError, ConnectionError) as exc:
                if isinstance(exc, NoReply):
                    no_reply = exc
                if attempt < ATTEMPTS and self.time_left(deadline) > 0:
                    attempt, first = attempt + 1, exc
                    continue
                # the cause: a NoReply if any attempt got none (it may still grant)
                raise translate_error(reported(first, exc), spec.what) from no_reply or exc
            except RedisError as exc:
                if not await natives.refused(self, exc, key):
                    raise translate_error(exc, spec.what) from exc
                # nothing ran: again, without scripts
                kind = await natives.stand_in(self, spec)
                commands, noscript = kind.acquire_request(
                    spec, holder, depth, block, waiter, mode.commands
                )
                continue
            await async_checkpoint()
            if isinstance(result, Busy):
                return result
            check_replicated(acked, self.min_replicas, f"grant of {spec.what}")
            if depth == 0 and arrived_late(sent_at, spec.ttl, time.monotonic()):
                await async_shield(self.give_back(spec, holder, deadline))
                raise GaveBack
            granted = reserved_block(result.fence, block)
            return Granted(
                granted.fence,
                reserved=granted.reserved,
                sent_at=sent_at,
                more_fences=result.more_fences,
            )
        raise AssertionError("unreachable")

    async def release(
        self,
        spec: LeaseSpec,
        holder: str,
        leaving: str = "",
        timeout: float | None = None,
        *,
        depth: int = 1,
        held_until: float | None = None,
    ) -> Released:
        """Release ``holder``'s grant (``leaving``: a queue entry removed first, a simple lock's
        waiter giving up), within ``timeout`` seconds (default: one request timeout). (One
        server's answer is final, whatever ``held_until``.)"""
        mode = self.mode
        kind = spec.kind if not mode.no_scripts else await natives.stand_in(self, spec)
        commands, noscript = kind.release_request(spec, holder, leaving, mode.commands, depth)
        bound = self.request_timeout if timeout is None else timeout
        try:
            replies, _ = await self.request(commands, noscript, bound, spec.release_keys[0])
            return kind.release_result(replies)
        except RedisError as exc:
            if await natives.refused(self, exc, spec.release_keys[0]):  # nothing ran: again
                return await self.release(spec, holder, leaving, timeout, depth=depth)
            raise translate_error(exc, spec.what) from exc

    async def renew(
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
        mode = self.mode
        ttls_ms = [ttl_to_ms(ttl) for ttl in ttls]
        renewed = await natives.renew_natively(self, specs, holders, ttls_ms, timeout, what)
        if renewed is not None:
            return renewed
        keys, args = renewal(specs, holders, ttls_ms)
        try:
            reply, acked = await self.script(RENEW, keys, args, timeout, what)
        except ScriptsRequired:
            if not mode.auto:
                raise
            return await self.renew(specs, holders, ttls, timeout, what)  # (refused just now)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        check_replicated(acked, self.min_replicas, what)
        return per_grant(specs, renew_reply(reply, len(keys) // 2))

    async def held(self, spec: LeaseSpec, holder: str) -> bool:
        """Whether the server shows ``holder`` holding the grant. A read is safe to send again,
        within one request timeout in all."""
        key, kind = spec.keys.lock, spec.kind
        commands = kind.held_commands(spec.keys, holder)
        self._loop.check()
        end = time.monotonic() + self.request_timeout
        first = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                replies = await self.requester.request(
                    self.redis, commands, end - time.monotonic(), key
                )
            except (TimeoutError, ConnectionError) as exc:
                if attempt < ATTEMPTS and time.monotonic() < end:
                    first = exc
                    continue
                raise translate_error(reported(first, exc), spec.what) from exc
            except RedisError as exc:
                raise translate_error(exc, spec.what) from exc
            if isinstance(replies[0], RedisError):
                if "WRONGTYPE" in str(replies[0]):
                    return False  # a grant of another kind holds the name now
                raise translate_error(replies[0], spec.what) from replies[0]
            return kind.held_reply(replies, holder)
        raise AssertionError("unreachable")

    async def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy:
        """One request: the lease of ``holder``'s grant restarts at ``ttl_ms`` and a block of
        fencing tokens is reserved for a streak of local hand-offs."""
        mode = self.mode
        kind = spec.kind if not mode.no_scripts else await natives.stand_in(self, spec)
        commands, noscript = kind.handoff_request(spec, holder, ttl_ms, block, mode.commands)
        try:
            replies, _ = await self.request(
                commands, noscript, self.request_timeout, spec.acquire_keys[0]
            )
            return kind.handoff_result(replies)
        except RedisError as exc:
            if await natives.refused(self, exc, spec.acquire_keys[0]):  # nothing ran: again
                return await self.hand_off(spec, holder, ttl_ms, block)
            raise translate_error(exc, spec.what) from exc

    async def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool:
        raise AssertionError("one server's tokens need no confirmation")

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        """Subscribe to a lock's wake-up channel and yield what a message on it sets. The
        subscription is confirmed within ``timeout`` seconds (None: one request timeout);
        ``what``: the object that waits, for errors. A client that runs no scripts waits by
        re-trying instead (at the end of the holder's lease, or every ``max_poll``) where
        subscribing is refused: a watch never set."""
        self._loop.check()
        return natives.watch(self, channel, what, timeout)


class AsyncCluster(AsyncOneServer):
    """A ``RedisCluster``: each lock lives on the node of its hash slot (every key of a lock is
    in one slot, thanks to the hash tag); wake-ups use sharded pub/sub, renewals batch per slot."""

    # a plain PUBLISH on a Cluster is broadcast to every node
    publish_command = "SPUBLISH"
    runs_without_scripts = False
    # (no HELLO: its nodes may run different versions, so no native command is relied on)
    first_requests = (("INFO", "memory"),)

    def __init__(self, redis: AsyncRedisCluster, request_timeout: float, counters: Counters):
        # one waiter per node, made as channels on it are first watched
        super().__init__(redis, {}, request_timeout, counters)
        self.watches = AsyncClusterWaiters(redis, self.requester, request_timeout, self.waiters)

    def slot_of(self, key: str) -> int:
        return key_slot(key.encode())

    def one_call(self, keys: Sequence[str]) -> bool:
        return len({self.slot_of(key) for key in keys}) == 1

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        self._loop.check()
        return self.watches.watch(channel, what, timeout)

    async def wait(self, watch: Watch, timeout: float) -> bool:
        """As ``AsyncTopology.wait``; a watch whose slot moved (``Watch.moved``) first follows
        it, and then returns at once: the caller re-checks (a release may have granted it the
        lock meanwhile). While no node takes the subscription (a failover under way), it is
        tried again every ``FOLLOW_PAUSE`` seconds, until ``timeout``."""
        end = time.monotonic() + timeout
        woken = watch.moved or await super().wait(watch, timeout)
        while watch.moved:
            if await self.watches.follow(watch, end - time.monotonic()):
                return True
            left = end - time.monotonic()
            if left <= 0:
                break
            watch.event.clear()
            await watch.event.wait(min(FOLLOW_PAUSE, left))
        return woken


async def scan_node(
    requester: AsyncRequester,
    node: AsyncRedis | AsyncClusterNode,
    match: str,
    count: int,
    timeout: float,
) -> AsyncIterator[bytes]:
    """The keys of one server matching ``match`` (SCAN, each call within ``timeout``)."""
    cursor = 0
    while True:
        command = ("SCAN", cursor, "MATCH", match, "COUNT", count)
        [reply] = await requester.fan_out([node], command, timeout)
        if isinstance(reply, RedisError):
            # (the server, not the pattern: that is fencelock's key layout, not the user's)
            where = node.name if isinstance(node, AsyncClusterNode) else server_address(node)
            raise translate_error(reply, f"listing the names held on {where}")
        cursor = int(reply[0])
        for key in reply[1]:
            yield key
        if cursor == 0:
            return


def server_address(redis: AsyncRedis | AsyncRedisCluster) -> str:
    """host:port (or the socket path) of a client's server, for messages."""
    pool = getattr(redis, "connection_pool", None)  # (a RedisCluster has one per node)
    if pool is None:
        return "the Cluster's default node"
    options = pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"


def reported(first: RedisError | None, last: RedisError) -> RedisError:
    """What to report of a request sent again after ``first`` failed, and failed again with
    ``last``: ``first`` if ``last`` timed out too, which tells nothing new (the re-send is on a
    new connection; the first was on the one in use: "connected, but no reply", not "no answer
    while connecting", of a server that hangs)."""
    return first if first is not None and isinstance(last, TimeoutError) else last
