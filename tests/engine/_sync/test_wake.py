# GENERATED from tests/engine/_async/test_wake.py by tools/gen_sync.py: edit that file instead.
"""Waking waiters one at a time (``wake="one"``): a queue in Redis, a channel per waiter.
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fencelock._sync import contention
from fencelock._sync import waiter as waiter_module
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._backend import SyncEvent
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock._transport import SyncPubSub
from fencelock.errors import LockConnectionError, LockError, LockTimeout
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.clients import SyncClients
from tests.concurrency import SyncCall, sync_running, sync_until, evalsha_calls

NAME = "herd"
KEYS = LockKeys.for_name(NAME)
QUEUE = KEYS.queue


@pytest.fixture
def clients(
    server: EmbeddedServer, raw: redis.Redis, sync_clients: SyncClients
) -> Iterator[list[LockClient]]:
    """Four clients (four processes, as far as the lock can tell) that wake one at a time; the
    fallback re-try is an hour away, so only a release message can wake a waiter."""
    made = [sync_clients.of(server, wake="one", max_poll=3600.0) for _ in range(4)]
    try:
        yield made
    finally:
        for client in made:
            client.close()


def queued(raw: redis.Redis) -> list[str]:
    return [str(member) for member in raw.zrange(QUEUE, 0, -1)]


@pytest.mark.glide
def test_release_wakes_only_the_first_waiter(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder_client, *waiter_clients = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
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
    assert [c.statistics().wakeups for c in waiter_clients] == [1, 0, 0]
    assert len(queued(raw)) == 2
    # each release wakes the next, in the order they queued
    for event, call in zip(done, calls, strict=True):
        event.set()
        call.result()
    assert order == [0, 1, 2]
    assert [c.statistics().wakeups for c in waiter_clients] == [1, 1, 1]
    assert [c.statistics().polls for c in waiter_clients] == [0, 0, 0]
    assert queued(raw) == []


def test_wake_all_wakes_every_waiter(server: EmbeddedServer, raw: redis.Redis) -> None:
    # The other mode, for contrast: no queue, one message on the lock's channel wakes every
    # waiting client; one wins the re-try, the others wait again.
    made = [LockClient.from_url(server.url, wake="all", max_poll=3600.0) for _ in range(3)]
    holder_client, *waiter_clients = made
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
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
    sync_until(lambda: all(c.statistics().waiting == 1 for c in waiter_clients))
    holder.release()
    sync_until(lambda: len(order) == 1)
    # one message woke both: the winner holds the lock, the other waits again (no waiter of
    # its own in the queue: '*' stands for every waiter of the lock's channel)
    sync_until(lambda: all(c.statistics().wakeups == 1 for c in waiter_clients))
    assert raw.zrange(QUEUE, 0, -1) == ["*"]
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
    assert holder.acquire(timeout=0)
    holder_token = holder.token
    # a waiter that gives up leaves the queue ...
    assert not gone_client.lock(NAME, ttl=10).acquire(timeout=0.2)
    assert queued(raw) == []
    # ... ones that died did not: their entries stay, first in line, but nobody listens for
    # them (one to be woken, one to be granted the lock by the release)
    raw.zadd(QUEUE, {"died": 1, "died-too 10000 1 its-token": 2})
    waiter = waiter_client.lock(NAME, ttl=10)

    def take() -> int:
        assert waiter.acquire(timeout=None)
        token = waiter.token
        waiter.release()
        return token

    call = SyncCall(take)
    sync_until(lambda: len(queued(raw)) == 3)
    holder.release()
    assert call.result() > holder_token
    assert waiter_client.statistics().wakeups == 1 and waiter_client.statistics().polls == 0
    assert queued(raw) == []  # the stale entry was popped and passed over


def test_try_once_does_not_queue(clients: list[LockClient], raw: redis.Redis) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    assert not clients[1].lock(NAME, ttl=10).acquire(timeout=0)
    assert not raw.exists(QUEUE)
    holder.release()


def test_the_queue_expires_with_its_waiters(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
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


def hold_in_a_call(lock: Lock) -> tuple[SyncCall, SyncEvent, SyncEvent]:
    """Acquire ``lock`` (waiting as long as it takes) in a call of its own, set ``taken``, hold
    it until ``done`` is set, release it; the call's result is the fencing token it had."""
    taken, done = SyncEvent(), SyncEvent()

    def take() -> int:
        assert lock.acquire(timeout=None)
        taken.set()
        done.wait(None)
        token = lock.token
        lock.release()
        return token

    return SyncCall(take), taken, done


