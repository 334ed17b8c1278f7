# GENERATED from tests/integrations/_async/test_compat_redis_py.py by tools/gen_sync.py: edit that file instead.
"""fencelock.compat.redis_py(_asyncio): redis-py's lock idioms on real servers. Sync twin
generated into tests/integrations/_sync by tools/gen_sync.py (threads, wait_for and redis-py's
own suite: tests/integrations/test_compat_redis_py.py)."""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Iterator

import pytest
import redis
import redis.exceptions

import fencelock
from fencelock._keys import LockKeys
from fencelock._transport import SyncRedis, SyncRedisCluster
from fencelock.compat import redis_py as compat
from fencelock.compat._sync import redis_py as source
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from fencelock_tools.servers.topology import Cluster
from tests.concurrency import SyncCall, sync_until

# one request timeout (the LockClient default) plus room for a loaded machine
BOUND_MARGIN = 5.0 + 2.0


def key(name: str) -> str:
    return LockKeys.for_name(name).lock


@pytest.fixture
def r(server: EmbeddedServer, raw: redis.Redis) -> Iterator[SyncRedis]:
    client = SyncRedis(port=server.port)
    yield client
    compat.close_client(client)
    client.close()


@pytest.fixture
def r2(server: EmbeddedServer, raw: redis.Redis) -> Iterator[SyncRedis]:
    """Another application client: another fencelock client, as another process would have."""
    client = SyncRedis(port=server.port)
    yield client
    compat.close_client(client)
    client.close()


def test_with_lock_holds_and_fences(r: SyncRedis, raw: redis.Redis) -> None:
    with compat.lock(r, "job", timeout=10) as held:
        assert held.owned() and held.locked()
        first = held.fencing_token
        assert 0 < raw.pttl(key("job")) <= 10_000
    assert not held.locked() and not held.owned()
    with compat.Lock(r, "job", timeout=10) as again:
        assert again.fencing_token > first


def test_blocking_false_and_blocking_timeout(r: SyncRedis, r2: SyncRedis) -> None:
    holder = compat.Lock(r, "busy")
    assert holder.acquire(blocking=False)
    assert not compat.Lock(r2, "busy", blocking=False).acquire()
    other = compat.Lock(r2, "busy", blocking_timeout=0.2)
    started = time.monotonic()
    assert not other.acquire()
    assert 0.2 <= time.monotonic() - started < 0.2 + BOUND_MARGIN
    assert not other.acquire(blocking=False)  # the argument beats the lock's default
    with pytest.raises(compat.LockTimeoutError) as caught:
        with compat.Lock(r2, "busy", blocking_timeout=0.1):
            pass
    assert isinstance(caught.value, redis.exceptions.LockError)
    assert isinstance(caught.value, fencelock.LockTimeout)
    assert caught.value.lock_name == "busy"
    holder.release()


def test_a_release_wakes_a_blocked_acquire(r: SyncRedis, r2: SyncRedis) -> None:
    holder = compat.Lock(r, "handover")
    assert holder.acquire()
    # sleep is unused (no polling); thread_local=False: the sync twin acquires in a thread
    waiter = compat.Lock(r2, "handover", sleep=3600, thread_local=False)
    call = SyncCall(lambda: waiter.acquire(blocking_timeout=60))
    sync_until(lambda: bool(compat.client_for(r2).statistics().waiting))
    holder.release()
    assert call.result()
    assert waiter.owned()
    waiter.release()


def test_extend_adds_replaces_and_reacquire_resets(r: SyncRedis, raw: redis.Redis) -> None:
    lock = compat.Lock(r, "long", timeout=2)
    assert lock.acquire()
    assert lock.extend(10) is True
    assert 10_000 < raw.pttl(key("long")) <= 12_000
    assert lock.extend(1, replace_ttl=True)
    assert raw.pttl(key("long")) <= 1_000
    assert lock.reacquire() is True
    assert 1_000 < raw.pttl(key("long")) <= 2_000
    lock.release()


def test_lock_not_owned_after_expiry(r: SyncRedis, r2: SyncRedis, raw: redis.Redis) -> None:
    lock = compat.Lock(r, "brief", timeout=0.2)
    assert lock.acquire()
    sync_until(lambda: not raw.exists(key("brief")))
    assert not lock.owned()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.extend(1)
    with pytest.raises(redis.exceptions.LockNotOwnedError) as caught:
        lock.release()
    assert isinstance(caught.value, fencelock.LockLost)
    assert lock.local.token is None
    # another took it meanwhile: the expired holder's release deletes nothing
    assert lock.acquire()
    sync_until(lambda: not raw.exists(key("brief")))
    other = compat.Lock(r2, "brief")
    assert other.acquire(blocking=False)
    with pytest.raises(compat.LockNotOwnedError):
        lock.release()
    assert other.owned()
    other.release()


