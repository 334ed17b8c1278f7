# GENERATED from tests/engine/_async/test_operations.py by tools/gen_sync.py: edit that file instead.
"""Seeing and steering locks: holder labels, inspect, locks, force_release, the counter kept by
renewals, the eviction warning (docs/operations.md). Sync twin generated into tests/engine/_sync by
tools/gen_sync.py."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._core.lease import DATA_LOSS, EXPLAINED
from fencelock._core.replies import MAX_LABEL_LENGTH, lock_value
from fencelock._keys import LockKeys
from fencelock.errors import LockLost, StaleToken
from fencelock_tools.servers.embedded import EmbeddedServer, find_server
from tests.concurrency import SyncCall, sync_until

NAME = "report"
KEYS = LockKeys.for_name(NAME)


def test_the_label_rides_with_the_grant(
    server: EmbeddedServer, raw: redis.Redis, sync_client: LockClient
) -> None:
    labelled = LockClient.from_url(server.url, label="host-a:42:worker 1")
    try:
        lock = labelled.lock(NAME, 10)
        assert lock.acquire(timeout=0)
        info = sync_client.inspect(NAME)
        assert info is not None
        assert info.label == "host-a:42:worker 1"  # escaped in Redis, readable here
        assert info.holder and info.holder not in str(raw.get(KEYS.lock))  # a digest, opaque
        # one word: queue entries split on spaces
        assert " " not in lock_value(raw.get(KEYS.lock))[0]
        lock.release()
        # the lock's label overrides the client's; None: no label at all
        for label, shown in [("nightly", "nightly"), (None, None)]:
            lock = labelled.lock(NAME, 10, label=label)
            assert lock.acquire(timeout=0)
            info = sync_client.inspect(NAME)
            assert info is not None and info.label == shown
            lock.release()
    finally:
        labelled.close()


def test_a_label_callable_names_whoever_acquires(
    sync_client: LockClient,
) -> None:
    lock = sync_client.lock(NAME, 10, label=fencelock.holder_label)
    assert lock.acquire(timeout=0)
    info = sync_client.inspect(NAME)
    assert info is not None and info.label is not None
    here = f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"
    assert info.label.startswith(here)  # (and ":" + the task's name in asyncio)
    lock.release()


def test_bad_labels_are_refused(sync_client: LockClient) -> None:
    with pytest.raises(TypeError, match="label"):
        sync_client.lock(NAME, label=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="label"):
        sync_client.lock(NAME, label="")
    with pytest.raises(ValueError, match=f"at most {MAX_LABEL_LENGTH}"):
        sync_client.lock(NAME, label="x" * (MAX_LABEL_LENGTH + 1))
    lock = sync_client.lock(NAME, label=lambda: "")
    with pytest.raises(ValueError, match="label callable"):
        lock.acquire(timeout=0)
    assert sync_client.inspect(NAME) is None  # nothing was requested
    assert sync_client.lock(NAME).acquire(
        timeout=0
    )  # and nothing was left in the local line


def test_inspect_shows_holder_token_kind_and_waiters_in_order(
    server: EmbeddedServer, sync_client: LockClient, sync_client_b: LockClient
) -> None:
    assert sync_client.inspect(NAME) is None
    lock = sync_client.lock(NAME, 10, label="holder")
    assert lock.acquire(timeout=0)
    third = LockClient.from_url(server.url)
    try:
        first = SyncCall(lambda: sync_client_b.lock(NAME, 10, label="first").acquire(timeout=10))
        sync_until(lambda: sync_client_b.statistics().waiting == 1)
        second = SyncCall(lambda: third.lock(NAME, 10, label="second").acquire(timeout=10))
        sync_until(lambda: third.statistics().waiting == 1)
        info = sync_client.inspect(NAME)
        assert info is not None
        assert (info.name, info.label, info.kind, info.count) == (NAME, "holder", "simple", 1)
        assert info.token == lock.token
        assert info.ttl is not None and 0 < info.ttl <= 10
        assert info.queued == 2
        assert [w.label for w in info.waiters] == ["first", "second"]
        assert info.waiters[0].age >= info.waiters[1].age >= 0
        lock.release()
        assert first.result()
        # the first waiter was granted the lock by the release: it holds, the second waits
        info = sync_client.inspect(NAME)
        assert info is not None and info.label == "first"
        assert [w.label for w in info.waiters] == ["second"]
        sync_client.force_release(NAME)
        assert second.result()
    finally:
        third.close()


def test_inspect_a_reentrant_lock(sync_client: LockClient) -> None:
    lock = sync_client.lock(NAME, 10, reentrant=True, label="re")
    assert lock.acquire(timeout=0) and lock.acquire(timeout=0)
    info = sync_client.inspect(NAME)
    assert info is not None
    assert (info.kind, info.count, info.label, info.token) == ("reentrant", 2, "re", lock.token)


def test_renewals_keep_the_fencing_counter(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """The counter was kept only for the first lease: a lock renewed past it showed no token.
    (A reentrant lock's: a simple lock's key holds its token, test_a_held_lock_is_one_key.)"""
    lock = sync_client.lock(NAME, 0.3, auto_renew=True, reentrant=True)
    assert lock.acquire(timeout=0)
    # renewed every 0.1 s: past its first lease, and the counter's first expiry (about 0.3 s)
    sync_until(lambda: sync_client.statistics().renewals >= 5)
    info = sync_client.inspect(NAME)
    assert info is not None and info.token == lock.token
    assert raw.pttl(KEYS.fence) > 0
    # extend() keeps it as long as the longer lease
    lock.extend(60)
    assert raw.pttl(KEYS.fence) > 50_000
    lock.release()


def test_a_held_lock_is_one_key(sync_client: LockClient, raw: redis.Redis) -> None:
    # The lock key holds the holder token and the fencing token: no counter beside it, however
    # long the lock is held and renewed, and its token read from it.
    lock = sync_client.lock(NAME, 0.3, auto_renew=True)
    assert lock.acquire(timeout=0)
    assert raw.keys("fencelock:*") == [KEYS.lock]
    assert lock_value(raw.get(KEYS.lock)) == (lock._lease.grant().holder, lock.token)
    sync_until(lambda: sync_client.statistics().renewals >= 5)
    lock.extend(60)
    info = sync_client.inspect(NAME)
    assert info is not None and info.token == lock.token
    assert raw.keys("fencelock:*") == [KEYS.lock]
    lock.release()
    assert raw.keys("fencelock:*") == []


def test_locks_lists_held_names_matching_a_pattern(sync_client: LockClient) -> None:
    names = ["job:{1}", "job:100%", "job:*", "other"]
    held = [sync_client.lock(name, 10) for name in names]
    for lock in held:
        assert lock.acquire(timeout=0)
    held[-1].release()  # released: not listed
    listed = {info.name: info for info in [i for i in sync_client.locks()]}
    assert set(listed) == set(names[:3])
    assert listed["job:{1}"].token == held[0].token
    assert {i.name for i in sync_client.locks("job:1*")} == {"job:100%"}
    assert {i.name for i in sync_client.locks("job:{*")} == {"job:{1}"}
    with pytest.raises(TypeError, match="pattern"):
        [i for i in sync_client.locks(3)]  # type: ignore[arg-type]


def test_force_release_while_the_holder_writes_through_fenced_set(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    """The forced-out holder's next fenced write is refused once the next holder wrote; it
    hears of the loss at its next release, extend or held(); the waiter is woken."""
    lock = sync_client.lock(NAME, 60)
    assert lock.acquire(timeout=0)
    old = lock.token
    sync_client.fenced_set("stock", "1", old)
    waiting = sync_client_b.lock(NAME, 60)
    taken = SyncCall(lambda: waiting.acquire(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    info = sync_client_b.inspect(NAME)
    assert info is not None
    result = sync_client_b.force_release(NAME, token=info.token)
    assert result.outcome is fencelock.ForceOutcome.RELEASED
    assert (result.token, result.holder) == (old, info.holder)
    assert taken.result()  # woken (granted) by the forced release
    assert waiting.token > old
    sync_client_b.fenced_set("stock", "2", waiting.token)
    with pytest.raises(StaleToken):
        sync_client.fenced_set("stock", "stale", old)
    assert raw.get("stock") == "2"
    assert not lock.held()
    with pytest.raises(LockLost):
        lock.extend()
    with pytest.raises(LockLost):
        lock.release()
    assert (sync_client_b.inspect(NAME)).token == waiting.token  # type: ignore[union-attr]


def test_force_release_of_another_grant_touches_nothing(
    sync_client: LockClient, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "fencelock.admin")
    result = sync_client.force_release(NAME)
    assert result.outcome is fencelock.ForceOutcome.NOT_HELD
    lock = sync_client.lock(NAME, 60, label="busy")
    assert lock.acquire(timeout=0)
    result = sync_client.force_release(NAME, token=lock.token - 1)
    assert result.outcome is fencelock.ForceOutcome.TOKEN_MISMATCH
    assert (result.token, result.label) == (lock.token, "busy")
    assert lock.held()
    result = sync_client.force_release(NAME, token=lock.token)
    assert result.outcome is fencelock.ForceOutcome.RELEASED
    logged = [r for r in caplog.records if r.name == "fencelock.admin"]
    assert [r.outcome for r in logged] == ["not_held", "token_mismatch", "released"]  # type: ignore[attr-defined]
    assert logged[-1].levelno == logging.WARNING
    assert (logged[-1].lock_name, logged[-1].token, logged[-1].label) == (NAME, lock.token, "busy")  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="token"):
        sync_client.force_release(NAME, token="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token"):
        sync_client.force_release(NAME, token=0)


def test_a_forced_out_renewed_holder_is_told_by_its_watchdog(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    lost: list[object] = []
    lock = sync_client.lock(NAME, 0.3, auto_renew=True, on_lost=lost.append)
    assert lock.acquire(timeout=0)
    sync_client_b.force_release(NAME)
    sync_until(lambda: lost == [lock])
    assert lock.lost


def test_a_forced_out_renewed_holder_hears_one_cause_everywhere(
    sync_client: LockClient,
    sync_client_b: LockClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Once the watchdog found the grant gone (the server answered), the log, check() and
    release() give that cause, even past the lease's end: release() said "its lease ran out
    while renewals got no answer", and check() "expired or taken over" (issue 29, item 1)."""
    caplog.set_level(logging.WARNING, "fencelock.lease")
    ttl = 2.0  # renewed at a third of it: the answer comes long before the lease would end
    lock = sync_client.lock(NAME, ttl, auto_renew=True)
    assert lock.acquire(timeout=0)
    ends = time.monotonic() + ttl  # (after the local deadline)
    sync_client_b.force_release(NAME)
    sync_until(lambda: lock.lost)
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "lease_lost"]
    assert record.reason == DATA_LOSS and "found at renewal" in record.getMessage()
    sync_until(lambda: time.monotonic() > ends)  # the cause must not be guessed anew
    with pytest.raises(LockLost) as checked:
        lock.check()
    with pytest.raises(LockLost) as released:
        lock.release()
    for error in (checked.value, released.value):
        assert EXPLAINED[DATA_LOSS] in str(error) and "no answer" not in str(error)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_a_server_that_may_evict_lock_keys_is_warned_of_once(
    server_kind: str, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    args = ["--maxmemory", "100mb", "--maxmemory-policy", policy]
    with EmbeddedServer(find_server(server_kind), args=args) as evicting:
        with LockClient.from_url(evicting.url) as client:
            for name in ("a", "b"):
                lock = client.lock(name, 10)
                assert lock.acquire(timeout=0)
                lock.release()
    warned = [r for r in caplog.records if r.name == "fencelock.server"]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert policy in warned[0].getMessage() and "noeviction" in warned[0].getMessage()


def test_no_warning_without_eviction(
    sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert sync_client.lock(NAME, 10).acquire(timeout=0)
    assert [r for r in caplog.records if r.name == "fencelock.server"] == []


def test_inspect_sends_no_wait_with_min_replicas(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    """A read has nothing for replicas to acknowledge: with none attached, a WAIT would hold
    every inspect for the whole replica timeout."""
    with LockClient.from_url(server.url, min_replicas=1, replica_timeout=2) as client:
        assert client.inspect(NAME) is None
        assert [i for i in client.locks()] == []
    assert "cmdstat_wait" not in raw.info("commandstats")
