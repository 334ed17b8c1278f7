# GENERATED from tests/integrations/_async/test_metrics.py by tools/gen_sync.py: edit that file instead.
"""``fencelock.metrics``: what the locks do, read back through each exporter's own API
(prometheus_client's registry, an OpenTelemetry SDK reader), and the structured log events.

Sync twin generated into tests/integrations/_sync by tools/gen_sync.py."""

from __future__ import annotations

import logging

import pytest
import redis
from prometheus_client import CollectorRegistry

import fencelock
from fencelock import _events as events
from fencelock import metrics
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._backend import sync_sleep
from fencelock._core.compute import COMPUTE, ComputeKeys
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from tests.concurrency import RENEWED_TTL, SyncCall, sync_until
from tests.engine._sync.test_late_grants import connected
from tests.exported import Exported


def lock_labels(name: str, **more: str) -> dict[str, str]:
    return {"primitive": "lock", "name": name, **more}


def test_grants_waits_and_holds(exported: Exported, sync_client: LockClient) -> None:
    lock, other = sync_client.lock("m-grants", ttl=10), sync_client.lock("m-grants", ttl=10)
    for _ in range(2):
        with lock:
            assert not other.acquire(timeout=0)  # busy: an acquire that timed out
    labels = lock_labels("m-grants")
    assert exported.count("grants", **labels) == 2
    assert exported.count("acquire_wait", **labels, outcome="granted") == 2
    assert exported.count("acquire_wait", **labels, outcome="timeout") == 2
    assert exported.count("hold", **labels) == 2
    assert exported.total("hold", **labels) > 0


def test_an_acquire_that_fails_is_an_error(exported: Exported) -> None:
    client = LockClient.from_url(f"redis://127.0.0.1:{free_port()}", socket_timeout=1)
    try:
        with pytest.raises(fencelock.LockConnectionError):
            client.lock("m-error").acquire(timeout=0)
    finally:
        client.close()
    assert exported.count("acquire_wait", **lock_labels("m-error", outcome="error")) == 1
    assert exported.count("grants", **lock_labels("m-error")) == 0


def test_reentrant_locks_are_their_own_primitive(
    exported: Exported, sync_client: LockClient
) -> None:
    lock = sync_client.lock("m-reentrant", ttl=10, reentrant=True)
    with lock, lock:  # the second hold is no new grant
        pass
    labels = {"primitive": "reentrant_lock", "name": "m-reentrant"}
    assert exported.count("grants", **labels) == 1
    assert exported.count("hold", **labels) == 1


def test_gauges_show_what_is_held_and_waited_for_now(
    exported: Exported, sync_client: LockClient, sync_client_b: LockClient
) -> None:
    # (other tests' clients may still be alive in this process: compare with before)
    held, waiting = exported.gauge("held_locks"), exported.gauge("waiting_acquires")
    holder = sync_client_b.lock("m-gauges", ttl=10)
    assert holder.acquire(timeout=0)
    assert exported.gauge("held_locks") == held + 1
    lock = sync_client.lock("m-gauges", ttl=10)
    waiter = SyncCall(lambda: lock.acquire(timeout=None))
    sync_until(lambda: exported.gauge("waiting_acquires") == waiting + 1)
    holder.release()
    assert waiter.result()
    assert exported.gauge("waiting_acquires") == waiting
    assert exported.gauge("held_locks") == held + 1  # the waiter's grant now
    lock.release()
    assert exported.gauge("held_locks") == held


def test_wakeups_and_handoffs(
    exported: Exported, sync_client: LockClient, sync_client_b: LockClient
) -> None:
    holder = sync_client_b.lock("m-wake", ttl=10)
    assert holder.acquire(timeout=0)
    head, behind = sync_client.lock("m-wake", ttl=10), sync_client.lock("m-wake", ttl=10)

    def take_and_release(lock: Lock) -> None:
        assert lock.acquire(timeout=None)
        lock.release()

    first = SyncCall(lambda: take_and_release(head))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    second = SyncCall(lambda: take_and_release(behind))
    sync_until(lambda: sync_client.statistics().queued == 1)
    holder.release()
    first.result()
    second.result()
    assert exported.count("wakeups", **lock_labels("m-wake")) == 1
    assert exported.count("handoffs", **lock_labels("m-wake")) == 1


def test_renewals_are_counted(exported: Exported, sync_client: LockClient) -> None:
    with sync_client.lock("m-renew", ttl=RENEWED_TTL, auto_renew=True):
        sync_until(lambda: exported.count("renewals", **lock_labels("m-renew")) >= 2)
    assert exported.count("renewal_failures", **lock_labels("m-renew")) == 0
    assert exported.count("lost_leases", **lock_labels("m-renew", reason="data_loss")) == 0


