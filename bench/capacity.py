"""How much Redis memory locks and waiters take (issues 7 and 34).

python -m bench.capacity [--server redis|valkey ...] [--locks N] [--waiters N]

Starts each server, holds ``--locks`` locks through a real client (simple and reentrant, with
and without a holder label like ``holder_label()``'s) and reads the keys each held lock has,
``MEMORY USAGE`` of them, the growth of ``used_memory`` per lock, and what is left per name once
they are all released; redis-py's ``Lock`` on the same names, for comparison. Then one held name
gets ``--waiters`` waiting asyncio clients (each a process, as far as the lock can tell: it
queues in Redis and has a pub/sub connection of its own) and reads the queue's ``MEMORY USAGE``
per waiter (the slope between a quarter and all of them) and ``used_memory`` per waiting client
(its connections included).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
from collections.abc import Sequence
from typing import Any

import redis

import fencelock
import fencelock.asyncio
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

LABEL = "web-7.eu-west.internal:48213:ThreadPoolExecutor-0_3"  # what holder_label() looks like
NAME_LENGTH = 12


def _names(count: int, tag: str) -> list[str]:
    return [f"{tag}{i:0{NAME_LENGTH - len(tag)}d}" for i in range(count)]


def _used(raw: redis.Redis) -> int:
    return int(raw.info("memory")["used_memory"])


def _usage(raw: redis.Redis, key: str) -> int:
    return int(raw.memory_usage(key, samples=0) or 0)


def held_locks(
    server: EmbeddedServer, count: int, reentrant: bool, label: str | None
) -> dict[str, Any]:
    """Bytes per held lock: its keys, MEMORY USAGE of them, used_memory growth while held and
    once released."""
    raw = server.client()
    raw.flushall()
    with fencelock.LockClient.from_url(server.url, label=label) as client:
        warm = client.lock("warm-up", 60, reentrant=reentrant)  # connections, scripts
        assert warm.acquire(timeout=0)
        warm.release()
        raw.flushall()
        before = _used(raw)
        locks = [client.lock(n, 600, reentrant=reentrant) for n in _names(count, "job")]
        for lock in locks:
            assert lock.acquire(timeout=0)
        after, keys = _used(raw), raw.dbsize()
        sample = [LockKeys.for_name(lock.name) for lock in locks[:100]]
        lock_key = statistics.median(_usage(raw, k.lock) for k in sample)
        fence_key = statistics.median(_usage(raw, k.fence) for k in sample)
        for lock in locks:
            lock.release()
        idle, left = _used(raw), raw.dbsize()
    raw.close()
    return {
        "keys": keys / count,
        "lock key": lock_key,
        "fence key": fence_key,
        "per lock": lock_key + fence_key,
        "used_memory per lock": (after - before) / count,
        "keys per idle name": left / count,
        "used_memory per idle name": (idle - before) / count,
    }


def redis_py_locks(server: EmbeddedServer, count: int) -> dict[str, Any]:
    """The same for redis-py's ``Lock`` (``r.lock(name, timeout=600)``) on the same names."""
    raw = server.client()
    raw.flushall()
    user = redis.Redis.from_url(server.url)
    warm = user.lock("warm-up", timeout=60)  # the connection, the release script
    assert warm.acquire(blocking=False)
    warm.release()
    before = _used(raw)
    locks = [user.lock(n, timeout=600) for n in _names(count, "job")]
    for lock in locks:
        assert lock.acquire(blocking=False)
    after, keys = _used(raw), raw.dbsize()
    lock_key = statistics.median(_usage(raw, lock.name) for lock in locks[:100])
    for lock in locks:
        lock.release()
    idle, left = _used(raw), raw.dbsize()
    user.close()
    raw.close()
    return {
        "keys": keys / count,
        "lock key": lock_key,
        "fence key": 0,
        "per lock": lock_key,
        "used_memory per lock": (after - before) / count,
        "keys per idle name": left / count,
        "used_memory per idle name": (idle - before) / count,
    }


async def _waiting(server: EmbeddedServer, count: int, label: str | None) -> dict[str, Any]:
    raw = server.client()
    raw.flushall()
    name = "queued-job00"
    queue = LockKeys.for_name(name).queue
    holder = fencelock.asyncio.LockClient.from_url(server.url)
    lock = holder.lock(name, 600)
    assert await lock.acquire(timeout=0)
    clients = []
    tasks: list[asyncio.Task[bool]] = []
    samples: dict[int, tuple[int, int]] = {}
    quarter = max(1, count // 4)
    try:
        for i in range(count):
            client = fencelock.asyncio.LockClient.from_url(server.url, label=label, max_poll=3600)
            clients.append(client)
            tasks.append(asyncio.ensure_future(client.lock(name, 60).acquire(timeout=600)))
            if i + 1 in (quarter, count):
                while raw.zcard(queue) < i + 1:
                    await asyncio.sleep(0.01)
                samples[i + 1] = (_usage(raw, queue), _used(raw))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            await client.close()
        await lock.release()
        await holder.close()
        raw.close()
    (q1, u1), (q2, u2) = samples[quarter], samples[count]
    return {
        "queue bytes per waiter": (q2 - q1) / (count - quarter),
        "used_memory per waiting client": (u2 - u1) / (count - quarter),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--server", action="append", choices=("redis", "valkey"))
    parser.add_argument("--locks", type=int, default=2000)
    parser.add_argument("--waiters", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"Python {platform.python_version()}, {args.locks} locks, {args.waiters} waiters")
    print()
    print("| server | lock | keys | lock key | fencing counter | bytes per held lock | "
          "used_memory per held lock | keys, used_memory per name once released |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    waiting = []
    for kind in args.server or ["redis", "valkey"]:
        with EmbeddedServer(find_server(kind)) as server:
            version = server.client().info("server")
            release = version.get("valkey_version") or version["redis_version"]
            where = f"{kind} {release}"
            rows = [("redis-py Lock", redis_py_locks(server, args.locks))]
            for reentrant in (False, True):
                for label in (None, LABEL):
                    what = ("reentrant" if reentrant else "simple") + (
                        ", labelled" if label else ""
                    )
                    rows.append((what, held_locks(server, args.locks, reentrant, label)))
            for what, r in rows:
                print(f"| {where} | {what} | {r['keys']:g} | {r['lock key']:.0f} B | "
                      f"{r['fence key']:.0f} B | {r['per lock']:.0f} B | "
                      f"{r['used_memory per lock']:.0f} B | {r['keys per idle name']:g}, "
                      f"{r['used_memory per idle name']:.0f} B |")  # fmt: skip
            for label in (None, LABEL):
                w = asyncio.run(_waiting(server, args.waiters, label))
                waiting.append((where, label, w))
    print()
    print("| server | waiter | queue bytes per waiter | used_memory per waiting client |")
    print("|---|---|---|---|")
    for where, label, w in waiting:
        what = "labelled" if label else "no label"
        print(f"| {where} | {what} | {w['queue bytes per waiter']:.0f} B | "
              f"{w['used_memory per waiting client']:.0f} B |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
