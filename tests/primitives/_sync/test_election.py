# GENERATED from tests/primitives/_async/test_election.py by tools/gen_sync.py: edit that file instead.
"""Leader election: campaign, resign, leader, observe, loss (docs/election.md).
Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._core.election import Leader
from fencelock._transport import SyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.topology import Cluster, SentinelSetup
from tests.concurrency import SyncCall, sync_until
from tests.topologies._sync.test_cluster import cluster_client  # noqa: F401  (a fixture)
from tests.topologies._sync.test_redlock import make_client
from tests.topologies._sync.test_sentinel import sentinel_client


def sync_next(it: Iterator[Leader | None]) -> Leader | None:
    """The observer's next change, within the tests' timeout."""
    return SyncCall(lambda: it.__next__()).result()


def test_campaign_leader_resign(sync_client: LockClient) -> None:
    el = sync_client.election("e-basic", ttl=5, label="node-a")
    assert el.leader() is None
    assert not el.leading
    term = el.campaign()
    assert el.leading and el.term == term == el.token
    leader = el.leader()
    assert leader is not None
    assert (leader.label, leader.term) == ("node-a", term)
    assert leader.ttl is not None and 0 < leader.ttl <= 5
    el.resign()
    assert not el.leading
    assert el.leader() is None
    with pytest.raises(fencelock.LockNotOwned):
        el.resign()
    assert el.campaign() > term  # every term a larger token
    with pytest.raises(fencelock.LockError):
        el.campaign()  # already leading
    el.resign()


def test_messages_speak_of_campaign_leading_and_resign(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    """An election's errors say what its docs say: a candidate campaigns, leads and resigns
    (resign() while not leading said "cannot release ...: this candidate does not hold it";
    issue 29, item 7)."""
    el = sync_client.election("e-words", ttl=5)
    messages = []
    for call in (el.resign, el.extend):
        with pytest.raises(fencelock.LockNotOwned) as refused:
            call()
        messages.append(str(refused.value))
    with pytest.raises(fencelock.LockNotOwned) as refused:
        el.check()
    messages.append(str(refused.value))
    assert messages == [
        "cannot resign candidate 'e-words': it is not leading",
        "cannot extend candidate 'e-words': it is not leading",
        "cannot check candidate 'e-words': it is not leading",
    ]
    el.campaign()
    with pytest.raises(fencelock.LockError, match="is already leading: resign\\(\\) first"):
        el.campaign()
    other = sync_client_b.election("e-words", ttl=5, timeout=0)
    not_elected = r"candidate 'e-words' not elected within 0\.0 s"
    with pytest.raises(fencelock.LockTimeout, match=not_elected):
        with other:
            pass
    el.resign()


def test_two_candidates_one_leads(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    a = sync_client.election("e-two", ttl=5, label="a")
    b = sync_client_b.election("e-two", ttl=5, label="b")
    first = a.campaign()
    with pytest.raises(fencelock.LockTimeout):
        b.campaign(timeout=0)
    waiting = SyncCall(lambda: b.campaign(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    assert not b.leading
    a.resign()
    second = waiting.result()
    assert second > first
    leader = a.leader()
    assert leader is not None and (leader.label, leader.term) == ("b", second)
    b.resign()


def test_candidates_of_one_client_each_show_their_own_term(
    sync_client: LockClient,
) -> None:
    # one client's lock objects hand a lock to each other without Redis; an election must not:
    # leader() would show neither the new leader nor its term
    a = sync_client.election("e-local", ttl=5, label="a")
    b = sync_client.election("e-local", ttl=5, label="b")
    a.campaign()
    waiting = SyncCall(lambda: b.campaign(timeout=10))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    leader = a.leader()
    assert leader is not None and (leader.label, leader.term) == ("a", a.term)
    a.resign()
    term = waiting.result()
    leader = b.leader()
    assert leader is not None and (leader.label, leader.term) == ("b", term)
    b.resign()


def test_observe_sees_every_change(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    a = sync_client.election("e-observe", ttl=5, label="a")
    b = sync_client_b.election("e-observe", ttl=5, label="b")
    # (an observer looks again at least once per its ttl: 60 s here, longer than the tests
    # wait, so the changes are seen by the messages alone)
    changes = sync_client_b.election("e-observe", ttl=60).observe()
    try:
        assert sync_next(changes) is None  # the state first: nobody leads
        term_a = a.campaign()
        seen = sync_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("a", term_a)
        waiting = SyncCall(lambda: b.campaign(timeout=10))
        sync_until(lambda: sync_client_b.statistics().waiting == 1)
        a.resign()  # granted to b by the release itself: b announces its term
        term_b = waiting.result()
        seen = sync_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("b", term_b)
        b.resign()
        assert sync_next(changes) is None
    finally:
        changes.close()


def test_observe_sees_an_expired_leader_go(
    sync_client: LockClient, server: EmbeddedServer
) -> None:
    # the leader's renewals stop (its client is closed, which releases nothing) and its lease
    # runs out on the server: an expiry publishes nothing
    doomed = LockClient.from_url(server.url)
    el = doomed.election("e-expire", ttl=0.5)
    changes = sync_client.election("e-expire").observe()
    try:
        assert sync_next(changes) is None
        el.campaign()
        assert sync_next(changes) is not None
        doomed.close()  # the watchdog stops: the lease runs out on the server
        assert sync_next(changes) is None
    finally:
        changes.close()


def test_a_deposed_leader_is_fenced_and_told(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    lost: list[Lock] = []
    old = sync_client.election("e-fence", ttl=0.6, on_lost=lost.append)
    old_term = old.campaign()
    sync_client.fenced_set("e-fence-data", "old leader", old_term)
    # an operator deposes it (or its lease ran out while it was frozen: see the process tests)
    sync_client_b.force_release("e-fence")
    new = sync_client_b.election("e-fence", ttl=5)
    new_term = new.campaign(timeout=5)
    assert new_term > old_term
    sync_client_b.fenced_set("e-fence-data", "new leader", new_term)
    with pytest.raises(fencelock.StaleToken):
        sync_client.fenced_set("e-fence-data", "old leader again", old_term)
    assert raw.get("e-fence-data") == "new leader"
    sync_until(lambda: lost == [old])  # its next renewal found it gone
    assert old.lost and not old.leading
    with pytest.raises(fencelock.LockLost):
        old.check()
    with pytest.raises(fencelock.LockLost):
        old.resign()
    new.resign()


def test_a_default_decoding_client_as_user_would_make_it(server: EmbeddedServer) -> None:
    user = SyncRedis(port=server.port, decode_responses=True)
    client = LockClient(user)
    el = client.election("e-decoded", ttl=5, label="d")
    changes = client.election("e-decoded", ttl=60).observe()
    try:
        assert sync_next(changes) is None
        term = el.campaign()
        seen = sync_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("d", term)
    finally:
        changes.close()
    el.resign()
    client.close()
    user.close()


def test_with_block_campaigns_and_resigns(sync_client: LockClient) -> None:
    el = sync_client.election("e-with", ttl=5, label="w")
    with el:
        assert el.leading
        leader = el.leader()
        assert leader is not None and leader.term == el.term
    assert not el.leading
    assert el.leader() is None


def test_bad_arguments_name_the_argument(sync_client: LockClient) -> None:
    with pytest.raises(ValueError, match="ttl"):
        sync_client.election("e-bad", ttl=0)
    with pytest.raises(TypeError, match="name"):
        sync_client.election(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_lost_policy"):
        sync_client.election("e-bad", on_lost_policy="sometimes")
    with pytest.raises(ValueError, match="timeout"):
        sync_client.election("e-bad").campaign(timeout=-1)


def test_election_on_a_cluster(cluster_client: LockClient, cluster: Cluster) -> None:  # noqa: F811
    a = cluster_client.election("e-cluster", ttl=5, label="a")
    changes = cluster_client.election("e-cluster", ttl=60).observe()
    try:
        assert sync_next(changes) is None
        term = a.campaign()
        seen = sync_next(changes)  # the announcement travels by sharded pub/sub
        assert seen is not None and seen.term == term
        a.resign()
        assert sync_next(changes) is None
    finally:
        changes.close()


def test_a_leader_survives_a_sentinel_failover(sentinel_setup: SentinelSetup) -> None:
    client = sentinel_client(sentinel_setup)
    el = client.election("e-sentinel", ttl=5, label="s")
    term = el.campaign()
    sentinel_setup.failover()
    sentinel_setup.wait_synced(demote=True)
    renewed = client.statistics().renewals
    sync_until(lambda: client.statistics().renewals >= renewed + 2)
    assert el.leading
    leader = el.leader()  # read from the new master
    assert leader is not None and (leader.label, leader.term) == ("s", term)
    el.resign()
    client.close()


def test_election_in_redlock_mode(redlock: list[EmbeddedServer]) -> None:
    client, other = make_client(redlock), make_client(redlock)
    a = client.election("e-redlock", ttl=5, label="a")
    changes = other.election("e-redlock", ttl=60).observe()
    try:
        assert sync_next(changes) is None
        term = a.campaign()
        seen = sync_next(changes)  # announced on every node
        assert seen is not None and (seen.label, seen.term) == ("a", term)
        with pytest.raises(fencelock.LockTimeout):
            other.election("e-redlock").campaign(timeout=0)
        a.resign()
        assert sync_next(changes) is None
    finally:
        changes.close()
        client.close()
        other.close()
