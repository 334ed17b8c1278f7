# GENERATED from tests/_async/test_wake.py by tools/gen_sync.py: edit that file instead.
"""Waking waiters one at a time (``wake="one"``): a queue in Redis, a channel per waiter.
Sync twin generated into tests/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._backend import SyncEvent
from fencelock._embedded import EmbeddedServer
from fencelock.keys import LockKeys
from tests.concurrency import SyncCall, sync_until

NAME = "herd"
QUEUE = LockKeys.for_name(NAME).queue


@pytest.fixture
def clients(server: EmbeddedServer, raw: redis.Redis) -> Iterator[list[LockClient]]:
    """Four clients (four processes, as far as the lock can tell) that wake one at a time; the
    fallback re-try is an hour away, so only a release message can wake a waiter."""
    made = [LockClient.from_url(server.url, wake="one", max_poll=3600.0) for _ in range(4)]
    try:
        yield made
    finally:
        for client in made:
            client.close()


def queued(raw: redis.Redis) -> list[str]:
    return [str(member) for member in raw.zrange(QUEUE, 0, -1)]


def test_release_wakes_only_the_first_waiter(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder_client, *waiter_clients = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(0)
    order: list[int] = []
    done = [SyncEvent() for _ in waiter_clients]  # set: release the lock taken
    calls = []
    for i, client in enumerate(waiter_clients):
        lock = client.lock(NAME, ttl=3600)

        def take(lock: Lock = lock, i: int = i) -> None:
            assert lock.acquire(timeout=None)
            order.append(i)
            done[i].wait(None)
            lock.release()

        calls.append(SyncCall(take))
        # one at a time, so that the queue's order is known
        sync_until(lambda: len(queued(raw)) == len(calls))
    holder.release()
    sync_until(lambda: order == [0])
    # the first in the queue was woken and holds the lock; the others heard nothing
    assert [c.wait_stats.wakeups for c in waiter_clients] == [1, 0, 0]
    assert len(queued(raw)) == 2
    # each release wakes the next, in the order they queued
    for event, call in zip(done, calls, strict=True):
        event.set()
        call.result()
    assert order == [0, 1, 2]
    assert [c.wait_stats.wakeups for c in waiter_clients] == [1, 1, 1]
    assert [c.wait_stats.polls for c in waiter_clients] == [0, 0, 0]
    assert queued(raw) == []


def test_wake_all_wakes_every_waiter(server: EmbeddedServer, raw: redis.Redis) -> None:
    # The other mode, for contrast: no queue, one message on the lock's channel wakes every
    # waiting client; one wins the re-try, the others wait again.
    made = [LockClient.from_url(server.url, wake="all", max_poll=3600.0) for _ in range(3)]
    holder_client, *waiter_clients = made
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(0)
    order: list[int] = []
    done = [SyncEvent() for _ in waiter_clients]

    def take(lock: Lock, i: int) -> None:
        assert lock.acquire(timeout=None)
        order.append(i)
        done[i].wait(None)
        lock.release()

    calls = [
        SyncCall(lambda client=client, i=i: take(client.lock(NAME, ttl=10), i))
        for i, client in enumerate(waiter_clients)
    ]
    sync_until(lambda: all(c.wait_stats.waiting == 1 for c in waiter_clients))
    holder.release()
    sync_until(lambda: len(order) == 1)
    # one message woke both: the winner holds the lock, the other waits again
    sync_until(lambda: all(c.wait_stats.wakeups == 1 for c in waiter_clients))
    assert not raw.exists(QUEUE)
    first = order[0]
    done[first].set()
    calls[first].result()
    sync_until(lambda: len(order) == 2)
    done[order[1]].set()
    calls[order[1]].result()
    for client in made:
        client.close()


def test_a_waiter_that_left_is_skipped(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder_client, gone_client, waiter_client, _ = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(0)
    holder_token = holder.token
    # a waiter that gives up leaves the queue ...
    assert not gone_client.lock(NAME, ttl=10).acquire(timeout=0.2)
    assert queued(raw) == []
    # ... one that died did not: its entry stays, first in line, but nobody listens for it
    raw.zadd(QUEUE, {"died": 1})
    waiter = waiter_client.lock(NAME, ttl=10)

    def take() -> int:
        assert waiter.acquire(timeout=None)
        token = waiter.token
        waiter.release()
        return token

    call = SyncCall(take)
    sync_until(lambda: len(queued(raw)) == 2)
    holder.release()
    assert call.result() > holder_token
    assert waiter_client.wait_stats.wakeups == 1 and waiter_client.wait_stats.polls == 0
    assert queued(raw) == []  # the stale entry was popped and passed over


def test_try_once_does_not_queue(clients: list[LockClient], raw: redis.Redis) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(0)
    assert not clients[1].lock(NAME, ttl=10).acquire(timeout=0)
    assert not raw.exists(QUEUE)
    holder.release()


def test_the_queue_expires_with_its_waiters(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(0)
    waiter = clients[1].lock(NAME, ttl=10)

    def take() -> None:
        assert waiter.acquire(timeout=None)
        waiter.release()

    call = SyncCall(take)
    sync_until(lambda: len(queued(raw)) == 1)
    # kept for the holder's remaining ttl plus the waiter's: a waiter re-queues before then, so
    # a queue left by waiters that all died goes away on its own
    assert 3600_000 < raw.pttl(QUEUE) <= 3610_000
    holder.release()
    call.result()
    assert not raw.exists(QUEUE)


def test_bad_wake_mode(server: EmbeddedServer) -> None:
    with pytest.raises(ValueError, match="wake"):
        LockClient.from_url(server.url, wake="some")
