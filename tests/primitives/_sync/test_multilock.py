# GENERATED from tests/primitives/_async/test_multilock.py by tools/gen_sync.py: edit that file instead.
"""Multi-locks: several names, all or none, in canonical order (no deadlock).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py; cancellation is in
tests/engine/test_asyncio_only.py."""

from __future__ import annotations

import time

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._backend import sync_sleep
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import sync_together, sync_until


def held_keys(raw: redis.Redis, names: list[str]) -> list[str]:
    return [n for n in names if raw.exists(LockKeys.for_name(n).lock)]


def test_names_are_taken_sorted_and_deduplicated(sync_client: LockClient) -> None:
    multi = sync_client.multi_lock(["m-c", "m-a", "m-b", "m-a"], ttl=10)
    assert multi.names == ("m-a", "m-b", "m-c")
    assert [lock.name for lock in multi.locks] == ["m-a", "m-b", "m-c"]
    with pytest.raises(TypeError, match="names"):
        sync_client.multi_lock("m-a")
    with pytest.raises(ValueError, match="names"):
        sync_client.multi_lock([])
    with pytest.raises(TypeError):
        sync_client.multi_lock([1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="ttl"):
        sync_client.multi_lock(["m-a"], ttl=-1)


def test_opposite_orders_never_deadlock_nor_overlap(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    """Taken in the callers' orders, [a, b] and [b, a] would each hold one name and wait for the
    other's forever (here: LockTimeout after 10 s)."""
    inside: list[str] = []
    overlaps = 0

    def worker(client: LockClient, names: list[str], who: str) -> int:
        nonlocal overlaps
        multi = client.multi_lock(names, ttl=10, timeout=10)
        for _ in range(25):
            with multi:
                inside.append(who)
                overlaps += len(inside) > 1
                sync_sleep(0.001)
                inside.remove(who)
        return 25

    done = sync_together(
        [
            lambda: worker(sync_client, ["m-x", "m-y"], "one"),
            lambda: worker(sync_client_b, ["m-y", "m-x"], "two"),
        ]
    )
    assert done == [25, 25] and overlaps == 0


def test_all_or_none_when_one_name_is_busy(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    names = ["m-1", "m-2", "m-3"]
    busy = sync_client_b.lock("m-3", ttl=10)
    assert busy.acquire()
    multi = sync_client.multi_lock(names, ttl=10)
    assert not multi.acquire(timeout=0)
    assert held_keys(raw, names) == ["m-3"]  # m-1 and m-2 were given back
    assert not multi.lost
    with pytest.raises(fencelock.LockNotOwned):
        multi.release()
    others = [sync_client_b.lock(n, ttl=10) for n in ["m-1", "m-2"]]
    for lock in others:
        assert lock.acquire(timeout=0)
        lock.release()
    busy.release()
    assert multi.acquire(timeout=0)  # now all are free
    assert held_keys(raw, names) == names
    multi.release()
    assert held_keys(raw, names) == []


def test_the_timeout_is_one_deadline_for_all_names(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    busy = sync_client_b.lock("m-t2", ttl=10)
    assert busy.acquire()
    multi = sync_client.multi_lock(["m-t1", "m-t2"], ttl=10, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(fencelock.LockTimeout):
        with multi:
            pass
    # bounded: the deadline plus a generous margin for a request
    assert time.monotonic() - started < 0.3 + 2
    assert held_keys(raw, ["m-t1", "m-t2"]) == ["m-t2"]
    busy.release()


def test_one_fencing_token_per_name(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    first = sync_client.lock("m-tok-b", ttl=10)
    assert first.acquire()
    before = first.token
    first.release()
    multi = sync_client_b.multi_lock(["m-tok-b", "m-tok-a"], ttl=10)
    with multi:
        tokens = multi.tokens
        assert set(tokens) == {"m-tok-a", "m-tok-b"}
        assert tokens["m-tok-b"] > before
        assert tokens == {lock.name: lock.token for lock in multi.locks}
        multi.check()
        assert multi.held()
    with pytest.raises(fencelock.LockNotOwned):
        multi.tokens  # noqa: B018 (the property raises)
    later = sync_client.lock("m-tok-a", ttl=10)
    assert later.acquire(timeout=0)
    assert later.token > tokens["m-tok-a"]
    later.release()


def test_auto_renew_keeps_every_name(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    names = ["m-r1", "m-r2", "m-r3"]
    multi = sync_client.multi_lock(names, ttl=0.3, auto_renew=True)
    with multi:
        sync_until(lambda: sync_client.statistics().renewals >= 3 * len(names))
        assert multi.held() and not multi.lost
        for name in names:
            assert not sync_client_b.lock(name).acquire(timeout=0)


def test_a_lost_member_makes_the_multi_lock_lost(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    multi = sync_client.multi_lock(["m-l1", "m-l2"], ttl=10)
    with pytest.raises(fencelock.LockLost):
        with multi:
            raw.delete(LockKeys.for_name("m-l2").lock)  # as if the lease had ended
            assert not multi.held()
            assert multi.lost
            with pytest.raises(fencelock.LockLost):
                multi.check()
    # the other name was released all the same
    assert held_keys(raw, ["m-l1", "m-l2"]) == []
    assert multi.acquire(timeout=0)  # and the object can take them afresh
    multi.release()


def test_redlock_members_compose_the_same_way(redlock: list[EmbeddedServer]) -> None:
    client = LockClient.from_url([s.url for s in redlock])
    other = LockClient.from_url([s.url for s in redlock])
    busy = other.lock("m-rl-b", ttl=10)
    assert busy.acquire()
    multi = client.multi_lock(["m-rl-b", "m-rl-a"], ttl=10)
    assert not multi.acquire(timeout=0)
    probes = [srv.client() for srv in redlock]
    assert not any(p.exists(LockKeys.for_name("m-rl-a").lock) for p in probes)
    busy.release()
    with multi:
        assert set(multi.tokens) == {"m-rl-a", "m-rl-b"}
    for probe in probes:
        probe.close()
    client.close()
    other.close()
