# GENERATED from tests/engine/_async/test_ownership.py by tools/gen_sync.py: edit that file instead.
"""Who holds a grant: the lock object, whatever task or thread calls it; and a lease that ran
out frees the name for everyone, this client's other lock objects and the lock object itself.
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import gc

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import SyncCall, sync_until


def key(name: str) -> str:
    return LockKeys.for_name(name).lock


def test_a_shared_lock_object_is_one_holder(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """The rule, the same in both APIs: the lock object is the holder. Another task or thread
    using it sees its grant and may release it; acquiring it again while it holds is an error
    (a reentrant lock object counts a re-entry instead)."""
    lock = sync_client.lock("shared", ttl=30)
    assert lock.acquire(timeout=0)
    token = lock.token

    def elsewhere() -> int:
        with pytest.raises(fencelock.LockError, match="already held by this lock"):
            lock.acquire(timeout=0)
        seen = lock.token
        lock.release()
        return seen

    assert SyncCall(elsewhere).result() == token
    assert not raw.exists(key("shared"))
    with pytest.raises(fencelock.LockNotOwned):
        lock.check()  # released by the other caller: nobody holds through this object now


def test_a_shared_reentrant_lock_object_counts_re_entries_of_the_object(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("shared-re", ttl=30, reentrant=True)
    assert lock.acquire(timeout=0)

    def elsewhere() -> int:
        assert lock.acquire(
            timeout=0
        )  # a re-entry of the object, from another task or thread
        return lock.token

    assert SyncCall(elsewhere).result() == lock.token
    lock.release()
    assert raw.exists(key("shared-re"))  # one hold left
    lock.release()
    assert not raw.exists(key("shared-re"))


def test_concurrent_acquires_of_one_object_take_turns(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """Two callers acquiring one lock object that does not hold yet queue like two lock objects:
    the second gets the lock once the first released it."""
    blocker = sync_client.lock("turns", ttl=30)
    assert blocker.acquire(timeout=0)
    lock = sync_client.lock("turns", ttl=30)
    tokens: list[int] = []

    def take() -> None:
        assert lock.acquire(timeout=30)
        tokens.append(lock.token)
        lock.release()

    first, second = SyncCall(take), SyncCall(take)
    blocker.release()
    first.result()
    second.result()
    assert len(tokens) == 2 and tokens[0] < tokens[1]
    assert not raw.exists(key("turns"))


def test_a_lease_that_ran_out_frees_the_name_for_the_same_client(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """A lock object whose lease ran out without release() (dropped here) does not keep the
    client's other lock objects out: they get the name as soon as the server lets it go."""
    dropped = sync_client.lock("expired", ttl=0.2)
    assert dropped.acquire(timeout=0)
    del dropped
    gc.collect()
    sync_until(lambda: not raw.exists(key("expired")))
    fresh = sync_client.lock("expired", ttl=30)
    assert fresh.acquire(timeout=0)
    fresh.release()


def test_a_lock_whose_lease_ran_out_can_acquire_again(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("again", ttl=0.2)
    assert lock.acquire(timeout=0)
    first = lock.token
    sync_until(lambda: not raw.exists(key("again")))
    assert lock.lost
    assert lock.acquire(timeout=0)  # a lost lease holds nothing: this is a new grant
    assert not lock.lost and lock.token > first
    lock.release()
    assert not raw.exists(key("again"))


def test_a_lost_lock_can_acquire_again(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    seen: list[object] = []
    lock = sync_client.lock("lost-again", ttl=0.6, auto_renew=True, on_lost=seen.append)
    assert lock.acquire(timeout=0)
    raw.delete(key("lost-again"))
    sync_until(lambda: bool(seen))
    assert lock.acquire(timeout=0)
    assert not lock.lost and lock.held()
    lock.release()
    assert len(sync_client._wiring.watchdog) == 0


def test_the_late_release_of_a_lease_that_ran_out_leaves_the_next_holders_alone(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    stale = sync_client.lock("late", ttl=0.2)
    assert stale.acquire(timeout=0)
    sync_until(lambda: not raw.exists(key("late")))
    holder = sync_client.lock("late", ttl=30)
    assert holder.acquire(timeout=0)
    waiter = sync_client.lock("late", ttl=30)
    waiting = SyncCall(lambda: waiter.acquire(timeout=30))
    sync_until(
        lambda: bool(sync_client._wiring.queues._lines[holder._lease.spec.line].tickets)
    )
    with pytest.raises(fencelock.LockLost):
        stale.release()
    # the holder still holds, and the waiter still waits for it
    assert holder.held()
    assert sync_client._wiring.queues._lines[holder._lease.spec.line].tickets
    holder.release()
    assert waiting.result() is True
    waiter.release()
    assert not raw.exists(key("late"))


def test_held_is_false_once_the_lease_is_lost(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    seen: list[object] = []
    lock = sync_client.lock("held-lost", ttl=0.6, auto_renew=True, on_lost=seen.append)
    assert lock.acquire(timeout=0)
    holder = raw.get(key("held-lost"))
    raw.delete(key("held-lost"))
    sync_until(lambda: bool(seen))
    raw.set(key("held-lost"), holder, px=60_000)  # the server shows the old grant again
    assert lock.lost
    assert lock.held() is False
    raw.delete(key("held-lost"))


def test_a_lease_lost_inside_a_block_is_the_blocks_until_it_ends(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """Taking the name afresh from inside the block (or another task or thread sharing the
    object) would let the block's end release the newer grant and hide its own loss."""
    lock = sync_client.lock("block", ttl=0.2)
    with pytest.raises(fencelock.LockLost):
        with lock:
            sync_until(lambda: not raw.exists(key("block")))
            assert lock.lost
            with pytest.raises(fencelock.LockError, match="leave the block first"):
                SyncCall(lambda: lock.acquire(timeout=0)).result()
    assert lock.acquire(timeout=0)  # once the block has ended
    lock.release()


def test_holds_a_lost_re_entry_added_are_left_at_the_last_release(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """A re-entry the server applied but whose reply was lost (the call raised
    LockConnectionError) leaves the server counting one hold more than the lock: the last
    release leaves them all, instead of keeping the name held until the ttl ran out."""
    lock = sync_client.lock("count", ttl=30, reentrant=True)
    assert lock.acquire(timeout=0)
    holder = next(iter(raw.hkeys(key("count"))))
    raw.hincrby(key("count"), holder, 1)  # the applied re-entry
    lock.release()
    assert not raw.exists(key("count"))


def test_redlock_held_is_false_when_the_other_kind_has_the_name(
    redlock: list[EmbeddedServer],
) -> None:
    urls = [s.url for s in redlock]
    # (a node timeout a loaded machine does not outrun: the default is 50 ms at most)
    client = LockClient.from_url(urls, node_timeout=0.5)
    simple = client.lock("kinds", ttl=30)
    assert simple.acquire(timeout=0)
    for srv in redlock:
        with srv.client() as probe:
            probe.delete(key("kinds"))  # gone behind its back (a flush, say)
    other = LockClient.from_url(urls, node_timeout=0.5)
    reentrant = other.lock("kinds", ttl=30, reentrant=True)
    assert reentrant.acquire(timeout=0)
    assert simple.held() is False  # not an outage: every node answered "not yours"
    reentrant.release()
    client.close()
    other.close()
