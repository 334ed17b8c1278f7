"""Uncontended semaphore acquire+release: fencelock against a minimal hand-written one (issue 15).

    python -m bench.semaphore [--seconds 1] [--repeat 5] [--warmup 0.3] [--url redis://...]

* ``fencelock sync`` / ``fencelock async``: ``client.semaphore("bench-sem", 10)``,
  ``acquire()`` then ``release()``.
* ``minimal sync``: the usual sorted-set semaphore, one script to take a permit (drop the
  expired entries, count, add this holder with its lease end) and ``ZREM`` to give it back:
  permits with leases, but no queue (no fairness), no fencing token, no renewal, no stored
  limit. Two round trips, as fencelock's.

Method and report as ``bench.uncontended``: rotated order, medians, client CPU per cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Final

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


def fencelock_sync_cycle(client: fencelock.LockClient) -> SyncCycle:
    semaphore = client.semaphore(NAME, LIMIT, ttl=TTL_MS / 1000)

    def cycle() -> None:
        if not semaphore.acquire(timeout=0):
            raise BenchError("fencelock sync: no permit")
        semaphore.release()

    return cycle


def fencelock_async_cycle(client: fencelock.asyncio.LockClient) -> AsyncCycle:
    semaphore = client.semaphore(NAME, LIMIT, ttl=TTL_MS / 1000)

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


@contextmanager
def variants(url: str, runner: asyncio.Runner) -> Iterator[list[Variant]]:
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
        sha: str = plain.script_load(MINIMAL_ACQUIRE)
        fl_sync, fl_async = fencelock_sync_cycle(sync_client), fencelock_async_cycle(async_client)
        minimal = minimal_sync_cycle(plain, sha)
        yield [
            Variant("fencelock sync", lambda s: time_sync(fl_sync, s)),
            Variant("minimal sync", lambda s: time_sync(minimal, s)),
            Variant("fencelock async", lambda s: runner.run(time_async(fl_async, s))),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.semaphore",
        description="Uncontended semaphore acquire+release cycles/s: fencelock vs a minimal one.",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="one run, s (default 1)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per variant (default 5)")
    parser.add_argument("--warmup", type=float, default=0.3, help="warm-up per variant, s (0.3)")
    parser.add_argument("--url", help="an existing server (default: start one with EmbeddedServer)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0")
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer()).url
        print(f"server:  {server_description(url)} at {url}")
        print(f"client:  {client_description()}")
        runner = stack.enter_context(asyncio.Runner())
        all_variants = stack.enter_context(variants(url, runner))
        measure(all_variants, args.seconds, args.repeat, args.warmup)
        print_table(all_variants, args.seconds, args.repeat)
        by_name = {v.name: v for v in all_variants}
        print_ratios([(by_name["fencelock sync"], by_name["minimal sync"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
