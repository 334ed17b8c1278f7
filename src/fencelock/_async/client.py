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

import logging
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial, wraps
from typing import Any, Self, TypeVar, cast

from redis.exceptions import NoScriptError, RedisError

from .._backend import AsyncStateLock
from .._core import events
from .._core.inspection import ForceReleased, LockInfo
from .._core.quorum import NODE_TIMEOUT_MAX
from .._core.replies import digest, fenced_get_reply, fenced_set_reply, translate_error
from .._core.stats import LIVE_CLIENTS, Counters, Statistics
from .._transport import AsyncRedis, AsyncRedisCluster, async_own_client, async_reap
from ..errors import StaleToken
from ..keys import (
    DEFAULT_PREFIX,
    described,
    encodable,
    fence_key_for,
    validate_db,
    validate_name,
    validate_prefix,
    validate_resource_key,
    validate_ttl,
    validate_url,
    validate_value,
)
from ..labels import Label, check_label
from ..scripts import FENCED_GET, FENCED_SET, Script
from . import admin
from .election import AsyncElection
from .lock import _DEFAULT, AsyncLock, Parts, _Default
from .multilock import AsyncMultiLock
from .periodic import AsyncOncePer
from .redlock import AsyncQuorum
from .rw_lock import AsyncReadWriteLock
from .semaphore import AsyncSemaphore
from .singleflight import AsyncLocalQueues
from .topology import AsyncCluster, AsyncOneServer, AsyncTopology
from .versioned import AsyncVersioned
from .waiter import AsyncWaiter
from .watchdog import AsyncWatchdog

_F = TypeVar("_F", bound=Callable[..., Any])
DEFAULT_SOCKET_TIMEOUT = 5.0
WAKE_MODES = ("all", "one")
# Consecutive local hand-offs before the lock goes back through Redis (see singleflight.py).
DEFAULT_MAX_HANDOFFS = 10
MAX_TOKEN = 2**63 - 1

T = TypeVar("T")

fence_logger = logging.getLogger("fencelock.fence")


