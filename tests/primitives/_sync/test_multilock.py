# GENERATED from tests/primitives/_async/test_multilock.py by tools/gen_sync.py: edit that file instead.
"""Multi-locks: several names, all or none, in canonical order (no deadlock).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py; cancellation is in
tests/engine/test_asyncio_only.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._backend import sync_sleep
from fencelock._keys import LockKeys
from fencelock._scripts import MULTI_ACQUIRE
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import RENEWED_TTL, SyncCall, sync_together, sync_until, evalsha_calls

# Redlock's node timeout here: the default (at most 50 ms, connecting too) is shorter than a
# loaded machine's stalls, and these tests are not about it
NODE_TIMEOUT = 0.5


def held_keys(raw: redis.Redis, names: list[str]) -> list[str]:
    return [n for n in names if raw.exists(LockKeys.for_name(n).lock)]


def queued(raw: redis.Redis, name: str) -> int:
    return int(raw.zcard(LockKeys.for_name(name).queue))


@pytest.fixture
def woken(server: EmbeddedServer, raw: redis.Redis) -> Iterator[LockClient]:
    """A client whose fallback re-try is an hour away: only a release ends its waits."""
    client = LockClient.from_url(server.url, max_poll=3600.0)
    try:
        yield client
    finally:
        client.close()


def test_an_on_lost_policy_is_refused_not_ignored(sync_client: LockClient) -> None:
    """Its block ends by the policy of none of its names (docs/multilock.md): asked for one,
    the multi-lock says so, with the keywords it takes, rather than ignoring it."""
    with pytest.raises(TypeError, match=r"multi_lock\(\) got an unexpected keyword .*on_lost_poli"):
        sync_client.multi_lock(["a", "b"], on_lost_policy="cancel")  # type: ignore[call-arg]
    assert sync_client.multi_lock(["a", "b"], label="worker").names == ("a", "b")


def test_names_are_taken_sorted_and_deduplicated(sync_client: LockClient) -> None:
    multi = sync_client.multi_lock(["m-c", "m-a", "m-b", "m-a"], ttl=10)
    assert multi.names == ("m-a", "m-b", "m-c")
    with multi:
        assert list(multi.tokens) == ["m-a", "m-b", "m-c"]
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
        for name, token in tokens.items():  # each name's own counter, as inspect shows it
            info = sync_client.inspect(name)
            assert info is not None and info.token == token
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
    multi = sync_client.multi_lock(names, ttl=RENEWED_TTL, auto_renew=True)
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
    client = LockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
    other = LockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
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


# -- one script on one server (AllOf) -----------------------------------------------------------


def test_one_round_trip_each_way_on_one_server(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    names = ["m-rt-c", "m-rt-a", "m-rt-b"]
    multi = sync_client.multi_lock(names, ttl=10)
    with multi:  # (the first acquire of a client also reads the eviction policy: not timed)
        pass
    before = evalsha_calls(raw)
    assert multi.acquire(timeout=0)
    assert evalsha_calls(raw) == before + 1
    assert held_keys(raw, names) == names
    multi.release()
    assert evalsha_calls(raw) == before + 2
    assert held_keys(raw, names) == []


def test_a_plain_lock_of_the_same_client_and_a_multi_lock_exclude_each_other(
    woken: LockClient, raw: redis.Redis
) -> None:
    """Neither takes a turn in the other's local queue: the server decides, and each one's
    release wakes (or grants) the other."""
    plain = woken.lock("m-pl-b", ttl=10)
    multi = woken.multi_lock(["m-pl-a", "m-pl-b"], ttl=10)
    assert plain.acquire()
    assert not multi.acquire(timeout=0)
    assert held_keys(raw, ["m-pl-a", "m-pl-b"]) == ["m-pl-b"]
    waiting = SyncCall(lambda: multi.acquire(timeout=30))
    sync_until(lambda: queued(raw, "m-pl-b") == 1)
    plain.release()
    assert waiting.result()
    other = woken.lock("m-pl-a", ttl=10)
    assert not other.acquire(timeout=0)
    waiting = SyncCall(lambda: other.acquire(timeout=30))
    sync_until(lambda: queued(raw, "m-pl-a") == 1)
    token = multi.tokens["m-pl-a"]
    multi.release()
    assert waiting.result()  # granted by the release, a larger token
    assert other.token > token
    other.release()


def test_a_waiter_follows_the_busy_name_and_leaves_no_entry_behind(
    woken: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    names = ["m-f-a", "m-f-b", "m-f-c"]
    first, last = sync_client_b.lock("m-f-a", ttl=10), sync_client_b.lock("m-f-c", ttl=10)
    assert first.acquire() and last.acquire()
    multi = woken.multi_lock(names, ttl=10)
    waiting = SyncCall(lambda: multi.acquire(timeout=30))
    sync_until(lambda: queued(raw, "m-f-a") == 1)  # queued on the first busy name only
    assert queued(raw, "m-f-c") == 0
    first.release()  # woken: m-f-c is busy still, so it queues there
    sync_until(lambda: queued(raw, "m-f-c") == 1)
    assert queued(raw, "m-f-a") == 0 and held_keys(raw, names) == ["m-f-c"]  # none taken
    last.release()
    assert waiting.result()
    assert held_keys(raw, names) == names
    assert [queued(raw, n) for n in names] == [0, 0, 0]
    multi.release()
    late = woken.multi_lock(names, ttl=10)
    assert last.acquire()
    assert not late.acquire(timeout=0.1)  # queued, then gave up: its entry is gone
    assert [queued(raw, n) for n in names] == [0, 0, 0]
    last.release()


def test_a_wake_up_the_multi_lock_cannot_use_goes_to_the_next_waiter(
    woken: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    """Woken by the release of one of its names while another is still busy, the multi-lock
    passes that name's turn on: the waiter queued behind it there is granted the name at once
    (it would otherwise wait for its hour-long fallback re-try)."""
    holder_a, holder_b = sync_client_b.lock("m-p-a", ttl=10), sync_client_b.lock("m-p-b", ttl=10)
    assert holder_a.acquire() and holder_b.acquire()
    multi = woken.multi_lock(["m-p-a", "m-p-b"], ttl=10)
    waiting = SyncCall(lambda: multi.acquire(timeout=30))
    sync_until(lambda: queued(raw, "m-p-a") == 1)
    behind = woken.lock("m-p-a", ttl=10)
    behind_call = SyncCall(lambda: behind.acquire(timeout=30))
    sync_until(lambda: queued(raw, "m-p-a") == 2)
    holder_a.release()  # wakes the multi-lock, first in line on m-p-a
    assert behind_call.result()
    holder_b.release()
    behind.release()
    assert waiting.result()
    multi.release()


def test_a_re_sent_acquire_gets_its_own_tokens_again(raw: redis.Redis) -> None:
    """The script recognises its holder (a request sent again after a lost reply): each name's
    lease starts again, and the tokens are that grant's."""
    names = ["m-rs-a", "m-rs-b"]
    members = [LockKeys.for_name(n) for n in names]
    keys = [k for m in members for k in (m.lock, m.fence, m.queue)]
    args = ["holder-1", 10_000, "", "PUBLISH", *(m.channel for m in members)]
    raw.script_load(MULTI_ACQUIRE.source)
    first = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)
    assert first[0] == 1 and len(first) == 3
    for member in members:
        raw.pexpire(member.lock, 1000)
    again = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)
    assert again == first
    assert all(raw.pttl(m.lock) > 1000 for m in members)
    busy = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, "holder-2", *args[1:])
    assert busy[0] == 0
    raw.delete(*(m.lock for m in members))
    # part of a grant lost, the other part held by another: nothing is left taken
    raw.set(members[0].lock, "holder-1")
    raw.set(members[1].lock, "someone")
    assert raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)[0] == 0
    assert held_keys(raw, names) == ["m-rs-b"]
    raw.delete(members[1].lock)


