# GENERATED from tests/engine/_async/test_leases.py by tools/gen_sync.py: edit that file instead.
"""Leases that last as long as the work: watchdog, loss signals, reentrancy.
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import gc
import inspect
import threading
import warnings

import pytest
import redis
import redis.exceptions

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._sync.transport import SyncRequester
from fencelock._keys import LockKeys
from fencelock._transport import SyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import SYNC_API, RENEWED_TTL, SyncCall, sync_until, sync_workers


def key(name: str) -> str:
    return LockKeys.for_name(name).lock


@pytest.mark.glide
def test_watchdog_keeps_lease_alive_past_ttl(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("renewed", ttl=RENEWED_TTL, auto_renew=True)
    with lock:
        # three renewals at ttl/3 each: the lease has outlived its original ttl
        sync_until(lambda: sync_client.statistics().renewals >= 4)
        assert lock.held() and not lock.lost
        lock.check()
        assert 0 < raw.pttl(key("renewed")) <= RENEWED_TTL * 1000
    assert not raw.exists(key("renewed"))
    assert len(sync_client._wiring.watchdog) == 0  # released: no longer renewed


@pytest.mark.glide
def test_deleted_key_is_signalled(sync_client: LockClient, raw: redis.Redis) -> None:
    seen: list[Lock] = []
    lock = sync_client.lock("flushed", ttl=0.6, auto_renew=True, on_lost=seen.append)
    with pytest.raises(fencelock.LockLost):
        with lock:
            token = lock.token
            raw.flushall()
            sync_until(lambda: bool(seen))
            assert seen == [lock] and lock.lost
            with pytest.raises(fencelock.LockLost):
                lock.check()
            assert lock.token == token  # still readable, for a fenced write to be refused
    assert seen == [lock]  # once
    assert sync_client.statistics().losses == 1


def test_ignore_policy_carries_on(sync_client: LockClient, raw: redis.Redis) -> None:
    seen: list[Lock] = []
    lock = sync_client.lock(
        "carry", ttl=0.6, auto_renew=True, on_lost=seen.append, on_lost_policy="ignore"
    )
    with lock:
        raw.delete(key("carry"))
        sync_until(lambda: bool(seen))
        assert lock.lost
    # leaving the block raised nothing, and nothing of anyone else was deleted


@pytest.mark.glide
def test_taken_over_lock_is_signalled_and_not_touched(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    seen: list[Lock] = []
    lock = sync_client.lock("stolen", ttl=0.6, auto_renew=True, on_lost=seen.append)
    lock.acquire(timeout=0)
    raw.set(key("stolen"), "another-holder", px=60000)
    sync_until(lambda: bool(seen))
    assert raw.get(key("stolen")) == "another-holder" and raw.pttl(key("stolen")) > 600
    with pytest.raises(fencelock.LockLost):
        lock.release()
    assert raw.get(key("stolen")) == "another-holder"


def test_failing_callback_does_not_stop_the_watchdog(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    def explode(lock: Lock) -> None:
        raise RuntimeError("callback bug")

    seen: list[Lock] = []
    first = sync_client.lock("first", ttl=0.6, auto_renew=True, on_lost=explode)
    second = sync_client.lock("second", ttl=0.6, auto_renew=True, on_lost=seen.append)
    first.acquire(timeout=0)
    second.acquire(timeout=0)
    raw.delete(key("first"))
    sync_until(lambda: first.lost)
    raw.delete(key("second"))
    sync_until(lambda: bool(seen))
    assert second.lost


def test_unreachable_server_lost_by_local_deadline(fresh_server: EmbeddedServer) -> None:
    client = LockClient.from_url(fresh_server.url, socket_timeout=0.2)
    seen: list[float] = []
    lock = client.lock("hung", ttl=1.0, auto_renew=True, on_lost=lambda lk: seen.append(1.0))
    lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        sync_until(lambda: bool(seen))
        # signalled while the server was still unreachable: the local deadline, not Redis, told
        assert lock.lost
        with pytest.raises(fencelock.LockLost):
            lock.check()
    finally:
        fresh_server.resume()
    client.close()


def test_hung_renewal_is_signalled_at_the_deadline(fresh_server: EmbeddedServer) -> None:
    # The socket timeout (60 s) is far longer than the ttl: a renewal hanging on a server that
    # no longer answers (paused: the connection stays open) must not delay on_lost until the
    # request times out, by which time another client could have held the lock for a minute.
    client = LockClient.from_url(fresh_server.url, socket_timeout=60.0)
    seen: list[bool] = []
    lock = client.lock(
        "hung-renewal", ttl=1.0, auto_renew=True, on_lost=lambda lk: seen.append(True)
    )
    lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        sync_until(lambda: bool(seen), timeout=30.0)
        assert lock.lost
        assert client.statistics().renewal_calls >= 1  # a renewal was sent, and did hang
    finally:
        fresh_server.resume()
    client.close()


def test_renewal_reconnecting_to_a_hung_server_is_bounded(
    fresh_server: EmbeddedServer,
) -> None:
    # Two leases renewed in one batch; the server hangs. The batch gives up at the shorter
    # lease's deadline (that lease is lost) and closes its connection; the longer lease's
    # re-try must connect again, and the handshake with a hung server must not hold the
    # watchdog for the 60 s socket timeout either.
    client = LockClient.from_url(fresh_server.url, socket_timeout=60.0)
    lost: list[str] = []
    short = client.lock("short", ttl=1.0, auto_renew=True, on_lost=lambda lk: lost.append("s"))
    long = client.lock("long", ttl=2.0, auto_renew=True, on_lost=lambda lk: lost.append("l"))
    short.acquire(timeout=0)
    long.acquire(timeout=0)
    fresh_server.pause()
    try:
        sync_until(lambda: len(lost) == 2, timeout=30.0)
        assert lost == ["s", "l"]
    finally:
        fresh_server.resume()
    client.close()


def test_a_known_loss_is_not_masked_by_a_failed_release(
    fresh_server: EmbeddedServer,
) -> None:
    # The loss was signalled, then the release at the block's end cannot reach the server:
    # the block ends with LockLost, not with the release's connection error.
    client = LockClient.from_url(fresh_server.url, socket_timeout=0.2)
    lock = client.lock("masked", ttl=1.0, auto_renew=True)
    try:
        with pytest.raises(fencelock.LockLost):
            with lock:
                fresh_server.pause()
                sync_until(lambda: lock.lost)
    finally:
        fresh_server.resume()
    client.close()


@pytest.mark.glide
def test_many_leases_one_watchdog_batched(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    # (a ttl that a loaded machine's watchdog, seen 1.4 s late, does not outrun)
    locks = [sync_client.lock(f"many-{i}", ttl=4.5, auto_renew=True) for i in range(250)]
    for lock in locks:
        assert lock.acquire(timeout=0)
    # Counted from when all 250 are tracked: while the acquires go on, a round renews the few
    # leases there are, in small calls, as many as a slow start makes (test_timing.py's
    # test_leases_acquired_slowly_at_first_...); from then on, every call renews 100, or all
    # the round leaves: 50 at least (renewal_batches). A call that got no answer counts its
    # leases as failures; one round begun before the last acquire may end in a smaller call.
    start = sync_client.statistics()
    sync_until(lambda: sync_client.statistics().renewals >= start.renewals + 2 * 250)
    stats = sync_client.statistics()
    assert stats.losses == 0
    calls = stats.renewal_calls - start.renewal_calls
    leases = stats.renewals - start.renewals + stats.renewal_failures - start.renewal_failures
    assert calls <= leases / 50 + 1  # 250 due together take 3 calls, not 250
    for lock in locks:
        lock.release()
    assert raw.keys("fencelock:*:lock") == []  # only fencing counters, until they expire


@pytest.mark.glide
def test_reentrant_lock(sync_client: LockClient, raw: redis.Redis) -> None:
    # pitfall 9: code that re-enters takes the lock again instead of waiting for itself
    lock = sync_client.lock("again", ttl=10, reentrant=True)
    assert lock.acquire(timeout=0)
    token = lock.token
    assert lock.acquire(timeout=0)
    assert lock.token == token  # a re-entry keeps the outer grant's token
    with lock:
        assert lock.token == token
        assert int(raw.hvals(key("again"))[0]) == 3
    other = sync_client.lock("again", ttl=10, reentrant=True)
    assert not other.acquire(timeout=0)  # another owner is refused
    lock.release()
    assert lock.held()
    lock.release()
    assert not raw.exists(key("again"))
    with pytest.raises(fencelock.LockNotOwned):
        lock.release()
    assert other.acquire(timeout=0) and other.token > token
    other.release()


def test_reentrant_retry_does_not_count_twice(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("retry", ttl=10, reentrant=True)
    first = lock._lease.wiring.grants.try_acquire(lock._lease.spec, "holder", 0)
    assert (
        lock._lease.wiring.grants.try_acquire(lock._lease.spec, "holder", 0) == first
    )  # the same request again: no second hold
    assert raw.hget(key("retry"), "holder") == "1"
    assert (
        lock._lease.wiring.grants.try_acquire(lock._lease.spec, "holder", 1) == first
    )  # a real re-entry
    assert raw.hget(key("retry"), "holder") == "2"
    with pytest.raises(fencelock.LockLost):
        lock._lease.wiring.grants.try_acquire(
            lock._lease.spec, "holder", 5
        )  # a holder whose count is not the server's has lost it


def test_reentrant_lock_is_renewed_and_loss_seen(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    seen: list[Lock] = []
    lock = sync_client.lock(
        "rr", ttl=RENEWED_TTL, reentrant=True, auto_renew=True, on_lost=seen.append
    )
    lock.acquire(timeout=0)
    lock.acquire(timeout=0)
    sync_until(lambda: sync_client.statistics().renewals >= 3)
    assert lock.held()
    raw.delete(key("rr"))
    sync_until(lambda: bool(seen))
    with pytest.raises(fencelock.LockLost):
        lock.acquire(timeout=0)


def test_reentry_after_takeover_is_signalled(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    seen: list[Lock] = []
    lock = sync_client.lock("taken", ttl=30, reentrant=True, on_lost=seen.append)
    lock.acquire(timeout=0)
    raw.delete(key("taken"))
    raw.hset(key("taken"), "another-holder", 1)
    with pytest.raises(fencelock.LockLost):
        lock.acquire(timeout=0)
    assert seen == [lock] and lock.lost
    assert raw.hgetall(key("taken")) == {"another-holder": "1"}


def test_simple_and_reentrant_do_not_mix(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    simple = sync_client.lock("mixed", ttl=10)
    simple.acquire(timeout=0)
    # one name, one lock: busy for the other kind (test_wake.py: woken by its release)
    assert not sync_client.lock("mixed", ttl=10, reentrant=True).acquire(timeout=0)
    assert simple.held()
    simple.release()


def test_bad_policy(sync_client: LockClient) -> None:
    with pytest.raises(ValueError, match="on_lost_policy"):
        sync_client.lock("p", on_lost_policy="explode")
    with pytest.raises(TypeError, match="on_lost"):
        sync_client.lock("p", on_lost=42)  # type: ignore[arg-type]


def test_a_bounded_request_with_no_time_left_is_not_sent(server: EmbeddedServer) -> None:
    # The watchdog's last lease can reach its deadline between the round's look and the send:
    # the request then times out at once (not a ValueError from a negative socket timeout,
    # which would stall the watchdog for a retry interval before it signals the loss).
    redis_client = SyncRedis.from_url(server.url)
    requester = SyncRequester(timeout=1.0)
    for timeout in (0.0, -0.001):
        with pytest.raises(redis.exceptions.TimeoutError):
            requester.request(redis_client, [("PING",)], timeout, "k")
    requester.close()
    redis_client.close()


def test_a_lock_dropped_while_held_is_no_longer_renewed(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("dropped", ttl=0.6, auto_renew=True)
    acquired_at = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    assert lock.acquire(timeout=0)
    sync_until(lambda: sync_client.statistics().renewals >= 1)
    dropped = r"lock 'dropped', acquired here, was dropped without release\(\)"
    with pytest.warns(ResourceWarning, match=dropped) as w:
        del lock
        gc.collect()
    # it points at the line that took the lock, not at the garbage collector (issue 24)
    assert w[0].filename == __file__ and w[0].lineno == acquired_at
    # not renewed any more (not deleted either): the lease runs out by its ttl on the server
    sync_until(lambda: not raw.exists(key("dropped")))
    sync_until(lambda: len(sync_client._wiring.watchdog) == 0)
    sync_until(lambda: "fencelock-watchdog" not in [t.name for t in threading.enumerate()])
    assert sync_client.statistics().losses == 0


def test_a_primitive_dropped_while_it_holds_is_named_in_its_own_words(
    sync_client: LockClient,
) -> None:
    """The warning names the primitive, not a lock ("lock 'x', taken here, was dropped while
    held" was said of a candidate, a latch's participant...; issue 29)."""
    election = sync_client.election("dropped-e", ttl=10)
    election.campaign()
    latch = sync_client.latch("dropped-l", 2, ttl=10)
    latch.join()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del election, latch
        gc.collect()
    assert sorted(str(w.message) for w in seen if w.category is ResourceWarning) == [
        "candidate 'dropped-e', elected here, was dropped without resign(): its lease is no "
        "longer renewed",
        "latch 'dropped-l', joined here, was dropped without leave(): its lease is no longer "
        "renewed",
    ]


def wait_renew_and_drop(server: EmbeddedServer, other: Lock) -> None:
    """A client that waits for ``other``'s lock (on pub/sub) and holds it, renewed: dropped,
    with its lock, unclosed, when this returns."""
    client = LockClient.from_url(server.url)
    lock = client.lock(other.name, ttl=0.6, auto_renew=True)
    call = SyncCall(lambda: lock.acquire(timeout=30))
    sync_until(lambda: client.statistics().waiting == 1)
    other.release()
    assert call.result()
    sync_until(lambda: client.statistics().renewals >= 1)


def test_dropped_clients_leave_nothing_behind(
    server: EmbeddedServer,
    sync_client_b: LockClient,
    raw: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Clients dropped unclosed while holding a renewed lease, after waiting on pub/sub: their
    threads (tasks) end, their connections close, and the lease runs out."""
    other = sync_client_b.lock("abandoned", ttl=30)
    assert other.acquire(timeout=0)
    other.release()  # its connection is part of the baseline
    workers, connections = sync_workers(), len(raw.client_list())
    gc.disable()  # one collection, below: nothing may wait for a later one
    try:
        for _ in range(3):
            assert other.acquire(timeout=0)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                wait_renew_and_drop(server, other)
                gc.collect()
            messages = [str(w.message) for w in seen if w.category is ResourceWarning]
            assert any("was dropped without release()" in m for m in messages), messages
            unclosed = "unclosed " + SYNC_API + "LockClient: call close()"
            assert unclosed in messages, messages
            sync_until(lambda: not raw.exists(key("abandoned")))
        sync_until(lambda: sync_workers() <= workers)
        sync_until(lambda: len(raw.client_list()) <= connections)
    finally:
        gc.enable()
    gc.collect()
    assert "Task was destroyed" not in caplog.text


def test_the_objects_a_client_made_keep_it_alive(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    """``LockClient.from_url(url).lock(name)``, only the lock kept (as ``redis.Redis().lock()``
    is used): the client lives as long as its objects, as a redis-py ``Lock`` keeps its client.
    It was collected at once, with an 'unclosed' warning, its pub/sub connection closed under
    the waits of the objects still in use; once they are gone too, it is closed as a dropped
    client is."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        holder = LockClient.from_url(server.url).lock("kept", ttl=30)
        waiter = LockClient.from_url(server.url).semaphore("kept-sem", 1, ttl=30)
        assert holder.acquire(timeout=0)
        assert waiter.acquire(timeout=0)
        gc.collect()
        assert [str(w.message) for w in seen if w.category is ResourceWarning] == []
        other = LockClient.from_url(server.url)
        try:
            wanting = SyncCall(lambda: other.lock("kept", ttl=30).acquire(timeout=30))
            sync_until(lambda: other.statistics().waiting == 1)
            holder.release()  # a release by the object whose client was never kept
            assert wanting.result()
        finally:
            other.close()
        waiter.release()
        del holder, waiter
        gc.collect()
    assert sum("LockClient: call close()" in str(w.message) for w in seen) == 2
