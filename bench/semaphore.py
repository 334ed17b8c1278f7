"""Uncontended acquire+release of the primitives beyond the mutex, each against a minimal
hand-written equivalent (issue 15): the semaphore, both sides of the read-write lock, and the
multi-lock.

    python -m bench.semaphore [--seconds 1] [--repeat 5] [--warmup 0.3] [--url redis://...]
                              [--fresh]

* ``fencelock sync`` / ``fencelock async``: ``client.semaphore("bench-sem", 10)``,
  ``acquire()`` then ``release()``.
* ``minimal sync``: the usual sorted-set semaphore, one script to take a permit (drop the
  expired entries, count, add this holder with its lease end) and ``ZREM`` to give it back:
  permits with leases, but no queue (no fairness), no fencing token, no renewal, no stored
  limit. Two round trips, as fencelock's.
* ``fencelock read`` / ``fencelock write``: ``client.rw_lock("bench-rw")``'s two sides;
  ``minimal read`` / ``minimal write``: readers in a sorted set with their lease ends, a writer
  in a string key, one script to take a side (refused while the other side holds) and one to
  give it back. No queue (writers starve), no fencing token. Two round trips each, as ours.
* ``fencelock multi (3)``: ``client.multi_lock`` of three names on one server; ``minimal multi
  (3)``: one script that sets the three keys (SET NX PX) or none, one that deletes those still
  holding its token. fencelock takes the names one by one in canonical order (docs/multilock.md):
  three round trips to take, three to give back, against two.

Each fencelock row takes and gives back one object, made once (``acquire(timeout=0)``,
``release()``); with ``--fresh``, a new object per cycle in a ``with`` block, as ``with
client.semaphore(...):`` code makes them (issue 23's method: what building and validating the
object costs is then in the figure too).

Method and report as ``bench.uncontended``: rotated order, medians, client CPU per cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from types import TracebackType
from typing import Final, Protocol

import redis

import fencelock
import fencelock.asyncio
from fencelock_tools.servers.embedded import EmbeddedServer

from ._common import (
    SOCKET_TIMEOUT,
    TOKEN_BYTES,
    TTL_MS,
    AsyncCycle,
    BenchError,
    SyncCycle,
    Variant,
    client_description,
    measure,
    print_ratios,
    print_table,
    server_description,
    time_async,
    time_sync,
)

NAME: Final = "bench-sem"
LIMIT: Final = 10
RW_NAME: Final = "bench-rw"
MINIMAL_KEY: Final = "bench:minimal:semaphore"
# KEYS[1] the permits (holder -> lease end, ms); ARGV: holder, ttl ms, limit
MINIMAL_ACQUIRE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
RW_KEYS: Final = ("bench:minimal:{rw}:readers", "bench:minimal:{rw}:writer")
# KEYS: readers (holder -> lease end, ms), writer; ARGV: holder, ttl ms, 'r' or 'w'
MINIMAL_RW_ACQUIRE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if ARGV[3] == 'r' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  return 1
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""
MINIMAL_RW_RELEASE: Final = """
if ARGV[2] == 'r' then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return redis.call('DEL', KEYS[2])
end
return 0
"""
MULTI_NAMES: Final = ("bench-multi-a", "bench-multi-b", "bench-multi-c")
MULTI_KEYS: Final = tuple(f"bench:minimal:{{multi}}:{n}" for n in MULTI_NAMES)
# KEYS: the locks; ARGV: holder, ttl ms
MINIMAL_MULTI_ACQUIRE: Final = """
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
"""
MINIMAL_MULTI_RELEASE: Final = """
local freed = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    freed = freed + redis.call('DEL', key)
  end