def test_one_multi_lock_acquired_by_two_callers_at_once(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    """The acquire that came second waits behind the first, then takes the names itself, each
    with its own token from the name's counter (none reserved for a hand-off it cannot have)."""
    names = ["m-two-a", "m-two-b"]
    blocker = sync_client_b.lock("m-two-b", ttl=10)
    assert blocker.acquire()
    multi = sync_client.multi_lock(names, ttl=10)
    calls = [SyncCall(lambda: multi.acquire(timeout=10)) for _ in range(2)]
    # one waits in Redis, the other behind it in this client
    sync_until(lambda: queued(raw, "m-two-b") == 1 and sync_client.statistics().queued == 1)
    blocker.release()
    for _ in calls:
        sync_until(lambda: sync_client.statistics().held == 1)
        for name, token in multi.tokens.items():
            info = sync_client.inspect(name)
            assert info is not None and info.token == token
        multi.release()
    assert [call.result() for call in calls] == [True, True]


def test_the_watchdog_declares_a_multi_lock_lost_when_one_name_is(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """Renewed key by key with its one holder: the renewal that finds one name gone declares the
    whole grant lost, once, and calls on_lost with the multi-lock."""
    told: list[object] = []
    names = ["m-w-a", "m-w-b", "m-w-c"]
    multi = sync_client.multi_lock(names, ttl=0.6, auto_renew=True, on_lost=told.append)
    assert multi.acquire()
    sync_until(lambda: sync_client.statistics().renewals >= 1)
    raw.delete(LockKeys.for_name("m-w-b").lock)  # as if an operator had forced it out
    sync_until(lambda: bool(told))  # (lost is set before on_lost is called)
    assert told == [multi] and multi.lost and sync_client.statistics().losses == 1
    with pytest.raises(fencelock.LockLost):
        multi.release()
    assert held_keys(raw, names) == []  # the others released all the same


def test_a_composed_multi_lock_calls_on_lost_with_itself(
    redlock: list[EmbeddedServer],
) -> None:
    client = LockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
    told: list[object] = []
    multi = client.multi_lock(["m-cl-a", "m-cl-b"], ttl=3, auto_renew=True, on_lost=told.append)
    probes = [srv.client() for srv in redlock]
    try:
        assert multi.acquire()
        for probe in probes:
            probe.delete(LockKeys.for_name("m-cl-b").lock)
        sync_until(lambda: bool(told))
        assert told == [multi] and multi.lost
        with pytest.raises(fencelock.LockLost):
            multi.release()
    finally:
        for probe in probes:
            probe.close()
        client.close()
