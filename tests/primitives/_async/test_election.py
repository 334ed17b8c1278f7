"""Leader election: campaign, resign, leader, observe, loss (docs/election.md).
Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.lock import AsyncLock
from fencelock._core.election import Leader
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.topology import Cluster, SentinelSetup
from tests.concurrency import AsyncCall, async_until
from tests.topologies._async.test_cluster import cluster_client  # noqa: F401  (a fixture)
from tests.topologies._async.test_redlock import make_client
from tests.topologies._async.test_sentinel import sentinel_client


async def async_next(it: AsyncIterator[Leader | None]) -> Leader | None:
    """The observer's next change, within the tests' timeout."""
    return await AsyncCall(lambda: it.__anext__()).result()


async def test_campaign_leader_resign(async_client: AsyncLockClient) -> None:
    el = async_client.election("e-basic", ttl=5, label="node-a")
    assert await el.leader() is None
    assert not el.leading
    term = await el.campaign()
    assert el.leading and el.term == term == el.token
    leader = await el.leader()
    assert leader is not None
    assert (leader.label, leader.term) == ("node-a", term)
    assert leader.ttl is not None and 0 < leader.ttl <= 5
    await el.resign()
    assert not el.leading
    assert await el.leader() is None
    with pytest.raises(fencelock.LockNotOwned):
        await el.resign()
    assert await el.campaign() > term  # every term a larger token
    with pytest.raises(fencelock.LockError):
        await el.campaign()  # already leading
    await el.resign()


async def test_messages_speak_of_campaign_leading_and_resign(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    """An election's errors say what its docs say: a candidate campaigns, leads and resigns
    (resign() while not leading said "cannot release ...: this candidate does not hold it";
    issue 29, item 7)."""
    el = async_client.election("e-words", ttl=5)
    messages = []
    for call in (el.resign, el.extend):
        with pytest.raises(fencelock.LockNotOwned) as refused:
            await call()
        messages.append(str(refused.value))
    with pytest.raises(fencelock.LockNotOwned) as refused:
        el.check()
    messages.append(str(refused.value))
    assert messages == [
        "cannot resign candidate 'e-words': it is not leading",
        "cannot extend candidate 'e-words': it is not leading",
        "cannot check candidate 'e-words': it is not leading",
    ]
    await el.campaign()
    with pytest.raises(fencelock.LockError, match="is already leading: resign\\(\\) first"):
        await el.campaign()
    other = async_client_b.election("e-words", ttl=5, timeout=0)
    not_elected = r"candidate 'e-words' not elected within 0\.0 s"
    with pytest.raises(fencelock.LockTimeout, match=not_elected):
        async with other:
            pass
    await el.resign()


async def test_two_candidates_one_leads(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    a = async_client.election("e-two", ttl=5, label="a")
    b = async_client_b.election("e-two", ttl=5, label="b")
    first = await a.campaign()
    with pytest.raises(fencelock.LockTimeout):
        await b.campaign(timeout=0)
    waiting = AsyncCall(lambda: b.campaign(timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    assert not b.leading
    await a.resign()
    second = await waiting.result()
    assert second > first
    leader = await a.leader()
    assert leader is not None and (leader.label, leader.term) == ("b", second)
    await b.resign()


async def test_candidates_of_one_client_each_show_their_own_term(
    async_client: AsyncLockClient,
) -> None:
    # one client's lock objects hand a lock to each other without Redis; an election must not:
    # leader() would show neither the new leader nor its term
    a = async_client.election("e-local", ttl=5, label="a")
    b = async_client.election("e-local", ttl=5, label="b")
    await a.campaign()
    waiting = AsyncCall(lambda: b.campaign(timeout=10))
    await async_until(lambda: async_client.statistics().waiting == 1)
    leader = await a.leader()
    assert leader is not None and (leader.label, leader.term) == ("a", a.term)
    await a.resign()
    term = await waiting.result()
    leader = await b.leader()
    assert leader is not None and (leader.label, leader.term) == ("b", term)
    await b.resign()


async def test_observe_sees_every_change(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    a = async_client.election("e-observe", ttl=5, label="a")
    b = async_client_b.election("e-observe", ttl=5, label="b")
    # (an observer looks again at least once per its ttl: 60 s here, longer than the tests
    # wait, so the changes are seen by the messages alone)
    changes = async_client_b.election("e-observe", ttl=60).observe()
    try:
        assert await async_next(changes) is None  # the state first: nobody leads
        term_a = await a.campaign()
        seen = await async_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("a", term_a)
        waiting = AsyncCall(lambda: b.campaign(timeout=10))
        await async_until(lambda: async_client_b.statistics().waiting == 1)
        await a.resign()  # granted to b by the release itself: b announces its term
        term_b = await waiting.result()
        seen = await async_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("b", term_b)
        await b.resign()
        assert await async_next(changes) is None
    finally:
        await changes.aclose()


async def test_observe_sees_an_expired_leader_go(
    async_client: AsyncLockClient, server: EmbeddedServer
) -> None:
    # the leader's renewals stop (its client is closed, which releases nothing) and its lease
    # runs out on the server: an expiry publishes nothing
    doomed = AsyncLockClient.from_url(server.url)
    el = doomed.election("e-expire", ttl=0.5)
    changes = async_client.election("e-expire").observe()
    try:
        assert await async_next(changes) is None
        await el.campaign()
        assert await async_next(changes) is not None
        await doomed.close()  # the watchdog stops: the lease runs out on the server
        assert await async_next(changes) is None
    finally:
        await changes.aclose()


async def test_a_deposed_leader_is_fenced_and_told(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    lost: list[AsyncLock] = []
    old = async_client.election("e-fence", ttl=0.6, on_lost=lost.append)
    old_term = await old.campaign()
    await async_client.fenced_set("e-fence-data", "old leader", old_term)
    # an operator deposes it (or its lease ran out while it was frozen: see the process tests)
    await async_client_b.force_release("e-fence")
    new = async_client_b.election("e-fence", ttl=5)
    new_term = await new.campaign(timeout=5)
    assert new_term > old_term
    await async_client_b.fenced_set("e-fence-data", "new leader", new_term)
    with pytest.raises(fencelock.StaleToken):
        await async_client.fenced_set("e-fence-data", "old leader again", old_term)
    assert raw.get("e-fence-data") == "new leader"
    await async_until(lambda: lost == [old])  # its next renewal found it gone
    assert old.lost and not old.leading
    with pytest.raises(fencelock.LockLost):
        old.check()
    with pytest.raises(fencelock.LockLost):
        await old.resign()
    await new.resign()


async def test_a_default_decoding_client_as_user_would_make_it(server: EmbeddedServer) -> None:
    user = AsyncRedis(port=server.port, decode_responses=True)
    client = AsyncLockClient(user)
    el = client.election("e-decoded", ttl=5, label="d")
    changes = client.election("e-decoded", ttl=60).observe()
    try:
        assert await async_next(changes) is None
        term = await el.campaign()
        seen = await async_next(changes)
        assert seen is not None and (seen.label, seen.term) == ("d", term)
    finally:
        await changes.aclose()
    await el.resign()
    await client.close()
    await user.aclose()


async def test_with_block_campaigns_and_resigns(async_client: AsyncLockClient) -> None:
    el = async_client.election("e-with", ttl=5, label="w")
    async with el:
        assert el.leading
        leader = await el.leader()
        assert leader is not None and leader.term == el.term
    assert not el.leading
    assert await el.leader() is None


async def test_bad_arguments_name_the_argument(async_client: AsyncLockClient) -> None:
    with pytest.raises(ValueError, match="ttl"):
        async_client.election("e-bad", ttl=0)
    with pytest.raises(TypeError, match="name"):
        async_client.election(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_lost_policy"):
        async_client.election("e-bad", on_lost_policy="sometimes")
    with pytest.raises(ValueError, match="timeout"):
        await async_client.election("e-bad").campaign(timeout=-1)


async def test_election_on_a_cluster(cluster_client: AsyncLockClient, cluster: Cluster) -> None:  # noqa: F811
    a = cluster_client.election("e-cluster", ttl=5, label="a")
    changes = cluster_client.election("e-cluster", ttl=60).observe()
    try:
        assert await async_next(changes) is None
        term = await a.campaign()
        seen = await async_next(changes)  # the announcement travels by sharded pub/sub
        assert seen is not None and seen.term == term
        await a.resign()
        assert await async_next(changes) is None
    finally:
        await changes.aclose()


async def test_a_leader_survives_a_sentinel_failover(sentinel_setup: SentinelSetup) -> None:
    client = sentinel_client(sentinel_setup)
    el = client.election("e-sentinel", ttl=5, label="s")
    term = await el.campaign()
    sentinel_setup.failover()
    sentinel_setup.wait_synced(demote=True)
    renewed = client.statistics().renewals
    await async_until(lambda: client.statistics().renewals >= renewed + 2)
    assert el.leading
    leader = await el.leader()  # read from the new master
    assert leader is not None and (leader.label, leader.term) == ("s", term)
    await el.resign()
    await client.close()


async def test_election_in_redlock_mode(redlock: list[EmbeddedServer]) -> None:
    client, other = make_client(redlock), make_client(redlock)
    a = client.election("e-redlock", ttl=5, label="a")
    changes = other.election("e-redlock", ttl=60).observe()
    try:
        assert await async_next(changes) is None
        term = await a.campaign()
        seen = await async_next(changes)  # announced on every node
        assert seen is not None and (seen.label, seen.term) == ("a", term)
        with pytest.raises(fencelock.LockTimeout):
            await other.election("e-redlock").campaign(timeout=0)
        await a.resign()
        assert await async_next(changes) is None
    finally:
        await changes.aclose()
        await client.close()
        await other.close()
