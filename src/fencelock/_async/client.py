"""The client: one per application (or per process), shared by all its locks.

It owns what must not be per lock: the Redis connection pool, the one pub/sub connection that
wakes every waiter (one per node in Redlock mode), and the one watchdog that renews every lease.

Modes, chosen by what it is given:

* one ``Redis`` (also a Sentinel ``master_for`` client): one server's word is final;
* a ``RedisCluster``: the same per lock (every key of a lock is in one slot, thanks to the hash
  tag); wake-ups use sharded pub/sub and the watchdog batches per slot;
* a list of ``Redis`` (independent masters): Redlock. Every request goes to all nodes at once,
  each bounded by a per-node timeout, and a majority decides (``_core/quorum.py``).
"""

from __future__ import annotations

import contextlib
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self

from redis.crc import key_slot
from redis.exceptions import AskError, NoScriptError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError

from .._backend import (
    AsyncEvent,
    AsyncLoopGuard,
    AsyncRedis,
    AsyncRedisCluster,
    AsyncRequester,
    AsyncStateLock,
    async_bounded,
    async_fan_out,
    async_node_client,
    async_one,
    async_own_client,
    async_reap,
)
from .._core.quorum import NODE_TIMEOUT_MAX
from .._core.replies import fenced_set_reply, translate_error
from ..errors import LockConnectionError
from ..keys import (
    DEFAULT_PREFIX,
    described,
    encodable,
    fence_key_for,
    ttl_to_ms,
    validate_db,
    validate_prefix,
    validate_resource_key,
    validate_ttl,
    validate_url,
)
from ..scripts import FENCED_SET, Script
from .lock import AsyncLock
from .singleflight import AsyncLocalQueues
from .waiter import AsyncWaiter
from .watchdog import AsyncWatchdog

DEFAULT_SOCKET_TIMEOUT = 5.0
WAKE_MODES = ("all", "one")
# Consecutive local hand-offs before the lock goes back through Redis (see singleflight.py).
DEFAULT_MAX_HANDOFFS = 10
MAX_TOKEN = 2**63 - 1


@dataclass
class WaitStats:
    """Counters the tests use to tell a pub/sub wake-up from a fallback re-try."""

    waiting: int = 0  # acquires blocked right now, waiting for a wake-up or their timer
    wakeups: int = 0  # waits ended by a release message
    polls: int = 0  # waits ended by their timer