end
return freed
"""


class Primitive(Protocol):
    """A semaphore, a side of a read-write lock or a multi-lock, as the rows use them."""

    def acquire(self, *, timeout: float | None) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> object: ...


def primitives(client: fencelock.LockClient) -> dict[str, Callable[[], Primitive]]:
    """fencelock's objects by row; each call makes a new one. ``timeout=0``: a ``with`` block
    that is refused raises ``LockTimeout`` at once."""
    ttl = TTL_MS / 1000
    return {
        "semaphore": lambda: client.semaphore(NAME, LIMIT, ttl=ttl, timeout=0),
        "read": lambda: client.rw_lock(RW_NAME, ttl=ttl, timeout=0).read(),
        "write": lambda: client.rw_lock(RW_NAME, ttl=ttl, timeout=0).write(),
        "multi (3)": lambda: client.multi_lock(MULTI_NAMES, ttl=ttl, timeout=0),
    }


def fencelock_cycle(make: Callable[[], Primitive], *, fresh: bool) -> SyncCycle:
    """Take and give back one object made here, or (``fresh``) a new one per cycle."""
    if fresh:

        def fresh_cycle() -> None:
            with make():
                pass

        return fresh_cycle
    primitive = make()

    def cycle() -> None:
        if not primitive.acquire(timeout=0):
            raise BenchError(f"fencelock {primitive!r}: refused")
        primitive.release()

    return cycle


def fencelock_async_cycle(client: fencelock.asyncio.LockClient, *, fresh: bool) -> AsyncCycle:
    """The semaphore under asyncio, as ``fencelock_cycle``."""

    def make() -> fencelock.asyncio.Semaphore:
        return client.semaphore(NAME, LIMIT, ttl=TTL_MS / 1000, timeout=0)

    if fresh:

        async def fresh_cycle() -> None:
            async with make():
                pass

        return fresh_cycle
    semaphore = make()

    async def cycle() -> None:
        if not await semaphore.acquire(timeout=0):
            raise BenchError("fencelock async: no permit")
        await semaphore.release()

    return cycle


def minimal_sync_cycle(client: redis.Redis, sha: str) -> SyncCycle:
    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if client.evalsha(sha, 1, MINIMAL_KEY, token, TTL_MS, LIMIT) != 1:
            raise BenchError("minimal sync: no permit")
        if client.zrem(MINIMAL_KEY, token) != 1:
            raise BenchError("minimal sync: the permit was gone at release")

    return cycle


def minimal_rw_cycle(client: redis.Redis, shas: tuple[str, str], write: bool) -> SyncCycle:
    mode = "w" if write else "r"

    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if client.evalsha(shas[0], 2, *RW_KEYS, token, TTL_MS, mode) != 1:
            raise BenchError(f"minimal {mode}: refused")
        if client.evalsha(shas[1], 2, *RW_KEYS, token, mode) != 1:
            raise BenchError(f"minimal {mode}: gone at release")

    return cycle


def minimal_multi_cycle(client: redis.Redis, shas: tuple[str, str]) -> SyncCycle:
    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if client.evalsha(shas[0], len(MULTI_KEYS), *MULTI_KEYS, token, TTL_MS) != 1:
            raise BenchError("minimal multi: refused")
        if client.evalsha(shas[1], len(MULTI_KEYS), *MULTI_KEYS, token) != len(MULTI_KEYS):
            raise BenchError("minimal multi: gone at release")

    return cycle


def minimal_cycles(plain: redis.Redis) -> dict[str, SyncCycle]:
    """The hand-written equivalents by row, their scripts loaded."""
    rw_shas = (plain.script_load(MINIMAL_RW_ACQUIRE), plain.script_load(MINIMAL_RW_RELEASE))
    multi_shas = (
        plain.script_load(MINIMAL_MULTI_ACQUIRE),
        plain.script_load(MINIMAL_MULTI_RELEASE),
    )
    return {
        "semaphore": minimal_sync_cycle(plain, plain.script_load(MINIMAL_ACQUIRE)),
        "read": minimal_rw_cycle(plain, rw_shas, write=False),
        "write": minimal_rw_cycle(plain, rw_shas, write=True),
        "multi (3)": minimal_multi_cycle(plain, multi_shas),
    }


# the suffix of each row's variants ("fencelock sync", "minimal sync"...)
SUFFIXES: Final = {"semaphore": "sync", "read": "read", "write": "write", "multi (3)": "multi (3)"}


@contextmanager
def variants(url: str, runner: asyncio.Runner, *, fresh: bool = False) -> Iterator[list[Variant]]:
    with ExitStack() as stack:
        sync_client = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)
        stack.callback(sync_client.close)
        plain = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        stack.callback(plain.close)

        async def make_async() -> fencelock.asyncio.LockClient:
            return fencelock.asyncio.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)

        async_client = runner.run(make_async())
        stack.callback(lambda: runner.run(async_client.close()))
        made, minimal = primitives(sync_client), minimal_cycles(plain)
        fl_async = fencelock_async_cycle(async_client, fresh=fresh)
        found = [
            Variant(f"{who} {suffix}", partial(time_sync, cycle))
            for row, suffix in SUFFIXES.items()
            for who, cycle in (
                ("fencelock", fencelock_cycle(made[row], fresh=fresh)),
                ("minimal", minimal[row]),
            )
        ]
        yield [*found, Variant("fencelock async", lambda s: runner.run(time_async(fl_async, s)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.semaphore",
        description="Uncontended acquire+release cycles/s of the semaphore, read-write lock and "
        "multi-lock: fencelock vs minimal hand-written ones.",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="one run, s (default 1)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per variant (default 5)")
    parser.add_argument("--warmup", type=float, default=0.3, help="warm-up per variant, s (0.3)")
    parser.add_argument("--url", help="an existing server (default: start one with EmbeddedServer)")
    parser.add_argument(
        "--fresh", action="store_true",
        help="a new fencelock object per cycle, in a with block (default: one object reused)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0")
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer()).url
        print(f"server:  {server_description(url)} at {url}")
        print(f"client:  {client_description()}")
        runner = stack.enter_context(asyncio.Runner())
        all_variants = stack.enter_context(variants(url, runner, fresh=args.fresh))
        measure(all_variants, args.seconds, args.repeat, args.warmup)
        print_table(all_variants, args.seconds, args.repeat)
        by_name = {v.name: v for v in all_variants}
        pairs = [("fencelock sync", "minimal sync")] + [
            (f"fencelock {what}", f"minimal {what}") for what in ("read", "write", "multi (3)")
        ]
        print_ratios([(by_name[ours], by_name[base]) for ours, base in pairs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
