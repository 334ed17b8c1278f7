"""The other Redis locks ``bench.compare`` measures, behind ``fencelock_tools.benchmark``'s
contender interface (``lock(name)``, ``acquire(timeout)``: None waits, 0 tries once, > 0 waits
that long; ``release()``).

* redis-py's ``Lock`` (``Redis.lock``): ``SET NX PX`` with a token, a compare-and-delete script;
  a blocked acquire **polls** every ``sleep`` seconds (default 0.1; also measured with 0.001).
* python-redis-lock (``redis_lock.Lock``): ``SET NX EX`` (whole seconds), then ``BLPOP`` on a
  signal list that the release script pushes to: one waiter is woken per release. Every acquire
  first ``GET``s the key (to refuse a second acquire by the same object); timeouts are whole
  seconds. ``auto_renewal`` starts one thread per lock.
* pottery (``pottery.Redlock``, ``pottery.AIORedlock``): Redlock over the masters given (one here
  for P1-P3, P6); the sync one fans out through a new thread pool per request; a blocked acquire
  sleeps a random 0-0.2 s between tries. No automatic renewal.
* aioredlock (``aioredlock.Aioredlock``, asyncio only, on aioredis 1.3): Redlock; ``lock()`` tries
  3 times with 0.1-0.3 s between tries, then raises (we try again until the timeout); without a
  ``lock_timeout`` a task per lock re-extends it every 0.6 x ttl.

Every peer is imported lazily (``importlib``): one that is missing or broken is skipped by
``bench.compare`` with the reason, and the library and CI need none of them. Clients connect with
the settings ``LockClient.from_url`` uses (socket and connect timeouts of 5 s) where the peer
takes a redis-py client.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import math
import time
from functools import partial
from typing import Any

import redis
import redis.asyncio

from fencelock_tools.benchmark import SOCKET_TIMEOUT, Contender, Target


def load(module: str) -> Any:
    return importlib.import_module(module)


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _urls(target: Target) -> list[str]:
    return [target] if isinstance(target, str) else list(target)


def _sync_client(url: str, **options: Any) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT, **options
    )


def _async_client(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


def _single(target: Target, who: str) -> str:
    if not isinstance(target, str):
        raise ValueError(f"{who} locks one server, not {len(target)} masters")
    return target


# -- redis-py Lock ---------------------------------------------------------------------------


class RedisPyLock:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def acquire(self, *, timeout: float | None) -> bool:
        if timeout == 0:
            return bool(self.lock.acquire(blocking=False))
        return bool(self.lock.acquire(blocking=True, blocking_timeout=timeout))

    def release(self) -> None:
        self.lock.release()


class RedisPyLocks:
    def __init__(self, target: Target, ttl: float, sleep: float = 0.1) -> None:
        self.client = _sync_client(_single(target, "redis-py's Lock"))
        self.ttl, self.sleep = ttl, sleep

    def lock(self, name: str) -> RedisPyLock:
        return RedisPyLock(self.client.lock(name, timeout=self.ttl, sleep=self.sleep))

    def close(self) -> None:
        self.client.close()


class RedisPyAsyncLock:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    async def acquire(self, *, timeout: float | None) -> bool:
        if timeout == 0:
            return bool(await self.lock.acquire(blocking=False))
        return bool(await self.lock.acquire(blocking=True, blocking_timeout=timeout))

    async def release(self) -> None:
        await self.lock.release()


class RedisPyAsyncLocks:
    def __init__(self, target: Target, ttl: float, sleep: float = 0.1) -> None:
        self.client = _async_client(_single(target, "redis-py's Lock"))
        self.ttl, self.sleep = ttl, sleep

    def lock(self, name: str) -> RedisPyAsyncLock:
        return RedisPyAsyncLock(self.client.lock(name, timeout=self.ttl, sleep=self.sleep))

    async def close(self) -> None:
        await self.client.aclose()


def redis_py_keys(name: str) -> list[str]:
    return [name]


# -- python-redis-lock -----------------------------------------------------------------------


class PrlLock:
    def __init__(self, client: redis.Redis, name: str, ttl: float, renew: bool) -> None:
        self.expire = max(1, round(ttl))  # whole seconds only
        self.lock = load("redis_lock").Lock(client, name, expire=self.expire, auto_renewal=renew)

    def acquire(self, *, timeout: float | None) -> bool:
        if timeout == 0:
            return bool(self.lock.acquire(blocking=False))
        if timeout is None:
            return bool(self.lock.acquire(blocking=True))
        # whole seconds, and (without renewal) at most its expiry
        return bool(self.lock.acquire(blocking=True, timeout=min(math.ceil(timeout), self.expire)))

    def release(self) -> None:
        self.lock.release()


class PrlLocks:
    def __init__(
        self, target: Target, ttl: float, renew: bool = False, max_connections: int | None = None
    ) -> None:
        options = {} if max_connections is None else {"max_connections": max_connections}
        self.client = _sync_client(_single(target, "python-redis-lock"), **options)
        self.ttl, self.renew = ttl, renew

    def lock(self, name: str) -> PrlLock:
        return PrlLock(self.client, name, self.ttl, self.renew)

    def close(self) -> None:
        self.client.close()


def prl_keys(name: str) -> list[str]:
    return [f"lock:{name}", f"lock-signal:{name}"]


# -- pottery ---------------------------------------------------------------------------------


class PotteryLock:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def acquire(self, *, timeout: float | None) -> bool:
        if timeout == 0:
            return bool(self.lock.acquire(blocking=False))
        return bool(self.lock.acquire(blocking=True, timeout=-1 if timeout is None else timeout))

    def release(self) -> None:
        self.lock.release()


class PotteryLocks:
    def __init__(self, target: Target, ttl: float) -> None:
        self.masters = [_sync_client(url) for url in _urls(target)]
        self.ttl = ttl

    def lock(self, name: str) -> PotteryLock:
        redlock = load("pottery").Redlock
        return PotteryLock(redlock(key=name, masters=set(self.masters), auto_release_time=self.ttl))

    def close(self) -> None:
        for master in self.masters:
            master.close()


class PotteryAsyncLock:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    async def acquire(self, *, timeout: float | None) -> bool:
        if timeout == 0:
            return bool(await self.lock.acquire(blocking=False))
        wait = -1 if timeout is None else timeout
        return bool(await self.lock.acquire(blocking=True, timeout=wait))

    async def release(self) -> None:
        await self.lock.release()


class PotteryAsyncLocks:
    def __init__(self, target: Target, ttl: float) -> None:
        self.masters = [_async_client(url) for url in _urls(target)]
        self.ttl = ttl

    def lock(self, name: str) -> PotteryAsyncLock:
        redlock = load("pottery").AIORedlock
        return PotteryAsyncLock(
            redlock(key=name, masters=set(self.masters), auto_release_time=self.ttl)
        )

    async def close(self) -> None:
        for master in self.masters:
            await master.aclose()


def pottery_keys(name: str) -> list[str]:
    return [f"redlock:{name}"]


# -- aioredlock ------------------------------------------------------------------------------


class AioredlockLock:
    def __init__(self, owner: AioredlockLocks, name: str) -> None:
        self.owner = owner
        self.name = name
        self.held: Any = None

    async def acquire(self, *, timeout: float | None) -> bool:
        owner = self.owner
        deadline = None if timeout is None else time.monotonic() + timeout
        lock_timeout = None if owner.renew else owner.ttl  # None: auto-extended by a task
        while True:
            try:  # up to 3 tries, 0.1-0.3 s apart
                self.held = await owner.manager.lock(self.name, lock_timeout=lock_timeout)
                return True
            except owner.errors.LockError:
                if deadline is not None and time.monotonic() >= deadline:
                    return False

    async def release(self) -> None:
        held, self.held = self.held, None
        await self.owner.manager.unlock(held)


class AioredlockLocks:
    def __init__(self, target: Target, ttl: float, renew: bool = False) -> None:
        aioredlock = load("aioredlock")
        self.errors = aioredlock
        self.manager = aioredlock.Aioredlock(_urls(target), internal_lock_timeout=ttl)
        self.ttl, self.renew = ttl, renew

    def lock(self, name: str) -> AioredlockLock:
        return AioredlockLock(self, name)

    async def close(self) -> None:
        await self.manager.destroy()
        await asyncio.sleep(0)


# -- the contenders --------------------------------------------------------------------------

REDIS_PY = Contender(
    "redis-py Lock",
    RedisPyLocks,
    RedisPyAsyncLocks,
    redis_py_keys,
    note="polls every 0.1 s while blocked (its default sleep)",
)
REDIS_PY_1MS = Contender(
    "redis-py Lock sleep=0.001",
    partial(RedisPyLocks, sleep=0.001),
    partial(RedisPyAsyncLocks, sleep=0.001),
    redis_py_keys,
    note="polls every 1 ms while blocked",
)
PRL = Contender(
    "python-redis-lock",
    PrlLocks,
    None,
    prl_keys,
    note="BLPOP on a signal list: one waiter woken per release",
)
POTTERY = Contender(
    "pottery",
    PotteryLocks,
    PotteryAsyncLocks,
    pottery_keys,
    note="Redlock; sleeps a random 0-0.2 s between tries",
)
AIOREDLOCK = Contender(
    "aioredlock",
    None,
    AioredlockLocks,
    redis_py_keys,
    note="Redlock; 3 tries 0.1-0.3 s apart per lock() call (retried until the timeout)",
)
PRL_RENEWING = Contender(
    "python-redis-lock",
    partial(PrlLocks, renew=True),
    None,
    prl_keys,
    renew_every=2 / 3,
    note="auto_renewal: one thread per lock, renews every 2/3 of the expiry",
)
# redis-py 8's pools stop at 100 connections: with one renewal thread per lock, more than 100
# renewals due at once fail (MaxConnectionsError) and end their threads. The same with room:
PRL_RENEWING_BIG_POOL = Contender(
    "python-redis-lock, max_connections=20000",
    partial(PrlLocks, renew=True, max_connections=20_000),
    None,
    prl_keys,
    renew_every=2 / 3,
    note="as above, with a pool of up to 20,000 connections instead of redis-py 8's 100",
)
AIOREDLOCK_RENEWING = Contender(
    "aioredlock",
    None,
    partial(AioredlockLocks, renew=True),
    redis_py_keys,
    renew_every=0.6,
    note="one task per lock re-extends it every 0.6 x ttl",
)

# distribution name and module per peer, for the skip check and the versions printed
DISTRIBUTIONS = {
    "redis-py Lock": ("redis", "redis.lock"),
    "redis-py Lock sleep=0.001": ("redis", "redis.lock"),
    "python-redis-lock": ("python-redis-lock", "redis_lock"),
    "python-redis-lock, max_connections=20000": ("python-redis-lock", "redis_lock"),
    "pottery": ("pottery", "pottery"),
    "aioredlock": ("aioredlock", "aioredlock"),
}


def unavailable(contender: Contender) -> str | None:
    """Why ``contender`` cannot be measured here (not installed, or fails to import), or None."""
    dist = DISTRIBUTIONS.get(contender.label)
    if dist is None:
        return None
    try:
        load(dist[1])
    except Exception as exc:  # ImportError, or a peer broken on this Python / redis-py
        return f"{dist[0]} cannot be imported: {type(exc).__name__}: {exc}"
    return None