async def _run_script(
    client: AsyncRedis | AsyncRedisCluster, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """``script`` run by the caller's own client (its settings, its retries)."""
    try:
        return await client.execute_command(*script.evalsha(keys, args))
    except NoScriptError:
        return await client.execute_command(*script.eval(keys, args))


@dataclass
class _Owned:
    """What close() closes: everything of a client but the client itself (the finalizer of a
    client dropped unclosed holds this, never the client)."""

    watchdog: AsyncWatchdog
    topology: AsyncTopology
    owned: list[AsyncRedis]  # made by fencelock: closed with the client

    async def close(self) -> None:
        await self.watchdog.close()
        await self.topology.close()
        for waiter in self.topology.waiters.values():
            await waiter.redis.connection_pool.disconnect()  # its own pool (see __init__)
        for node in self.owned:
            await node.aclose()
            # a pool of fencelock's own is not closed by aclose()
            await node.connection_pool.disconnect()


def _refused(stale: StaleToken) -> None:
    """A stale write refused: a holder acted on a lock it had lost (worth an alert: see
    docs/operations.md)."""
    if events.on:
        events.emit(events.StaleWriteRefused(stale.key, stale.token))
    fence_logger.warning(
        "fencelock: stale write to %r refused: token %d, but %d wrote it already",
        stale.key,
        stale.token,
        stale.seen,
        extra={
            "event": "stale_write_refused",
            "key": stale.key,
            "token": stale.token,
            "reason": f"token {stale.seen} wrote it already",
        },
    )


def _fencing_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    # A token no grant can have (Redis counts in signed 64 bits) would be stored as the
    # highest seen and refuse every real holder's write for good.
    if not 0 < token <= MAX_TOKEN:
        shown = token if token.bit_length() <= 64 else f"a {len(str(token))}-digit number"
        raise ValueError(f"token must be a fencing token from 1 to 2**63 - 1, got {shown}")
    return token


def _fenced(parse: Callable[[object, str, int], T], reply: object, key: str, token: int) -> T:
    """``parse(reply, key, token)``; a refused stale token is logged (``_refused``) first."""
    try:
        return parse(reply, key, token)
    except StaleToken as stale:
        _refused(stale)
        raise


def _abandoned(name: str | None, owned: _Owned) -> None:
    """A client was collected unclosed. Run by the garbage collector, in whatever thread, maybe
    while that thread holds a lock of ours: so it takes no lock and waits for nothing. The
    pub/sub listeners are told to stop (they end within a read and close their connection); the
    watchdog ends with its last lease; the rest: see async_reap. ``name`` None: a client of
    fencelock.compat, which the application never saw, so there is nothing to warn it of."""
    if name is not None:
        warnings.warn(f"unclosed {name}: call close()", ResourceWarning, stacklevel=2)
    owned.topology.abandon()
    pools = [node.connection_pool for node in owned.owned]
    async_reap(owned.close, owned.topology.requester, pools)


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
        label: Label = None,
    ) -> None:
        self._prefix = validate_prefix(prefix)
        # who holds, for inspect() and the CLI: a str, or a callable run at each acquire
        label = check_label(label)
        # "one": waiters queue in Redis and a release wakes the first that still listens;
        # "all": a release wakes every waiting client, and one wins the re-try. One wins from
        # 4 waiting processes on and is fairer (docs/contention.md, python -m bench.herd)
        if wake not in WAKE_MODES:
            raise ValueError(f"wake must be one of {WAKE_MODES}, got {wake!r}")
        # one request's bound ("one request timeout" in the README): waiting for a connection,
        # connecting and the reply included
        socket_timeout = validate_ttl(socket_timeout, "socket_timeout")
        # None: a blocked acquire re-tries only when woken or when the holder's lease ends;
        # else also at least this often (it costs a request per waiter each time)
        max_poll = None if max_poll is None else validate_ttl(max_poll, "max_poll")
        if isinstance(min_replicas, bool) or not isinstance(min_replicas, int):
            raise TypeError(f"min_replicas must be an int, not {type(min_replicas).__name__}")
        if min_replicas < 0:
            raise ValueError(f"min_replicas must be >= 0, got {min_replicas}")
        # grants and extensions wait (WAIT) for this many replicas to acknowledge them
        replica_timeout = validate_ttl(replica_timeout, "replica_timeout")
        if min_replicas and replica_timeout >= socket_timeout:
            raise ValueError("replica_timeout must be shorter than socket_timeout")
        # Redlock: each node's share of a request is bounded by this (None: derived per lock
        # from its ttl, see _core/quorum.node_timeout)
        if node_timeout is not None:
            node_timeout = validate_ttl(node_timeout, "node_timeout")
        if isinstance(max_handoffs, bool) or not isinstance(max_handoffs, int):
            raise TypeError(f"max_handoffs must be an int, not {type(max_handoffs).__name__}")
        if max_handoffs < 0:
            raise ValueError(f"max_handoffs must be >= 0, got {max_handoffs}")
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
        if isinstance(redis, AsyncRedisCluster) and min_replicas:
            raise ValueError("min_replicas is not supported with a RedisCluster")
        plain = [redis] if isinstance(redis, AsyncRedis) else []
        for node in given or plain:  # a wrong database index fails here, not at the first call
            validate_db(node.connection_pool.connection_kwargs.get("db", 0))
        counters = Counters(AsyncStateLock())
        # fencelock's own clients (own pools) to the servers given: see async_own_client. Each
        # pub/sub connection has a pool of its own: in the requests' pool it would take a
        # connection they may be waiting for (a pool of one would never serve them).
        topology: AsyncTopology
        owned: list[AsyncRedis] = []
        if given:
            # Every socket of a node is bounded by the node timeout: a hung node must cost an
            # acquire about that, even when a connection has to be made again.
            limit = node_timeout or NODE_TIMEOUT_MAX
            owned = [async_own_client(node, limit) for node in given]
            waiters = [
                AsyncWaiter(async_own_client(node, limit), confirm_timeout=limit) for node in given
            ]
            topology = AsyncQuorum(
                owned, dict(enumerate(waiters)), socket_timeout, counters, node_timeout
            )
        elif isinstance(redis, AsyncRedisCluster):
            # the caller's: requests are bounded by their deadline (AsyncRequester)
            topology = AsyncCluster(redis, socket_timeout, counters)
        else:
            assert isinstance(redis, AsyncRedis)
            owned = [async_own_client(redis, socket_timeout)]
            waiter = AsyncWaiter(
                async_own_client(redis, socket_timeout), confirm_timeout=socket_timeout
            )
            topology = AsyncOneServer(
                owned[0], {0: waiter}, socket_timeout, counters, min_replicas, replica_timeout
            )
        self._topology = topology
        self._watchdog = AsyncWatchdog(topology, counters)
        # lock objects of this client wait for a name in a local queue; the lock passes from one
        # to the next at most this many times in a row before it goes back through Redis
        self._queues = AsyncLocalQueues(max_handoffs, counters)
        self._parts = Parts(
            topology,
            self._queues,
            self._watchdog,
            counters,
            self._prefix,
            wake == "one",
            max_poll,
            label,
        )
        self._owned = _Owned(self._watchdog, topology, owned)
        self._finalizer = weakref.finalize(self, _abandoned, type(self).__name__, self._owned)
        self._finalizer.atexit = False  # at exit the daemon threads just stop
        LIVE_CLIENTS.add(self)

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
        label: Label | _Default = _DEFAULT,
    ) -> AsyncLock:
        """A lock on ``name`` (no request is sent until it is acquired). ``label``: its holder
        label (default: the client's; None: none)."""
        return AsyncLock(
            self,
            self._parts,
            name,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            reentrant=reentrant,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )

    def multi_lock(
        self,
        names: Iterable[str],
        ttl: float = 30.0,
        *,
        timeout: float | None = None,
        auto_renew: bool = False,
        label: Label | _Default = _DEFAULT,
    ) -> AsyncMultiLock:
        """One lock over several ``names``, taken all or none (docs/multilock.md). Whatever the
        order given, the names are taken sorted and deduplicated, so two multi-locks sharing
        names can never deadlock. ``multi.tokens``: the fencing token of each name."""
        return AsyncMultiLock(self, names, ttl, timeout=timeout, auto_renew=auto_renew, label=label)

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: float = 30.0,
        *,
        timeout: float | None = None,
        auto_renew: bool = False,
        on_lost: Callable[[AsyncLock], object] | None = None,
        on_lost_policy: str = "raise",
        label: Label | _Default = _DEFAULT,
    ) -> AsyncSemaphore:
        """A semaphore of ``limit`` permits on ``name``: each acquire takes some, each permit a
        lease of ``ttl`` (docs/semaphore.md). One master or a Cluster (not Redlock)."""
        return AsyncSemaphore(
            self,
            self._parts,
            name,
            limit,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )

    def rw_lock(
        self,
        name: str,
        ttl: float = 30.0,
        *,
        timeout: float | None = None,
        auto_renew: bool = False,
        on_lost: Callable[[AsyncLock], object] | None = None,
        on_lost_policy: str = "raise",
        label: Label | _Default = _DEFAULT,
    ) -> AsyncReadWriteLock:
        """A phase-fair read-write lock on ``name``: ``.read()`` and ``.write()`` make its lock
        objects, each holder with a lease of ``ttl`` (docs/rw_lock.md). One master or a Cluster."""
        return AsyncReadWriteLock(
            self,
            self._parts,
            name,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )

    def election(
        self,
        name: str,
        ttl: float = 10.0,
        *,
        timeout: float | None = None,
        label: Label | _Default = _DEFAULT,
        on_lost: Callable[[AsyncElection], object] | None = None,
        on_lost_policy: str | None = None,
    ) -> AsyncElection:
        """A candidate in the leader election ``name`` (docs/election.md): ``campaign()`` to
        lead for an auto-renewed lease of ``ttl``, its term a fencing token. ``label``: what
        ``leader()`` shows of it (default: the client's). ``on_lost_policy``: as a lock's
        (default "cancel" under asyncio, "raise" with threads)."""
        return AsyncElection(
            self,
            self._parts,
            name,
            ttl,
            timeout=timeout,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )

    def at_most(
        self, limit: int, name: str, *, ttl: float = 30.0, timeout: float | None = None
    ) -> Callable[[_F], _F]:
        """A decorator: at most ``limit`` runs of the function at once, across every process
        using this ``name``. Each run holds a permit, renewed while it runs (freed when the
        process dies), and waits up to ``timeout`` for one (``LockTimeout`` after that)."""
        AsyncSemaphore(self, self._parts, name, limit, ttl, timeout=timeout)  # checks them now

        def decorate(fn: _F) -> _F:
            @wraps(fn)
            async def run(*args: Any, **kwargs: Any) -> Any:
                permit = self.semaphore(name, limit, ttl, timeout=timeout, auto_renew=True)
                async with permit:
                    return await fn(*args, **kwargs)

            return cast(_F, run)

        return decorate

    def once_per(
        self,
        name: str,
        period: float | timedelta,
        *,
        ttl: float = 30.0,
        offset: float | timedelta = 0.0,
        timeout: float = 0.0,
        redis: AsyncRedis | AsyncRedisCluster | None = None,
    ) -> AsyncOncePer:
        """A decorator for a periodic job that every runner of a fleet ticks: each ``period``
        (seconds or a timedelta, counted from the epoch + ``offset``), the first tick that takes
        the lock ``name`` runs it, and records the period with a fenced write; the other ticks
        return None (docs/scheduling.md). ``redis``: the server of the record (Redlock mode)."""
        return AsyncOncePer(
            self, name, period, ttl=ttl, offset=offset, timeout=timeout, redis=redis
        )

    @property
    def prefix(self) -> str:
        return self._prefix

    def statistics(self) -> Statistics:
        """What this client's locks have done so far, and what they hold and wait for now."""
        return self._parts.counters.snapshot(queued=self._queues.queued())

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
        token = _fencing_token(token)
        value = validate_value(value)
        server = self._resource_server(redis, "fenced_set")
        reply = await self._on_resource(
            server, FENCED_SET, [key, fence_key_for(key)], [value, token]
        )
        _fenced(fenced_set_reply, reply, key, token)

    async def fenced_get(
        self, key: str, token: int, *, redis: AsyncRedis | AsyncRedisCluster | None = None
    ) -> bytes | None:
        """The value of ``key`` (bytes; None: no value), read for the holder of ``token``: in the
        same step every older token is refused from then on (``StaleToken`` here if ``token``
        is older itself), so no older holder's write can land between this read and this
        holder's ``fenced_set``."""
        key = validate_resource_key(key)
        token = _fencing_token(token)
        server = self._resource_server(redis, "fenced_get")
        reply = await self._on_resource(server, FENCED_GET, [key, fence_key_for(key)], [token])
        value: bytes | None = _fenced(fenced_get_reply, reply, key, token)
        return value

    async def fenced_update(
        self,
        key: str,
        token: int,
        fn: Callable[[bytes | None], str | bytes | int | float],
        *,
        redis: AsyncRedis | AsyncRedisCluster | None = None,
    ) -> str | bytes | int | float:
        """A fenced read-modify-write: ``fenced_get``, then write ``fn(value)`` if ``token`` is
        still the newest and the value is still the one read (``Conflict`` otherwise: someone
        wrote it without fencing, or with this token). Returns what was written. Two requests,
        each within one request timeout."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        value = await self.fenced_get(key, token, redis=redis)
        new = validate_value(fn(value), "the value fn returned")
        keys, args = [key, fence_key_for(key)], [new, token, digest(value)]
        reply = await self._on_resource(
            self._resource_server(redis, "fenced_update"), FENCED_SET, keys, args
        )
        _fenced(fenced_set_reply, reply, key, token)
        return new

    def versioned(
        self, key: str, *, redis: AsyncRedis | AsyncRedisCluster | None = None
    ) -> AsyncVersioned:
        """``key`` as a versioned value, written by compare-and-set without any lock (see
        ``AsyncVersioned``). ``redis``: the server of the key (this client's by default;
        required in Redlock mode)."""
        key = validate_resource_key(key)
        server = self._resource_server(redis, "versioned")
        return AsyncVersioned(key, partial(self._on_resource, server))

    def _resource_server(
        self, redis: AsyncRedis | AsyncRedisCluster | None, what: str
    ) -> AsyncRedis | AsyncRedisCluster | None:
        """The client for a resource key's server: ``redis`` if given, else None (this client's
        own server, which Redlock mode does not have)."""
        if redis is None and not isinstance(self._topology, AsyncOneServer):
            raise TypeError(f"{what} in Redlock mode needs redis=: the server of the resource")
        if redis is not None and not isinstance(redis, AsyncRedis | AsyncRedisCluster):
            expected = AsyncRedis.__module__ + ".Redis"
            raise TypeError(f"redis must be a {expected}, not {described(redis)}")
        return redis

    async def _on_resource(
        self,
        redis: AsyncRedis | AsyncRedisCluster | None,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
    ) -> Any:
        """``script``'s reply from the server of a resource key (``_resource_server``)."""
        try:
            if redis is None:  # within one request timeout
                topology = self._topology
                assert isinstance(topology, AsyncOneServer)
                reply, _ = await topology.script(script, keys, args, topology.request_timeout)
            else:  # the resource's server: within what the caller's client allows
                reply = await _run_script(redis, script, keys, args)
        except RedisError as exc:
            raise translate_error(exc, f"resource {keys[0]!r}") from exc
        return reply

    # -- operators' view (admin.py) ------------------------------------------------------

    async def inspect(self, name: str) -> LockInfo | None:
        """The lock on ``name`` as the server shows it now (Redlock: as a majority of nodes
        hold it): holder, label, ttl, fencing token, kind, queued waiters; when no lock of that
        name is held, its semaphore or read-write lock, with every holder. None when nothing
        is held. One script per kind looked at, each within one request timeout."""
        return await admin.inspect(self._topology, self._prefix, validate_name(name))

    async def locks(self, pattern: str = "*") -> AsyncIterator[LockInfo]:
        """The held locks, semaphores and read-write locks whose names match ``pattern`` (a
        Redis glob over names), found by SCAN on every server of this client: a name released
        meanwhile is left out, one taken meanwhile may be. Each SCAN call and each inspection
        is bounded by one request timeout."""
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
        async for info in admin.locks(self._topology, self._prefix, encodable("pattern", pattern)):
            yield info

    async def force_release(self, name: str, *, token: int | None = None) -> ForceReleased:
        """An administrator's release of ``name``, whoever holds it; with ``token`` (the
        fencing token ``inspect`` showed) only if that grant still holds. The waiters are served
        as by a release; the next grant gets a larger token, so the forced-out holder's fenced
        writes are refused, and its next renewal, extend, release or held() reports the loss.
        Logged on the "fencelock.admin" logger."""
        if token is not None:
            token = _fencing_token(token)
        return await admin.force_release(self._topology, self._prefix, validate_name(name), token)

    def _retire(self) -> None:
        """Closed as one collected unclosed is (from a finalizer: waiting for nothing), without
        the warning: fencelock.compat's client of an application's redis client just collected."""
        if self._finalizer.detach() is not None:
            _abandoned(None, self._owned)

    async def close(self) -> None:
        self._finalizer.detach()
        LIVE_CLIENTS.discard(self)
        await self._owned.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