def test_a_lock_dropped_by_the_server_is_data_loss(
    exported: Exported, sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("m-flushed", ttl=0.6, auto_renew=True, on_lost_policy="ignore")
    with lock:
        # as FLUSHALL, a restart without persistence or a failover would
        raw.delete(LockKeys.for_name("m-flushed", sync_client.prefix).lock)
        sync_until(lambda: lock.lost)  # found gone by the next renewal
    assert exported.count("lost_leases", **lock_labels("m-flushed", reason="data_loss")) == 1
    assert exported.count("renewal_failures", **lock_labels("m-flushed")) == 0  # it answered


def test_a_lock_another_holder_has_is_taken_over(
    exported: Exported, sync_client: LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("m-taken", ttl=0.6, auto_renew=True, on_lost_policy="ignore")
    with lock:
        # as a force_release followed by another client's grant would leave it
        raw.set(LockKeys.for_name("m-taken", sync_client.prefix).lock, "another-holder", px=5000)
        sync_until(lambda: lock.lost)
    assert exported.count("lost_leases", **lock_labels("m-taken", reason="taken_over")) == 1
    extended = sync_client.lock("m-taken-extend", ttl=10)
    assert extended.acquire(timeout=0)
    raw.set(LockKeys.for_name("m-taken-extend", sync_client.prefix).lock, "another", px=5000)
    with pytest.raises(fencelock.LockLost):
        extended.extend()
    labels = lock_labels("m-taken-extend", reason="taken_over")
    assert exported.count("lost_leases", **labels) == 1


def test_a_lease_that_ran_out_is_expired(
    exported: Exported, sync_client: LockClient
) -> None:
    lock = sync_client.lock("m-expired", ttl=0.1)
    assert lock.acquire(timeout=0)
    sync_sleep(0.15)  # the work outlives the lease (time itself is what is tested)
    assert lock.lost
    with pytest.raises(fencelock.LockLost):
        lock.release()
    assert exported.count("lost_leases", **lock_labels("m-expired", reason="expired")) == 1
    assert exported.count("hold", **lock_labels("m-expired")) == 1


def test_a_lease_found_gone_at_release_is_lost_too(
    exported: Exported, sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = sync_client.lock("m-at-release", ttl=0.1)
    assert lock.acquire(timeout=0)
    sync_sleep(0.15)  # the work outlives the lease; nobody asks lock.lost
    expired = pytest.raises(fencelock.LockLost, match="its lease had expired")
    with caplog.at_level(logging.WARNING, "fencelock.lease"), expired:
        lock.release()
    assert exported.count("lost_leases", **lock_labels("m-at-release", reason="expired")) == 1
    assert sync_client.statistics().losses == 1
    assert [getattr(r, "reason", None) for r in caplog.records] == ["expired"]


def test_renewals_a_hung_server_leaves_unanswered_are_unreachable(
    exported: Exported, fresh_server: EmbeddedServer
) -> None:
    client = LockClient.from_url(fresh_server.url, socket_timeout=0.2)
    lock = client.lock("m-hung", ttl=0.6, auto_renew=True, on_lost_policy="ignore")
    try:
        with lock:
            fresh_server.pause()
            try:
                sync_until(lambda: lock.lost)
            finally:
                fresh_server.resume()
        labels = lock_labels("m-hung")
        assert exported.count("lost_leases", **labels, reason="unreachable") == 1
        assert exported.count("renewal_failures", **labels) >= 1
    finally:
        client.close()


def test_a_grant_given_back_late_is_counted(
    exported: Exported, fresh_server: EmbeddedServer
) -> None:
    client = LockClient.from_url(fresh_server.url, socket_timeout=1.0)
    lock = client.lock("m-late", ttl=300)
    try:
        connected(client, lock)
        given = exported.count("given_back", **lock_labels("m-late"))
        fresh_server.pause()
        try:
            with pytest.raises(fencelock.LockConnectionError):
                lock.acquire(timeout=0)  # the server grants it once resumed
        finally:
            fresh_server.resume()
        sync_until(lambda: client.statistics().giving_back == 0)
        assert exported.count("given_back", **lock_labels("m-late")) == given + 1
    finally:
        client.close()


def test_stale_writes_refused_are_counted_and_logged(
    exported: Exported, sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    sync_client.fenced_set("m-resource", "new", 20)
    with caplog.at_level(logging.WARNING, "fencelock.fence"), pytest.raises(fencelock.StaleToken):
        sync_client.fenced_set("m-resource", "old", 10)
    assert exported.count("stale_writes_refused") == 1
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "stale_write_refused"]
    assert (record.key, record.token) == ("m-resource", 10)  # type: ignore[attr-defined]


def test_compute_calls_are_measured_by_outcome(
    exported: Exported, sync_client: LockClient, raw: redis.Redis
) -> None:
    def build() -> int:
        return 1

    for _ in range(2):  # built, then a hit
        assert sync_client.compute_once("m-compute", build, fresh_for=60) == 1
    labels = {"primitive": "compute", "name": "m-compute"}
    assert exported.count("compute", **labels, outcome="built") == 1
    assert exported.count("compute", **labels, outcome="hit") == 1
    assert exported.total("compute", **labels, outcome="built") > 0
    dead = ComputeKeys.for_compute("m-dead", "fencelock:", COMPUTE).lock
    raw.set(dead, "a-dead-builder", px=100)  # a builder killed: its lease ends unreleased
    with pytest.raises(fencelock.LockTimeout):
        sync_client.compute_once("m-dead", build, fresh_for=60, timeout=0)
    assert sync_client.idempotent("m-dead", build) == 1  # (another family: free)
    assert sync_client.compute_once("m-dead", build, fresh_for=60) == 1
    dead_labels = {"primitive": "compute", "name": "m-dead"}
    assert exported.count("compute", **dead_labels, outcome="timeout") == 1
    assert exported.count("compute", **dead_labels, outcome="built") == 1
    assert exported.count("takeovers", **dead_labels) == 1
    assert exported.count("compute", primitive="idempotent", name="m-dead", outcome="built") == 1


def test_lock_names_are_no_label_unless_mapped(sync_client: LockClient) -> None:
    registry = CollectorRegistry()
    subscription = metrics.enable_prometheus(registry)
    try:
        with sync_client.lock("m-unlabelled", ttl=10):
            pass
        assert registry.get_sample_value("fencelock_grants_total", {"primitive": "lock"}) >= 1
        samples = [s for m in registry.collect() for s in m.samples]
        assert all("name" not in s.labels for s in samples)
    finally:
        subscription.disable()

    registry = CollectorRegistry()
    subscription = metrics.enable_prometheus(registry, name_label=lambda n: n.split(":")[0] + ":*")
    try:
        for order in ("order:1", "order:2"):
            with sync_client.lock(order, ttl=10):
                pass
        labels = {"primitive": "lock", "name": "order:*"}
        assert registry.get_sample_value("fencelock_grants_total", labels) == 2
    finally:
        subscription.disable()


def test_lost_leases_are_logged_with_fields(
    sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = sync_client.lock("m-lost-log", ttl=0.1)
    assert lock.acquire(timeout=0)
    sync_sleep(0.15)
    with caplog.at_level(logging.WARNING, "fencelock.lease"):
        assert lock.lost
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "lease_lost"]
    assert record.lock_name == "m-lost-log"  # type: ignore[attr-defined]
    assert record.token == lock.token and record.reason == "expired"  # type: ignore[attr-defined]
    with pytest.raises(fencelock.LockLost):
        lock.release()


def test_slow_acquires_are_logged(
    sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    holder = sync_client.lock("m-slow", ttl=10)
    assert holder.acquire(timeout=0)
    quick, slow = metrics.log_slow_acquires(60), metrics.log_slow_acquires(0.01)
    try:
        with caplog.at_level(logging.WARNING, "fencelock.acquire"):
            # 0.05 s at least, by its timeout: over one threshold, far under the other
            assert not sync_client.lock("m-slow", ttl=10).acquire(timeout=0.05)
    finally:
        quick.disable()
        slow.disable()
        holder.release()
    records = [r for r in caplog.records if getattr(r, "event", None) == "slow_acquire"]
    assert len(records) == 1
    assert records[0].lock_name == "m-slow" and records[0].reason == "timeout"  # type: ignore[attr-defined]
    assert records[0].seconds >= 0.05  # type: ignore[attr-defined]


def test_a_failing_listener_is_logged_and_the_lock_carries_on(
    sync_client: LockClient, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: object) -> None:
        raise RuntimeError("a bug in a listener")

    stop = events.subscribe(broken)
    try:
        with caplog.at_level(logging.ERROR, "fencelock.metrics"):
            with sync_client.lock("m-broken", ttl=10) as lock:
                assert lock.held()
    finally:
        stop()
    assert any("listener failed" in r.getMessage() for r in caplog.records)


def test_switched_off_when_nobody_listens() -> None:
    assert not events.on  # (every test's subscription ended)
    registry = CollectorRegistry()
    first = metrics.enable_prometheus(registry)
    assert metrics.enable_prometheus(registry) is first  # once per registry
    assert events.on
    first.disable()
    first.disable()  # idempotent
    assert not events.on
    assert registry.get_sample_value("fencelock_held_locks") is None  # unregistered
    again = metrics.enable_prometheus(registry)  # and registered again
    again.disable()
    with pytest.raises(TypeError, match="name_label"):
        metrics.enable_prometheus(registry, name_label="order:*")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        metrics.log_slow_acquires(-1)