def test_with_block_outliving_its_lease(r: SyncRedis, raw: redis.Redis) -> None:
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        with compat.Lock(r, "slow", timeout=0.2):
            sync_until(lambda: not raw.exists(key("slow")))
    with compat.Lock(r, "slow", timeout=0.2, raise_on_release_error=False):
        sync_until(lambda: not raw.exists(key("slow")))


def test_no_timeout_is_a_lease_renewed_while_held(
    r: SyncRedis, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "RENEWED_LEASE", 0.3)
    lock = compat.Lock(r, "forever")
    assert lock.acquire()
    assert 0 < raw.pttl(key("forever")) <= 300  # a holder that dies frees it
    sync_until(lambda: compat.client_for(r).statistics().renewals >= 3)
    assert lock.owned()
    with pytest.raises(compat.LockError):
        lock.extend(1)
    with pytest.raises(compat.LockError):
        lock.reacquire()
    lock.release()


def test_decode_responses(server: EmbeddedServer, raw: redis.Redis) -> None:
    decoded = SyncRedis(port=server.port, decode_responses=True)
    try:
        lock = compat.Lock(decoded, "text", timeout=5)
        assert lock.acquire(blocking=False)
        assert lock.owned() and lock.locked()
        assert isinstance(lock.local.token, bytes)
        lock.do_release(lock.local.token.decode())  # a str token, as redis-py allows
        assert not lock.locked()
    finally:
        compat.close_client(decoded)
        decoded.close()


def test_release_by_token_from_another_object(r: SyncRedis, r2: SyncRedis) -> None:
    lock = compat.Lock(r, "shared", timeout=10)
    assert lock.acquire()
    other = compat.Lock(r2, "shared")
    other.local.token = lock.local.token  # redis-py's way to hand a grant over
    assert other.owned()
    other.release()
    assert not lock.owned()
    with pytest.raises(compat.LockNotOwnedError):
        other.do_release(b"not-a-token")


def test_one_client_per_redis_client_closed_when_collected(server: EmbeddedServer) -> None:
    user = SyncRedis(port=server.port)
    lock, again = compat.Lock(user, "a"), compat.Lock(user, "b")
    assert compat.client_for(user) is compat.client_for(user)
    assert lock.acquire() and again.acquire()
    lock.release()
    again.release()
    mine = id(user)
    assert mine in source._clients
    gc.collect()  # (what earlier tests left to the collector warns outside the block below)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock, again, user
        gc.collect()
    assert mine not in source._clients
    assert not [w for w in caught if "LockClient" in str(w.message)]


def test_bad_arguments(r: SyncRedis) -> None:
    with pytest.raises(TypeError, match="redis must be"):
        compat.Lock("redis://localhost", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        compat.Lock(r, "x", timeout=0)
    with pytest.raises(ValueError, match="sleep"):
        compat.Lock(r, "x", sleep=-1)
    with pytest.raises(ValueError, match="blocking_timeout"):
        compat.Lock(r, "x", blocking_timeout=-1)
    with pytest.raises(TypeError, match="token"):
        compat.Lock(r, "x").acquire(token="mine")
    lock = compat.Lock(r, "x", timeout=5)
    assert lock.acquire()
    with pytest.raises(ValueError, match="additional_time"):
        lock.extend(0)
    lock.release()


def test_a_refused_server_raises_redis_py_connection_error() -> None:
    user = SyncRedis(port=free_port())
    try:
        lock = compat.Lock(user, "nowhere", blocking_timeout=1)
        started = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError) as caught:
            lock.acquire()
        assert isinstance(caught.value, fencelock.LockConnectionError)
        assert time.monotonic() - started < 1 + BOUND_MARGIN
    finally:
        compat.close_client(user)
        user.close()


def test_redis_cluster(cluster: Cluster) -> None:
    user = SyncRedisCluster(host="127.0.0.1", port=cluster.port, decode_responses=True)
    try:
        with compat.Lock(user, "sharded", timeout=5) as lock:
            assert lock.owned() and lock.fencing_token > 0
            assert not compat.Lock(user, "sharded").acquire(blocking=False)
        assert not lock.locked()
    finally:
        compat.close_client(user)
        user.close()
