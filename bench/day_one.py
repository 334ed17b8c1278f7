"""Two figures of the "day one" issue, on an embedded server: what an idle waiter costs the
server, and grants orphaned by ``asyncio.wait_for``.

1. Idle waiters: W clients wait for a name whose holder has a long lease. The server's
   ``total_commands_processed`` over a window, per waiter per second (goal: 0), by default and
   with ``max_poll=1`` (the old default: one re-try per waiter per second).
2. ``wait_for``: N times ``await asyncio.wait_for(lock.acquire(), timeout)`` while another client
   takes and releases the lock in a loop. An orphan is a True whose grant the caller cannot use
   or release, or a key left held at the end (goal: 0).

    python -m bench.day_one [--waiters 16] [--seconds 10] [--loops 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import redis

from fencelock._async.client import AsyncLockClient
from fencelock._keys import LockKeys
from fencelock.errors import LockNotOwned
from fencelock_tools.servers.embedded import EmbeddedServer, find_server


def _commands(raw: redis.Redis) -> int:
    # the INFO call itself is counted once per sample; subtracted by the caller
    return int(raw.info("stats")["total_commands_processed"])


async def idle_cost(
    url: str, raw: redis.Redis, waiters: int, seconds: float, poll: float | None
) -> float:
    holder_client = AsyncLockClient.from_url(url)
    holder = holder_client.lock("idle", ttl=3600)
    assert await holder.acquire(timeout=0)
    clients = [AsyncLockClient.from_url(url, max_poll=poll) for _ in range(waiters)]
    tasks = [asyncio.ensure_future(c.lock("idle", ttl=30).acquire(timeout=None)) for c in clients]
    while sum(c.statistics().waiting for c in clients) < waiters:
        await asyncio.sleep(0.01)
    before = _commands(raw)
    await asyncio.sleep(seconds)  # the measurement window
    after = _commands(raw)
    per_waiter = (after - before - 1) / waiters / seconds
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await holder.release()
    for client in (holder_client, *clients):
        await client.close()
    return per_waiter


async def wait_for_orphans(
    url: str, raw: redis.Redis, loops: int, timeout: float
) -> tuple[int, int]:
    """(grants, orphans)."""
    mine, other_client = AsyncLockClient.from_url(url), AsyncLockClient.from_url(url)
    other = other_client.lock("wait-for", ttl=30)
    stop = asyncio.Event()

    async def contend() -> None:
        while not stop.is_set():
            async with other:
                await asyncio.sleep(timeout * 1.5)
            await asyncio.sleep(0.0005)

    contender = asyncio.ensure_future(contend())
    lock = mine.lock("wait-for", ttl=30)
    grants = orphans = 0
    for _ in range(loops):
        try:
            ok = await asyncio.wait_for(lock.acquire(), timeout)
        except TimeoutError:
            continue
        grants += ok
        try:
            assert lock.token > 0
            await lock.release()
        except LockNotOwned:
            orphans += 1
    stop.set()
    await contender
    await asyncio.sleep(0.1)  # shielded give-backs of cancelled acquires finish
    orphans += bool(raw.exists(LockKeys.for_name("wait-for").lock))
    await mine.close()
    await other_client.close()
    return grants, orphans


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=0.05)
    parser.add_argument(
        "--server", default=None, help="redis or valkey (default: redis if present)"
    )
    args = parser.parse_args()
    with EmbeddedServer(find_server(args.server)) as server:
        raw = server.client()
        start = time.monotonic()
        for poll in (None, 1.0):
            cost = await idle_cost(server.url, raw, args.waiters, args.seconds, poll)
            label = "default (no polling)" if poll is None else f"max_poll={poll}"
            print(
                f"idle waiters, {label}: {cost:.3f} commands per waiter per second "
                f"({args.waiters} waiters, {args.seconds:.0f} s)"
            )
        grants, orphans = await wait_for_orphans(server.url, raw, args.loops, args.timeout)
        print(
            f"wait_for(acquire(), {args.timeout}) x {args.loops} under contention: "
            f"{grants} grants, {orphans} orphaned"
        )
        print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