@pytest.mark.glide
def test_a_release_grants_the_lock_to_the_first_waiter(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder_client, waiter_client, *_ = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    holder_token = holder.token
    waiter = waiter_client.lock(NAME, ttl=10)
    call, taken, done = hold_in_a_call(waiter)
    sync_until(lambda: len(queued(raw)) == 1)
    waiter_id, ttl_ms, block, its_token = queued(raw)[0].split(" ")
    assert (ttl_ms, block) == ("10000", "1")
    before = evalsha_calls(raw)
    holder.release()
    # the release itself granted it: the key holds the waiter's token (and the fencing token
    # the release handed out), with the waiter's ttl
    held, granted = lock_value(raw.get(KEYS.lock))
    assert held == its_token and granted is not None
    assert 9000 < raw.pttl(KEYS.lock) <= 10_000
    assert taken.wait(10)
    # ... and the waiter took it from the message, without a re-try of its own
    assert evalsha_calls(raw) == before + 1
    assert lock_value(raw.get(KEYS.lock)) == (its_token, granted)
    assert waiter_client.statistics().wakeups == 1 and waiter_client.statistics().polls == 0
    done.set()
    assert call.result() == granted > holder_token
    assert queued(raw) == [] and not raw.exists(KEYS.lock)
    # the waiter's channel is unsubscribed after the acquire returned (by the listener)
    channel = f"{KEYS.channel}:{waiter_id}"
    sync_until(lambda: raw.pubsub_numsub(channel) == [(channel, 0)])


def test_a_grant_nobody_listens_for_is_taken_back(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    fence = holder.token
    raw.zadd(QUEUE, {"died 10000 1 its-token": 1})
    holder.release()
    assert not raw.exists(KEYS.lock)  # not left to a waiter that is gone
    assert queued(raw) == []
    lock = clients[1].lock(NAME, ttl=10)
    assert lock.acquire(timeout=0)
    assert lock.token > fence
    lock.release()


def test_a_waiter_that_leaves_gives_back_a_grant_it_did_not_see(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    # A release granted the lock to a waiter just as it gave up: the message reached its
    # connection, but the waiter was already leaving. Its leaving releases that grant.
    holder_client, leaving_client, next_client, _ = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    leaving = leaving_client.lock(NAME, ttl=3600)
    entry = "leaving 3600000 1 its-token"
    raw.zadd(QUEUE, {entry: 1})
    listener = raw.pubsub()
    listener.subscribe(f"{KEYS.channel}:leaving")  # so the release finds it listening
    next_lock = next_client.lock(NAME, ttl=10)

    def take() -> bool:
        granted = next_lock.acquire(timeout=None)
        next_lock.release()
        return granted

    call = SyncCall(take)
    sync_until(lambda: len(queued(raw)) == 2)
    holder.release()
    assert lock_value(raw.get(KEYS.lock))[0] == "its-token"
    contention._leave_queue(leaving._lease, "its-token", entry, None, None)
    assert call.result()  # the next waiter was served by that release
    assert next_client.statistics().polls == 0
    assert queued(raw) == []
    listener.close()


def test_a_fencing_counter_of_the_wrong_type_fails_the_waiter_cleanly(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    waiter = clients[1].lock(NAME, ttl=10)
    call = SyncCall(lambda: waiter.acquire(timeout=None))
    sync_until(lambda: len(queued(raw)) == 1)
    raw.delete(KEYS.fence)
    raw.hset(KEYS.fence, "not", "a counter")
    holder.release()
    # no grant without a token: the waiter re-tries and hears of the counter itself
    with pytest.raises(LockError, match="another Redis type"):
        call.result()
    assert not raw.exists(KEYS.lock)
    assert queued(raw) == []


def test_a_grant_that_leaves_less_than_half_the_ttl_is_confirmed_first(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    # The lease of a grant made by a release counts from the waiter's last re-try (the grant
    # came after it). Long after that re-try, one more re-try re-extends the lease instead.
    holder = clients[0].lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    holder_token = holder.token
    waiter = clients[1].lock(NAME, ttl=0.2)
    call, taken, done = hold_in_a_call(waiter)
    sync_until(lambda: len(queued(raw)) == 1)
    queued_by = time.monotonic()
    sync_until(lambda: time.monotonic() > queued_by + 0.15)  # over half the ttl ago
    before = evalsha_calls(raw)
    holder.release()
    assert taken.wait(10)
    assert evalsha_calls(raw) == before + 2  # the release, and the waiter's confirming re-try
    granted = lock_value(raw.get(KEYS.lock))[1]  # the token the release handed out
    done.set()
    assert call.result() == granted > holder_token  # the same grant, re-extended


def test_a_releaser_that_served_a_waiter_queues_without_a_doomed_try(
    clients: list[LockClient], raw: redis.Redis
) -> None:
    holder_client, waiter_client, *_ = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    waiter = waiter_client.lock(NAME, ttl=3600)
    call, taken, done = hold_in_a_call(waiter)
    sync_until(lambda: len(queued(raw)) == 1)
    holder.release()
    assert taken.wait(10)
    # the lock went to the waiter: the old holder's next acquire goes straight to the queue
    before = evalsha_calls(raw)

    def take_again() -> None:
        assert holder.acquire(timeout=None)
        holder.release()

    again = SyncCall(take_again)
    sync_until(lambda: len(queued(raw)) == 1)
    assert evalsha_calls(raw) == before + 1
    done.set()
    call.result()
    again.result()


@pytest.mark.parametrize("wake", ["one", "all"])
@pytest.mark.parametrize("holder_reentrant", [True, False], ids=["reentrant-holds", "simple-holds"])
def test_a_lock_of_the_other_kind_is_busy_and_its_release_wakes_the_waiter(
    server: EmbeddedServer, raw: redis.Redis, holder_reentrant: bool, wake: str
) -> None:
    # One name, one lock, whatever its kind: a simple lock on a name a reentrant lock holds
    # (and the reverse) is busy like any other holder: False at once, LockTimeout after its
    # timeout, and a waiter is woken by the holder's release (the fallback re-try is an hour
    # away).
    made = [LockClient.from_url(server.url, wake=wake, max_poll=3600.0) for _ in range(2)]
    holder_client, waiter_client = made
    try:
        holder = holder_client.lock(NAME, ttl=3600, reentrant=holder_reentrant)
        assert holder.acquire(timeout=0)
        kind = not holder_reentrant
        assert not waiter_client.lock(NAME, ttl=10, reentrant=kind).acquire(timeout=0)
        with pytest.raises(LockTimeout):
            with waiter_client.lock(NAME, ttl=10, reentrant=kind, timeout=0.05):
                raise AssertionError("granted while the other kind holds it")
        polls = waiter_client.statistics().polls  # the timed-out wait counts one
        waiter = waiter_client.lock(NAME, ttl=10, reentrant=kind)
        call, taken, done = hold_in_a_call(waiter)
        sync_until(lambda: waiter_client.statistics().waiting == 1)
        holder.release()
        assert taken.wait(10)
        # woken by the release, not by a re-try
        assert waiter_client.statistics().polls == polls
        assert not holder.acquire(timeout=0)  # and the other way round
        done.set()
        assert call.result() > 0
        assert not raw.exists(KEYS.lock) and queued(raw) == []
    finally:
        for client in made:
            client.close()


def test_a_pubsub_connection_closed_under_a_watcher_is_a_connection_error(
    sync_client: LockClient, sync_client_b: LockClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listener re-makes or closes the shared pub/sub connection while a watcher subscribes on
    # it: redis-py then raises ValueError ("I/O operation on closed file") or OSError in threads,
    # RuntimeError in asyncio. The acquire must fail as an outage, with a LockError, and leave
    # nothing behind (seen in the long chaos run: a Redlock worker died of the ValueError).
    holder = sync_client_b.lock(NAME, ttl=60)
    assert holder.acquire(timeout=0)

    def closed(self: object, *args: object, **kwargs: object) -> None:
        raise ValueError("I/O operation on closed file.")

    monkeypatch.setattr(SyncPubSub, "ping", closed)
    waiter = sync_client.lock(NAME, ttl=10)
    with pytest.raises(LockConnectionError):
        waiter.acquire(timeout=5)
    monkeypatch.undo()
    holder.release()
    assert waiter.acquire(timeout=0)  # nothing left behind: the name is free for it
    waiter.release()


@pytest.mark.parametrize("woken", [True, False], ids=["woken", "timed-out"])
def test_close_right_after_a_wait_wakes_the_listener(
    server: EmbeddedServer,
    sync_client: LockClient,
    monkeypatch: pytest.MonkeyPatch,
    woken: bool,
) -> None:
    """close() right after a wait took the pub/sub listener's read timeout (0.5 s) in the sync
    API, whose thread cannot be cancelled: close wakes it. With reads made an hour long, close
    returns, and the listener has ended when it does (issue 29, item 11)."""
    monkeypatch.setattr(waiter_module, "_READ_TIMEOUT", 3600.0)
    holder = sync_client.lock(NAME, ttl=60)
    assert holder.acquire(timeout=0)
    listeners = sync_running("fencelock-waiter")
    client = LockClient.from_url(server.url)
    lock = client.lock(NAME, ttl=60)
    if woken:
        call = SyncCall(lambda: lock.acquire(timeout=None))
        sync_until(lambda: client.statistics().waiting == 1)
        holder.release()
        assert call.result()
        lock.release()
    else:
        assert not lock.acquire(timeout=0.05)
        holder.release()
    assert sync_running("fencelock-waiter") == listeners + 1  # it listened
    SyncCall(client.close).result()  # (the old sync close waited out the hour's read)
    assert sync_running("fencelock-waiter") == listeners


def test_a_wake_up_goes_straight_to_its_watch_and_subscriptions_through_redis_py(
    clients: list[LockClient], raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener passes a release's message to its watch as the parser read it (redis-py's
    handle_message would only make a dict of it: issue 34), and every other reply through
    handle_message, which keeps redis-py's list of the channels it re-subscribes on a re-made
    connection: a channel left is gone from it once its UNSUBSCRIBE is confirmed."""
    holder_client, waiter_client, *_ = clients
    holder = holder_client.lock(NAME, ttl=3600)
    assert holder.acquire(timeout=0)
    call, taken, done = hold_in_a_call(waiter_client.lock(NAME, ttl=10))
    sync_until(lambda: len(queued(raw)) == 1)  # subscribed, and queued
    channel = f"{KEYS.channel}:{queued(raw)[0].split(' ')[0]}".encode()
    pubsub = waiter_client._wiring.topology.route.waiters[0]._pubsub
    assert pubsub is not None and channel in pubsub.channels
    handled: list[bytes] = []
    handle = pubsub.handle_message

    def spy(response: Any, *args: Any, **kwargs: Any) -> Any:
        handled.append(response[0] if isinstance(response, list) else response)
        return handle(response, *args, **kwargs)

    monkeypatch.setattr(pubsub, "handle_message", spy)
    holder.release()
    assert taken.wait(10)  # woken by the message, which carried the grant
    assert waiter_client.statistics().wakeups == 1
    done.set()
    call.result()
    sync_until(lambda: channel not in pubsub.channels)  # forgotten by redis-py ...
    assert b"unsubscribe" in handled  # ... as it read the UNSUBSCRIBE's reply
    assert b"message" not in handled