async def run_script(
    client: AsyncRedis | AsyncRedisCluster, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """EVALSHA, falling back to EVAL (which also caches the script) after SCRIPT FLUSH or a
    restart: the server answers NOSCRIPT and nothing has run, so the fallback is safe."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await client.eval(script.source, len(keys), *keys, *args)


@dataclass
class _Parts:
    """What close() closes: everything of a client but the client itself."""

    watchdog: AsyncWatchdog
    requester: AsyncRequester
    waiters: dict[object, AsyncWaiter]
    cluster: bool
    owned: list[AsyncRedis | AsyncRedisCluster]  # made by fencelock: closed with the client

    async def close(self) -> None:
        await self.watchdog.close()
        await self.requester.close()
        for waiter in list(self.waiters.values()):
            await waiter.close()
            await waiter.redis.connection_pool.disconnect()  # its own pool (see __init__)
        for node in self.owned:
            assert isinstance(node, AsyncRedis)  # a RedisCluster is always the caller's
            await node.aclose()
            # a pool of fencelock's own is not closed by aclose()
            await node.connection_pool.disconnect()


def _abandoned(name: str, parts: _Parts) -> None:
    """A client was collected unclosed. Run by the garbage collector, in whatever thread, maybe
    while that thread holds a lock of ours: so it takes no lock and waits for nothing. The
    pub/sub listeners are told to stop (they end within a read and close their connection); the
    watchdog holds the client weakly and ends with its last lease; the rest: see async_reap."""
    warnings.warn(f"unclosed {name}: call close()", ResourceWarning, stacklevel=2)
    for waiter in list(parts.waiters.values()):
        waiter.abandon()
    pools = [node.connection_pool for node in parts.owned if isinstance(node, AsyncRedis)]
    async_reap(parts.close, parts.requester, pools)


class AsyncLockClient:
    """Distributed locks on one Redis server, a Redis Cluster, or several masters (Redlock).

    ``LockClient(redis.asyncio.Redis(...))``, ``LockClient([r1, r2, r3])`` (Redlock) or
    ``LockClient.from_url("redis://...")`` / ``LockClient.from_url([url1, url2, url3])``.
    """

    def __init__(
        self,
        redis: AsyncRedis | AsyncRedisCluster | Sequence[AsyncRedis],
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        max_poll: float | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        node_timeout: float | None = None,
        max_handoffs: int = DEFAULT_MAX_HANDOFFS,
        wake: str = "one",
    ) -> None:
        self._prefix = validate_prefix(prefix)
        if wake not in WAKE_MODES:
            raise ValueError(f"wake must be one of {WAKE_MODES}, got {wake!r}")
        # "one": waiters queue in Redis and a release wakes the first that still listens;
        # "all": a release wakes every waiting client, and one wins the re-try. One wins from
        # 4 waiting processes on and is fairer (docs/contention.md, python -m bench.herd)
        self.wake = wake
        socket_timeout = validate_ttl(socket_timeout, "socket_timeout")
        # None: a blocked acquire re-tries only when woken or when the holder's lease ends;
        # else also at least this often (it costs a request per waiter each time)
        self.max_poll = None if max_poll is None else validate_ttl(max_poll, "max_poll")
        if isinstance(min_replicas, bool) or not isinstance(min_replicas, int):
            raise TypeError(f"min_replicas must be an int, not {type(min_replicas).__name__}")
        if min_replicas < 0:
            raise ValueError(f"min_replicas must be >= 0, got {min_replicas}")
        # grants and extensions wait (WAIT) for this many replicas to acknowledge them
        self.min_replicas = min_replicas
        self.replica_timeout = validate_ttl(replica_timeout, "replica_timeout")
        if min_replicas and self.replica_timeout >= socket_timeout:
            raise ValueError("replica_timeout must be shorter than socket_timeout")
        # Redlock: each node's share of a request is bounded by this (None: derived per lock
        # from its ttl, see _core/quorum.node_timeout)
        self.node_timeout = (
            None if node_timeout is None else validate_ttl(node_timeout, "node_timeout")
        )
        self.nodes: list[AsyncRedis] = []
        self.cluster = isinstance(redis, AsyncRedisCluster)
        expected = AsyncRedis.__module__ + ".Redis"
        if isinstance(redis, AsyncRedis | AsyncRedisCluster):
            given: list[AsyncRedis] = []
        elif isinstance(redis, list | tuple) and redis:
            given = list(redis)
            for node in given:
                if not isinstance(node, AsyncRedis):
                    raise TypeError(f"Redlock nodes must be {expected}, not {described(node)}")
            if min_replicas:
                raise ValueError("min_replicas applies to one master, not to Redlock nodes")
        else:
            raise TypeError(
                f"redis must be a {expected}, a RedisCluster, or a non-empty list of "
                f"{expected} (Redlock), not {described(redis)}"
            )
        if self.cluster and min_replicas:
            raise ValueError("min_replicas is not supported with a RedisCluster")
        plain = [redis] if isinstance(redis, AsyncRedis) else []
        for node in given or plain:  # a wrong database index fails here, not at the first call
            validate_db(node.connection_pool.connection_kwargs.get("db", 0))
        # fencelock's own clients (own pools) to the servers given: see async_own_client
        if given:
            # Every socket of a node is bounded by the node timeout: a hung node must cost an
            # acquire about that, even when a connection has to be made again.
            limit = self.node_timeout or NODE_TIMEOUT_MAX
            self.nodes = [async_own_client(node, limit) for node in given]
            self.redis: AsyncRedis | AsyncRedisCluster = self.nodes[0]
            # each pub/sub connection has a pool of its own: in the requests' pool it would
            # take a connection they may be waiting for (a pool of one would never serve them)
            waiters = [
                AsyncWaiter(async_own_client(node, limit), confirm_timeout=limit) for node in given
            ]
        elif isinstance(redis, AsyncRedisCluster):
            self.redis = redis  # requests are bounded by their deadline (AsyncRequester)
            waiters = []  # one per node, made as channels on it are first watched
        else:
            assert isinstance(redis, AsyncRedis)
            self.redis = async_own_client(redis, socket_timeout)
            own = async_own_client(redis, socket_timeout)  # the pub/sub connection's own pool
            waiters = [AsyncWaiter(own, confirm_timeout=socket_timeout)]
        # close() closes what fencelock made: its own clients (a RedisCluster is the caller's)
        self._owns_redis = not self.cluster
        # one request's bound ("one request timeout" in the README): waiting for a connection,
        # connecting and the reply included
        self.request_timeout = socket_timeout
        self._waiters: dict[object, AsyncWaiter] = dict(enumerate(waiters))
        self._guard = AsyncStateLock()
        self.wait_stats = WaitStats()
        self._watchdog = AsyncWatchdog(self)  # holds the client weakly
        # bounded requests: the watchdog's renewals (by their deadline) and min_replicas WAITs
        self._requester = AsyncRequester()
        self._loop = AsyncLoopGuard()
        if isinstance(max_handoffs, bool) or not isinstance(max_handoffs, int):
            raise TypeError(f"max_handoffs must be an int, not {type(max_handoffs).__name__}")
        if max_handoffs < 0:
            raise ValueError(f"max_handoffs must be >= 0, got {max_handoffs}")
        # lock objects of this client wait for a name in a local queue; the lock passes from one
        # to the next at most this many times in a row before it goes back through Redis
        self._queues = AsyncLocalQueues(max_handoffs)
        # a release wakes waiters through sharded pub/sub on a Cluster: a plain PUBLISH there
        # is broadcast to every node of the cluster
        self.publish_command = "SPUBLISH" if self.cluster else "PUBLISH"
        self._finalizer = self._on_drop()

    @classmethod
    def from_url(
        cls,
        url: str | Sequence[str],
        *,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        **kwargs: Any,
    ) -> Self:
        """A client for ``url``; a list of URLs means Redlock over those masters."""
        socket_timeout = validate_ttl(socket_timeout, "socket_timeout")
        urls = [url] if isinstance(url, str) else list(url) if isinstance(url, list | tuple) else []
        if not urls or not all(isinstance(u, str) for u in urls):
            raise TypeError(f"url must be a URL or a non-empty list of URLs, not {described(url)}")
        clients = []
        for u in urls:
            validate_url(u)
            try:
                clients.append(
                    AsyncRedis.from_url(
                        u, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
                    )
                )
            except (ValueError, TypeError) as exc:
                raise ValueError(f"url {u!r}: {exc}") from None
        # (not connected yet: nothing to close if the constructor refuses the arguments)
        target: AsyncRedis | list[AsyncRedis] = clients[0] if isinstance(url, str) else clients
        return cls(target, socket_timeout=socket_timeout, **kwargs)

    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        *,
        timeout: float | None = None,
        auto_renew: bool = False,
        reentrant: bool = False,
        on_lost: Callable[[AsyncLock], object] | None = None,
        on_lost_policy: str = "raise",
    ) -> AsyncLock:
        """A lock on ``name`` (no request is sent until it is acquired)."""
        return AsyncLock(
            self,
            name,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            reentrant=reentrant,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
        )

    @property
    def prefix(self) -> str:
        return self._prefix

    async def run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float | None = None,
    ) -> Any:
        """Run ``script``: its reply, within ``timeout`` seconds (default: one request timeout),
        waiting for a free connection and connecting included (else ``TimeoutError``)."""
        reply, _ = await self._script(script, keys, args, timeout, ())
        return reply

    async def run_replicated(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float | None = None,
    ) -> tuple[Any, int | None]:
        """``run``, then ``WAIT`` for ``min_replicas``: the reply, and how many replicas
        acknowledged it (None without ``min_replicas``). WAIT counts the writes of its own
        connection, so both go on one connection."""
        wait: tuple[tuple[Any, ...], ...] = ()
        if self.min_replicas:
            wait = (("WAIT", self.min_replicas, ttl_to_ms(self.replica_timeout)),)
        return await self._script(script, keys, args, timeout, wait)

    async def _script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float | None,
        wait: tuple[tuple[Any, ...], ...],
    ) -> tuple[Any, int | None]:
        # EVALSHA, falling back to EVAL (which also caches the script) after SCRIPT FLUSH or a
        # restart: the server answers NOSCRIPT and nothing has run, so the fallback is safe.
        deadline = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        for call in (("EVALSHA", script.sha), ("EVAL", script.source)):
            command = (*call, len(keys), *keys, *args)
            reply, *acked = await self.request([command, *wait], deadline, keys[0])
            if not isinstance(reply, NoScriptError):
                break  # else nothing ran: send the source, which caches it
        for result in (reply, *acked):
            if isinstance(result, Exception):
                raise result
        return reply, int(acked[0]) if acked else None

    async def request(
        self, commands: Sequence[Sequence[Any]], deadline: float, key: str
    ) -> list[Any]:
        """The replies to ``commands``, sent on one connection (to the node of ``key`` on a
        Cluster), error replies included; ``TimeoutError`` at ``deadline`` (monotonic)."""
        self._loop.check()
        try:
            replies = await self._requester.request(
                self.redis, commands, deadline - time.monotonic(), key
            )
            moved = self.cluster and isinstance(replies[0], AskError)
        except RedisConnectionError:
            if not self.cluster:
                raise
            moved = True  # or failed over
        if moved:  # the cluster client re-learns which node serves the slot, in the time left
            assert len(commands) == 1  # (no WAIT on a Cluster)
            replies = await async_bounded(
                async_one(self.redis, commands[0]), deadline - time.monotonic()
            )
        return replies

    async def fan_out(self, command: Sequence[Any], timeout: float, what: str) -> list[Any]:
        """Redlock: send ``command`` to every node at once; per node its reply, or the
        ``LockError`` it failed with (a node silent for ``timeout`` seconds counts as failed)."""
        self._loop.check()
        replies = await async_fan_out(self.nodes, command, timeout)
        return [translate_error(r, what) if isinstance(r, RedisError) else r for r in replies]

    async def fan_out_script(
        self, script: Script, keys: Sequence[str], args: Sequence[Any], timeout: float
    ) -> list[Any]:
        """``fan_out`` of a script by EVALSHA; nodes that answer NOSCRIPT (restarted, or SCRIPT
        FLUSH) get the source in a second, smaller round."""
        self._loop.check()
        replies = await async_fan_out(
            self.nodes, ("EVALSHA", script.sha, len(keys), *keys, *args), timeout
        )
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            command = ("EVAL", script.source, len(keys), *keys, *args)
            again = await async_fan_out([self.nodes[i] for i in missing], command, timeout)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        what = keys[0] if keys else script.name
        return [translate_error(r, what) if isinstance(r, RedisError) else r for r in replies]

    @asynccontextmanager
    async def watch(self, channel: str, timeout: float | None = None) -> AsyncIterator[AsyncEvent]:
        """Subscribe to a lock's wake-up channel (on every node in Redlock mode: a release
        message from any of them wakes the waiter) and yield the event a message sets. The
        subscription is confirmed within ``timeout`` seconds (None: one request timeout)."""
        self._loop.check()
        if self.cluster:
            async with self._shard_waiter(channel).watch(channel, timeout=timeout) as event:
                yield event
            return
        if not self.nodes:
            async with self._waiters[0].watch(channel, timeout=timeout) as event:
                yield event
            return
        event = AsyncEvent()
        async with contextlib.AsyncExitStack() as stack:
            for waiter in self._waiters.values():
                # a node that is down is skipped: the others, or the fallback re-try, wake us
                with contextlib.suppress(LockConnectionError):
                    await stack.enter_async_context(waiter.watch(channel, event, timeout))
            yield event

    def _shard_waiter(self, channel: str) -> AsyncWaiter:
        """The waiter on the Cluster node that serves ``channel``'s slot: sharded pub/sub
        messages are only delivered by that node."""
        cluster = self.redis
        assert isinstance(cluster, AsyncRedisCluster)
        node = cluster.get_node_from_key(channel)
        if node is None:
            raise LockConnectionError(f"no Cluster node serves {channel!r}")
        with self._guard:
            waiter = self._waiters.get(node.name)
            if waiter is None:
                redis = async_node_client(node, self.request_timeout)
                waiter = AsyncWaiter(redis, confirm_timeout=self.request_timeout, sharded=True)
                self._waiters[node.name] = waiter
        return waiter

    async def wait(self, event: AsyncEvent, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds."""
        stats = self.wait_stats
        with self._guard:
            stats.waiting += 1
        woken = False
        try:
            woken = await event.wait(timeout)
        finally:
            with self._guard:
                stats.waiting -= 1
                if woken:
                    stats.wakeups += 1
                else:
                    stats.polls += 1
        return woken

    def slot_of(self, key: str) -> int:
        """The Cluster slot of ``key``: one multi-key script call must stay within one slot.
        (0 elsewhere: everything can share a call.)"""
        return key_slot(key.encode()) if self.cluster else 0

    async def fenced_set(
        self,
        key: str,
        value: str | bytes | int | float,
        token: int,
        *,
        redis: AsyncRedis | AsyncRedisCluster | None = None,
    ) -> None:
        """Write ``value`` to ``key`` only if ``token`` is >= every token seen for ``key``;
        otherwise raise ``StaleToken`` and write nothing."""
        key = validate_resource_key(key)
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"token must be an int, not {type(token).__name__}")
        # A token no grant can have (Redis counts in signed 64 bits) would be stored as the
        # highest seen and refuse every real holder's write for good.
        if not 0 < token <= MAX_TOKEN:
            shown = token if token.bit_length() <= 64 else f"a {len(str(token))}-digit number"
            raise ValueError(f"token must be a fencing token from 1 to 2**63 - 1, got {shown}")
        if not isinstance(value, str | bytes | int | float) or isinstance(value, bool):
            raise TypeError(f"value must be str, bytes, int or float, not {type(value).__name__}")
        if isinstance(value, str):
            encodable("value", value)
        if redis is None and self.nodes:
            raise TypeError("fenced_set in Redlock mode needs redis=: the server of the resource")
        if redis is not None and not isinstance(redis, AsyncRedis | AsyncRedisCluster):
            expected = AsyncRedis.__module__ + ".Redis"
            raise TypeError(f"redis must be a {expected}, not {described(redis)}")
        keys, args = [key, fence_key_for(key)], [value, str(token)]
        try:
            if redis is None:  # within one request timeout
                reply = await self.run(FENCED_SET, keys, args)
            else:  # the resource's server: within what the caller's client allows
                reply = await run_script(redis, FENCED_SET, keys, args)
        except RedisError as exc:
            raise translate_error(exc, f"resource {key!r}") from exc
        fenced_set_reply(reply, key, token)

    def _parts(self) -> _Parts:
        owned: list[AsyncRedis | AsyncRedisCluster] = []
        if self._owns_redis:
            owned = [*self.nodes] or [self.redis]
        return _Parts(self._watchdog, self._requester, self._waiters, self.cluster, owned)

    def _on_drop(self) -> weakref.finalize[[str, _Parts], Any]:
        """What happens if this client is dropped unclosed, like an unclosed file (see
        ``_abandoned``). Nothing of it may hold the client: it would never be collected."""
        finalizer = weakref.finalize(self, _abandoned, type(self).__name__, self._parts())
        finalizer.atexit = False  # at exit the daemon threads just stop
        return finalizer

    async def close(self) -> None:
        self._finalizer.detach()
        await self._parts().close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
