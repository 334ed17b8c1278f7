# GENERATED from tests/topologies/_async/test_redlock.py by tools/gen_sync.py: edit that file instead.
"""Redlock over five independent masters, real processes killed, paused and restarted empty.
Sync twin generated into tests/topologies/_sync by tools/gen_sync.py."""

from __future__ import annotations

import contextlib
import gc
import time
import warnings
from collections.abc import Iterator, Sequence

import pytest

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._core import quorum
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock._scripts import FENCE_RAISE
from fencelock._transport import SyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.proxy import TcpProxy
from tests.clients import SyncClients
from tests.concurrency import SyncCall, sync_until
from tests.engine._sync.test_late_grants import connected

KEYS = LockKeys.for_name("job")
# generous per-node timeout: these tests are about quorum logic, not about a loaded CI machine
NODE_TIMEOUT = 0.5
# the node timeout of a test whose nodes are resumed while a request waits for them
SLOW_NODE = 3.0


def make_client(servers: Sequence[EmbeddedServer], **kwargs: object) -> LockClient:
    options: dict[str, object] = {"node_timeout": NODE_TIMEOUT, **kwargs}
    return LockClient.from_url([s.url for s in servers], **options)  # type: ignore[arg-type]


def holders(servers: Sequence[EmbeddedServer], key: str = KEYS.lock) -> list[str | None]:
    """The holder token each live node has for ``key`` (None: not held there)."""
    found = []
    for srv in servers:
        with srv.client() as probe:
            value = probe.get(key)
            found.append(None if value is None else lock_value(value)[0])
    return found


def counters(servers: Sequence[EmbeddedServer]) -> list[int]:
    """The token each node has for the lock: its key's, else its counter's (0: none)."""
    found = []
    for srv in servers:
        with srv.client() as probe:
            value = probe.get(KEYS.lock)
            token = None if value is None else lock_value(value)[1]
            found.append(token or int(probe.get(KEYS.fence) or 0))
    return found


@pytest.mark.glide
def test_acquire_and_release_on_every_node(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    tokens = holders(redlock)
    assert tokens[0] is not None and tokens == [tokens[0]] * 5
    assert lock.token == max(counters(redlock))  # the largest node's, written back
    assert lock.held()
    lock.release()
    assert holders(redlock) == [None] * 5
    client.close()


@pytest.mark.glide
def test_a_second_client_is_refused(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    first, second = (
        sync_clients.of(redlock, node_timeout=NODE_TIMEOUT),
        sync_clients.of(redlock, node_timeout=NODE_TIMEOUT),
    )
    lock = first.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    other = second.lock("job", ttl=10)
    assert not other.acquire(timeout=0)
    assert not other.acquire(timeout=0.2)  # waits, retries, and gives up: nothing taken
    assert holders(redlock) == [holders(redlock)[0]] * 5  # still only the first holder
    token = lock.token
    lock.release()
    assert other.acquire(timeout=0)
    assert other.token > token
    other.release()
    first.close()
    second.close()


def test_a_split_vote_is_given_back_everywhere(redlock: list[EmbeddedServer]) -> None:
    # Another holder owns 3 of the 5 nodes: no majority for us, and the 2 nodes we did get
    # must be released at once, not left to expire.
    for srv in redlock[:3]:
        with srv.client() as probe:
            probe.set(KEYS.lock, "someone-else", px=60_000)
    client = make_client(redlock)
    lock = client.lock("job", ttl=10)
    assert not lock.acquire(timeout=0)
    assert holders(redlock) == ["someone-else"] * 3 + [None, None]
    client.close()


@pytest.mark.glide
def test_two_of_five_killed_acquisitions_continue(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=10)
    seen = []
    for round_ in range(6):
        if round_ == 2:
            redlock[0].kill()
            redlock[3].kill()
        assert lock.acquire(timeout=0)
        seen.append(lock.token)
        lock.release()
    assert seen == sorted(set(seen)), f"tokens must strictly increase: {seen}"
    client.close()


def test_three_of_five_killed_is_an_outage(redlock: list[EmbeddedServer]) -> None:
    for srv in redlock[:3]:
        srv.kill()
    client = make_client(redlock)
    lock = client.lock("job", ttl=10)
    with pytest.raises(fencelock.LockConnectionError, match="3 of 5 nodes unreachable"):
        lock.acquire(timeout=0)
    with pytest.raises(fencelock.LockConnectionError):
        lock.acquire(timeout=0.3)
    with pytest.raises(fencelock.LockConnectionError):  # not LockTimeout: nobody holds it
        with client.lock("job", ttl=10, timeout=0.1):
            pass
    assert holders(redlock[3:]) == [None, None]  # nothing left held on the survivors
    client.close()


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_a_majority_down_is_an_outage_a_majority_busy_is_not(
    redlock: list[EmbeddedServer], fault: str
) -> None:
    nodes = redlock[:3]  # Redlock over 3 masters
    client = make_client(nodes)
    # (held to the end on the node left: 10 s ran out before the end under load)
    holder = client.lock("held", ttl=60)
    assert holder.acquire(timeout=0)
    # 2 of 3 hold the name for another client: a majority answered no
    for srv in nodes[:2]:
        with srv.client() as probe:
            probe.set(KEYS.lock, "someone-else", px=60_000)
    assert not client.lock("job", ttl=10).acquire(timeout=0)
    assert not client.lock("job", ttl=10).acquire(timeout=0.3)
    with pytest.raises(fencelock.LockTimeout):
        with client.lock("job", ttl=10, timeout=0.1):
            pass
    for srv in nodes[:2]:
        srv.kill() if fault == "kill" else srv.pause()
    # 2 of 3 down (refused) or hung (silent past the node timeout): an outage, whatever the
    # one node left says, for acquire as for held, extend and release
    lock = client.lock("job", ttl=10)
    with pytest.raises(fencelock.LockConnectionError, match="2 of 3 nodes unreachable"):
        lock.acquire(timeout=0)
    with pytest.raises(fencelock.LockConnectionError, match="2 of 3 nodes unreachable"):
        lock.acquire(timeout=1)
    for call in (holder.held, holder.extend, holder.release):
        with pytest.raises(fencelock.LockConnectionError, match="1 of 3 nodes confirmed"):
            call()
    assert holders(nodes[2:], KEYS.lock) == [None]  # the failed acquires left nothing held
    client.close()


def test_late_grants_on_a_majority_of_hung_nodes_are_given_back_per_node(
    redlock: list[EmbeddedServer],
) -> None:
    """3 of 5 nodes stopped with the acquire in their sockets: it fails, and each runs it when
    resumed, granting it to nobody; the client's watchdog gives it back node by node (issue
    29), so the name is free on every node and another client takes it at once."""
    client, other = make_client(redlock), make_client(redlock)
    lock = client.lock("job", ttl=300)
    given = connected(client, lock)  # (to every node: the next acquire goes out at once)
    for srv in redlock[:3]:
        srv.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError, match="3 of 5 nodes unreachable"):
            lock.acquire(timeout=0)
        assert holders(redlock[3:]) == [None, None]  # the nodes that answered: given back
    finally:
        for srv in redlock[:3]:
            srv.resume()
    sync_until(lambda: client.statistics().giving_back == 0)
    assert client.statistics().given_back == given + 3  # one per node that granted late
    assert holders(redlock) == [None] * 5
    rival = other.lock("job", ttl=10)
    assert rival.acquire(timeout=0)
    rival.release()
    client.close()
    other.close()


def test_no_node_reachable_is_a_connection_error(redlock: list[EmbeddedServer]) -> None:
    for srv in redlock:
        srv.kill()
    client = make_client(redlock)
    with pytest.raises(fencelock.LockConnectionError):
        client.lock("job", ttl=10).acquire(timeout=0)
    client.close()


def test_tokens_increase_across_majorities_that_overlap_partly(
    redlock: list[EmbeddedServer],
) -> None:
    # The counter-example of the design notes. Nodes a..e; each phase a new client (a new
    # process, say) takes the lock on whichever majority is up, and reads its token. The
    # counters of a, d and e start far ahead of the clocks (as after grants faster than one per
    # microsecond, or from a node whose clock ran ahead): a node restarted empty then hands
    # out its clock, less than they had.
    a, b, c, d, e = redlock
    tokens = []
    big = 10**16  # beyond 2^53 too: still exact
    for srv in (a, d, e):
        with srv.client() as probe:
            probe.set(KEYS.fence, big)

    def grant() -> None:
        client = make_client(redlock)
        lock = client.lock("job", ttl=10)
        assert lock.acquire(timeout=0)
        tokens.append(lock.token)
        lock.release()
        client.close()

    b.kill()
    c.kill()
    for _ in range(5):
        grant()  # on {a, d, e}: their counters reach big + 5
    b.start()  # back, empty
    c.start()
    d.kill()
    e.kill()
    grant()  # on {a, b, c}: max(big + 6, clock, clock), written back to b and c
    assert counters([a, b, c]) == [big + 6] * 3
    a.kill()
    d.start()  # back, empty
    e.start()
    grant()  # on {b, c, d, e}: without the write-back, clocks only: less than big + 6
    assert tokens == sorted(set(tokens)), f"tokens must strictly increase: {tokens}"
    assert tokens[-1] == big + 7


def scripts_run(servers: Sequence[EmbeddedServer]) -> list[int]:
    """Per node, the scripts it ran (EVALSHA and EVAL calls) since the last ``reset_stats``."""
    found = []
    for srv in servers:
        with srv.client() as probe:
            stats = probe.info("commandstats")
            found.append(sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in SCRIPTED))
    return found


SCRIPTED = ("evalsha", "eval")


def reset_stats(servers: Sequence[EmbeddedServer]) -> None:
    for srv in servers:
        with srv.client() as probe:
            probe.config_resetstat()


def test_a_majority_that_grants_the_proposed_token_needs_no_write_back(
    redlock: list[EmbeddedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each node grants max(its last token + 1, its clock, the client's proposal): with the
    # proposal ahead of every node's clock as the acquire runs there (a lead longer than the
    # node timeout, which bounds when a counted grant ran: from the warm-up's round on), the
    # nodes grant one token, which each of them holds already: reading it sends nothing more
    # (fence_raise.lua not run).
    for bound in ("MIN_LEAD_US", "MAX_LEAD_US"):
        monkeypatch.setattr(quorum, bound, 2_000_000)
    client = make_client(redlock)
    warm = client.lock("warm", ttl=10)  # (the scripts loaded, the servers checked)
    assert warm.acquire(timeout=0)
    warm.release()
    lock = client.lock("job", ttl=10)
    for _ in range(3):
        reset_stats(redlock)
        assert lock.acquire(timeout=0)
        token = lock.token
        assert scripts_run(redlock) == [1] * 5  # the acquire alone, on each node
        assert counters(redlock) == [token] * 5  # every node's lock key holds the token
        lock.release()
    client.close()


def test_a_node_ahead_makes_the_grant_write_its_token_back(
    redlock: list[EmbeddedServer],
) -> None:
    # A node whose counter is ahead of every clock and proposal (as after a client whose clock
    # ran ahead) grants more than the others: the largest token, one node's, is written back
    # to a majority before it is handed out, so a later majority without that node hands out
    # a larger one still.
    a = redlock[0]
    client = make_client(redlock)
    warm = client.lock("warm", ttl=10)
    assert warm.acquire(timeout=0)
    warm.release()
    for srv in redlock:
        with srv.client() as probe:
            probe.script_load(FENCE_RAISE.source)  # (no NOSCRIPT round to count)
    ahead = time.time_ns() // 1000 + 10**9  # a thousand seconds ahead
    with a.client() as probe:
        probe.set(KEYS.fence, ahead)
    reset_stats(redlock)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    assert lock.token == ahead + 1
    assert scripts_run(redlock) == [2] * 5  # the acquire, then fence_raise.lua
    assert counters(redlock) == [ahead + 1] * 5
    lock.release()
    a.kill()
    again = client.lock("job", ttl=10)
    assert again.acquire(timeout=0)
    assert again.token > ahead + 1
    again.release()
    client.close()


def test_a_shorter_extend_keeps_a_proposed_token_until_the_clocks_pass_it(
    redlock: list[EmbeddedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client whose proposals lead the nodes' clocks by 2 s (as a clock that far ahead, less
    # than the lease, would): every node grants the proposal, which its lock key alone holds.
    # An extend() to a lease shorter than that keeps each key until its node's clock has passed
    # the token (renew.lua), so the next grant, from the clocks, is larger. The keys went with
    # the short lease before, and the next holder got a smaller token than the old one.
    for bound in ("MIN_LEAD_US", "MAX_LEAD_US"):
        monkeypatch.setattr(quorum, bound, 2_000_000)
    ahead = make_client(redlock)
    warm = ahead.lock("warm", ttl=10)  # (its next proposals lead by 2 s)
    assert warm.acquire(timeout=0)
    warm.release()
    reset_stats(redlock)
    lock = ahead.lock("job", ttl=30)
    assert lock.acquire(timeout=0)
    token = lock.token
    assert scripts_run(redlock) == [1] * 5  # every node granted the proposal: no write-back
    lock.extend(ttl=0.2)
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(srv.client()) for srv in redlock]
        sync_until(lambda: not any(probe.exists(KEYS.lock) for probe in probes))
    other = make_client(redlock)  # (its first proposal leads by FIRST_LEAD_US only)
    later = other.lock("job", ttl=10)
    assert later.acquire(timeout=0)
    assert later.token > token
    later.release()
    other.close()
    ahead.close()


def test_a_hung_node_costs_a_node_timeout_not_its_hang(
    redlock: list[EmbeddedServer],
) -> None:
    """A node that stops answering (paused) is given up at its node timeout, in every round,
    whether its request was sent (the first) or its connection is to be made again: each
    acquire is granted by the four others, and released from them. Nothing else bounds its
    requests but the request timeout, twice the ttl: a round that waited for it would grant
    nothing (a grant's validity is the ttl less the round's time). No time is measured: a
    round that load leaves undecided is tried again."""
    client = make_client(redlock, socket_timeout=60)
    lock = client.lock("job", ttl=30)

    def acquire() -> None:
        while True:  # (a round that load leaves undecided, live nodes late too: again)
            with contextlib.suppress(fencelock.LockConnectionError):
                assert lock.acquire(timeout=30)
                return

    acquire()  # (connected: the first request after the pause is sent)
    lock.release()
    live = redlock[:2] + redlock[3:]
    redlock[2].pause()
    try:
        for _ in range(2):
            acquire()
            assert lock.holder is not None
            assert holders(live) == [lock.holder] * 4
            lock.release()
            assert holders(live) == [None] * 4
    finally:
        redlock[2].resume()
    client.close()


@pytest.mark.glide
def test_a_hung_node_costs_the_renewals_a_node_timeout_not_its_hang(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    """The renewals keep a lease while one node of five hangs: they too give it up at its node
    timeout, connecting included. (The asyncio client renews in a thread on connections of its
    own, made at the first renewal and again after a node timed out; they were bounded by the
    request timeout, 60 s here: the thread waited for the hung node past the lease's deadline,
    renewing nothing and declaring no loss, while another client could take the lock from the
    four live nodes. The chaos run's redlock5/hung-node-redis-objects found it.) No time is
    measured: with a node timeout of the request timeout, no renewal would be confirmed."""
    lost: list[Lock] = []
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT, socket_timeout=60)
    lock = client.lock("job", ttl=3, auto_renew=True, on_lost=lost.append)
    redlock[2].pause()  # before the first renewal: its connections are made during the hang
    try:
        while True:  # (a round that load leaves undecided, live nodes late too: again)
            with contextlib.suppress(fencelock.LockConnectionError):
                assert lock.acquire(timeout=30)
                break
        renewals = client.statistics().renewals
        sync_until(lambda: client.statistics().renewals >= renewals + 2 or bool(lost))
        assert lost == []
        assert lock.held()
        lock.release()
    finally:
        redlock[2].resume()
    client.close()


@pytest.mark.parametrize(("wake", "fair"), [("all", True), ("one", True), ("one", False)])
def test_release_wakes_a_waiter_through_any_node(
    redlock: list[EmbeddedServer], wake: str, fair: bool
) -> None:
    holder_client = make_client(redlock, wake=wake)
    waiter_client = make_client(redlock, max_poll=3600, wake=wake)
    held = holder_client.lock("job", ttl=3600, fair=fair)
    assert held.acquire(timeout=0)
    redlock[0].kill()  # one node's pub/sub is gone: the others still deliver
    waiting = waiter_client.lock("job", ttl=10, fair=fair)

    def acquire_and_release() -> bool:
        granted = waiting.acquire(timeout=None)
        waiting.release()
        return granted

    call = SyncCall(acquire_and_release)
    sync_until(lambda: waiter_client.statistics().waiting == 1)
    if wake == "one":
        with redlock[1].client(decode_responses=True) as probe:
            # queued to be woken, never to be granted by a release: one node's release
            # script cannot give a majority
            assert [len(entry.split()) for entry in probe.zrange(KEYS.queue, 0, -1)] == [1]
    held.release()
    assert call.result()
    # woken by a message: the only timer (an hour) cannot have fired
    assert waiter_client.statistics().wakeups >= 1 and waiter_client.statistics().polls == 0
    holder_client.close()
    waiter_client.close()


@pytest.mark.glide
def test_a_waiters_lease_runs_from_the_re_try_that_won(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    holder_client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    waiter_client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT, max_poll=3600)
    held = holder_client.lock("job", ttl=3600)
    assert held.acquire(timeout=0)
    waiting = waiter_client.lock("job", ttl=0.5)

    def take() -> None:
        assert waiting.acquire(timeout=None)
        waiting.check()  # LockLost if the lease were counted from the first, refused, try
        waiting.release()

    call = SyncCall(take)
    sync_until(lambda: waiter_client.statistics().waiting == 1)
    queued_by = time.monotonic()
    sync_until(lambda: time.monotonic() > queued_by + 0.6)  # past the waiter's ttl
    held.release()
    call.result()
    holder_client.close()
    waiter_client.close()


@pytest.mark.glide
def test_extend_and_held_go_by_majority(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=5)
    assert lock.acquire(timeout=0)
    lock.extend(60)
    with redlock[0].client() as probe:
        assert probe.pttl(KEYS.lock) > 10_000
    for srv in redlock[:2]:  # a minority loses it: still held
        with srv.client() as probe:
            probe.delete(KEYS.lock)
    assert lock.held()
    lock.extend()
    with redlock[2].client() as probe:  # now a majority has lost it
        probe.delete(KEYS.lock)
    assert not lock.held()
    assert lock.lost
    with pytest.raises(fencelock.LockLost):
        lock.extend()
    with pytest.raises(fencelock.LockLost):
        lock.release()
    # the holder's keys on the other nodes are not someone else's: they were left alone
    client.close()


@pytest.mark.glide
def test_release_never_deletes_another_holders_lock(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    for srv in redlock[:3]:
        with srv.client() as probe:
            probe.set(KEYS.lock, "successor", px=60_000)
    with pytest.raises(fencelock.LockLost):
        lock.release()
    assert holders(redlock)[:3] == ["successor"] * 3
    client.close()


@pytest.mark.glide
def test_watchdog_renews_by_majority_and_signals_loss(
    redlock: list[EmbeddedServer],
    sync_clients: SyncClients,
) -> None:
    lost: list[Lock] = []
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=0.6, auto_renew=True, on_lost=lost.append)
    assert lock.acquire(timeout=0)
    renewals = client.statistics().renewals
    sync_until(lambda: client.statistics().renewals >= renewals + 3)
    assert not lock.lost and lock.held()  # outlived its ttl several times
    for srv in redlock[:3]:
        with srv.client() as probe:
            probe.delete(KEYS.lock)
    # the flag is set before on_lost is called (from the watchdog): wait for the callback
    sync_until(lambda: lost == [lock])
    assert lock.lost
    with pytest.raises(fencelock.LockLost):
        lock.check()
    client.close()


@pytest.mark.glide
def test_a_node_down_before_the_first_renewal_leaves_the_majority_renewing(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    """The renewals go on by the majority of the live nodes. (Over glide's clients the asyncio
    client's renewal thread made a client of each node, connected as it was made: one node
    down, none was made, at every renewal, and every auto-renewed lease was declared lost.)"""
    lost: list[Lock] = []
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=3, auto_renew=True, on_lost=lost.append)
    redlock[2].kill()
    assert lock.acquire(timeout=0)
    renewals = client.statistics().renewals
    sync_until(lambda: client.statistics().renewals >= renewals + 2 or bool(lost))
    assert lost == []
    assert lock.held()
    lock.release()
    client.close()


def test_reentrant_lock_over_redlock(redlock: list[EmbeddedServer]) -> None:
    client = make_client(redlock)
    lock = client.lock("job", ttl=10, reentrant=True)
    assert lock.acquire(timeout=0)
    token = lock.token
    assert lock.acquire(timeout=0)
    assert lock.token == token  # a re-entry keeps the outer grant's token
    lock.release()
    assert lock.held()
    lock.release()
    assert holders(redlock) == [None] * 5
    client.close()


def test_a_reentrant_release_sent_again_leaves_its_hold_once(
    redlock: list[EmbeddedServer],
) -> None:
    """Three nodes applied the release of a second hold and their replies came too late, so
    the round is sent again: those nodes must not leave a hold twice (they used to, freeing
    the lock on a majority while its holder's lease was valid: another client took it)."""
    client, rival = make_client(redlock), make_client(redlock)
    lock = client.lock("job", ttl=10, reentrant=True)
    assert lock.acquire(timeout=0)
    assert lock.acquire(timeout=0)
    holder = lock.holder
    assert holder is not None
    for srv in redlock[:3]:  # what the first round left there
        with srv.client() as probe:
            assert probe.hincrby(KEYS.lock, holder, -1) == 1
    lock.release()  # the second round: the second hold, on every node
    lock.check()
    for srv in redlock:
        with srv.client() as probe:
            assert probe.hget(KEYS.lock, holder) == b"1"
    assert not rival.lock("job", ttl=10, reentrant=True).acquire(timeout=0)
    lock.release()
    assert holders(redlock) == [None] * 5
    client.close()
    rival.close()


def test_a_release_sent_again_after_no_answer_is_no_loss(
    redlock: list[EmbeddedServer],
) -> None:
    """Three of five nodes stopped with the release in their sockets: the round is undecided,
    and sent again. Resumed, they run the first round, then answer the second "not held": the
    first deleted the grant. The release succeeded on every node; it was reported as a lost
    lease (issue 29)."""
    client = make_client(redlock, node_timeout=SLOW_NODE)
    lock = client.lock("job", ttl=60)
    # (the scripts cached on every node: a first round answered NOSCRIPT would have run nothing)
    assert lock.acquire(timeout=0)
    lock.release()
    assert lock.acquire(timeout=0)
    slow = redlock[2:]
    for srv in slow:
        srv.pause()
    try:
        release = SyncCall(lock.release)
        # the first round went unanswered there: the second's connections wait to be accepted
        sync_until(lambda: any(srv.waiting_connections() for srv in slow))
    finally:
        for srv in slow:
            srv.resume()
    release.result()  # no LockLost
    assert not lock.lost and client.statistics().losses == 0
    assert holders(redlock) == [None] * 5
    client.close()


@pytest.mark.glide
def test_script_flush_on_some_nodes_is_survived(
    redlock: list[EmbeddedServer], sync_clients: SyncClients
) -> None:
    client = sync_clients.of(redlock, node_timeout=NODE_TIMEOUT)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    lock.release()
    for srv in redlock[:2]:
        with srv.client() as probe:
            probe.script_flush()
    assert lock.acquire(timeout=0)
    lock.release()
    assert holders(redlock) == [None] * 5
    client.close()


def test_fenced_set_needs_the_resource_server(redlock: list[EmbeddedServer]) -> None:
    client = make_client(redlock)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)
    with pytest.raises(TypeError, match="redis="):
        client.fenced_set("stock", "1", lock.token)
    with pytest.raises(TypeError, match="fenced_get in Redlock mode needs redis="):
        client.fenced_get("stock", lock.token)
    with pytest.raises(TypeError, match="versioned in Redlock mode needs redis="):
        client.versioned("stock")
    with pytest.raises(TypeError, match="redis must be"):
        client.fenced_set("stock", "1", lock.token, redis=redlock[0].url)  # type: ignore[arg-type]
    resource = SyncRedis(port=redlock[0].port, socket_timeout=5)
    client.fenced_set("stock", "1", lock.token, redis=resource)
    assert resource.get("stock") == b"1"
    appended = client.fenced_update("stock", lock.token, lambda v: v + b"2", redis=resource)
    assert appended == b"12"
    assert client.versioned("hits", redis=resource).update(lambda v: 1) == (1, 1)
    resource.close()
    lock.release()
    client.close()


def test_redlock_arguments_are_checked(redlock: list[EmbeddedServer]) -> None:
    with pytest.raises(TypeError, match="non-empty list"):
        LockClient([])
    with pytest.raises(TypeError, match="Redlock nodes"):
        LockClient([redlock[0].url])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="min_replicas"):
        make_client(redlock, min_replicas=1)
    with pytest.raises(ValueError, match="node_timeout"):
        make_client(redlock, node_timeout=0)
    with pytest.raises(TypeError, match="url"):
        LockClient.from_url([])


@pytest.fixture
def proxies(redlock: list[EmbeddedServer]) -> Iterator[list[TcpProxy]]:
    """One userspace TCP proxy in front of each node, to slow its traffic down."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(TcpProxy(srv.port)) for srv in redlock]


def test_slow_nodes_behind_a_proxy(
    redlock: list[EmbeddedServer], proxies: list[TcpProxy]
) -> None:
    client = LockClient.from_url([p.url for p in proxies], node_timeout=0.2)
    lock = client.lock("job", ttl=10)
    assert lock.acquire(timeout=0)  # connections made and scripts cached beforehand
    lock.release()
    for proxy in proxies[:2]:
        proxy.delay(0.5)  # a round trip of 1 s, far past the node timeout
    assert lock.acquire(timeout=5)  # the three fast nodes are a majority
    lock.release()
    proxies[2].delay(0.5)  # now a majority is slow: as good as down
    with pytest.raises(fencelock.LockConnectionError, match="3 of 5 nodes unreachable"):
        lock.acquire(timeout=0)
    with pytest.raises(fencelock.LockConnectionError):
        lock.acquire(timeout=0.5)
    client.close()


def held_connections(server: EmbeddedServer) -> int:
    """How many connections ``server`` has that never sent a command: a proxy's that holds
    what its client sent (it connects to its server as it takes a connection, and keeps that
    open while it holds the data)."""
    with server.client() as probe:
        return sum(1 for c in probe.client_list() if c["cmd"] == "NULL")


def test_nodes_slow_to_connect_are_connected_to_at_once(
    redlock: list[EmbeddedServer], proxies: list[TcpProxy]
) -> None:
    """Three of five nodes take connections and answer nothing on them (as slow as a dropped
    SYN): a fresh client connects to all of them at once, so that a round costs one connect
    timeout, however many nodes are that slow. It connected to one after another, each given
    its connect timeout: an acquire(timeout=t) took t plus a connect timeout per slow node
    (issue 29)."""
    slow, hung = redlock[:3], proxies[:3]
    for proxy in hung:
        proxy.blackhole()
    # (a Redlock node's connect timeout is its node timeout: longer than the wait below, so
    # that one connection after another, the second is not tried before that wait fails)
    client = LockClient.from_url([p.url for p in proxies], node_timeout=100.0)
    call = SyncCall(lambda: client.lock("job", ttl=600).acquire(timeout=0))
    try:
        sync_until(lambda: [held_connections(srv) for srv in slow] == [1, 1, 1])
    finally:
        for proxy in hung:
            proxy.reset()  # the handshakes fail at once
    with pytest.raises(fencelock.LockConnectionError, match="3 of 5 nodes unreachable"):
        call.result()
    client.close()


def test_nodes_slow_to_connect_cost_a_call_one_connect_timeout(
    redlock: list[EmbeddedServer], proxies: list[TcpProxy]
) -> None:
    """Three of five nodes take connections and answer nothing on them: the call's first round
    waits one connect timeout for them, and its other rounds (the give-back of what the two
    others granted, sent twice: undecided) do not try them again, so an acquire(timeout=t)
    takes t and one connect timeout at most. Each round connected anew, a connect timeout each
    (issue 29)."""
    slow, hung = redlock[:3], proxies[:3]
    for proxy in hung:
        proxy.blackhole()
    # (long: the rounds after the first come well within it, however loaded the machine)
    client = LockClient.from_url([p.url for p in proxies], node_timeout=5.0)
    with pytest.raises(fencelock.LockConnectionError, match="3 of 5 nodes unreachable"):
        client.lock("job", ttl=600).acquire(timeout=0)
    assert [held_connections(srv) for srv in slow] == [1, 1, 1]  # one tried per slow node
    assert holders(redlock[3:]) == [None, None]  # given back where it was granted
    for proxy in hung:
        proxy.reset()
    client.close()


def test_no_grant_with_a_non_positive_validity(
    redlock: list[EmbeddedServer], proxies: list[TcpProxy]
) -> None:
    # Every node answers (the node timeout is long) and grants, but the round trip (>= 0.4 s)
    # uses up the whole 0.3 s lease: by the time the replies arrive the lease may be gone.
    client = LockClient.from_url([p.url for p in proxies], node_timeout=3.0)
    warm_up = client.lock("job", ttl=30)  # connections made and scripts cached beforehand
    assert warm_up.acquire(timeout=0)
    warm_up.release()
    for proxy in proxies:
        proxy.delay(0.2)
    assert not client.lock("job", ttl=0.3).acquire(timeout=0)
    assert client.lock("job", ttl=30).acquire(
        timeout=0
    )  # the same network: only the ttl differs
    client.close()


def renew_and_drop(servers: Sequence[EmbeddedServer]) -> None:
    """A client that subscribed on every node and renewed a lease: dropped, holding it, unclosed,
    when this returns."""
    client = make_client(servers)
    with client._wiring.topology.watch("dropped", "a test's wait"):
        pass
    lock = client.lock("dropped", ttl=1.0, auto_renew=True)
    assert lock.acquire(timeout=0)
    sync_until(lambda: client.statistics().renewals >= 1)


def test_a_dropped_client_closes_its_connections(redlock: list[EmbeddedServer]) -> None:
    probes = [srv.client() for srv in redlock]

    def connections() -> int:
        return sum(len(probe.client_list()) for probe in probes)

    before = connections()
    gc.disable()  # one collection, below: the connections must not wait for a later one
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            renew_and_drop(redlock)
            gc.collect()
        sync_until(lambda: connections() <= before)
    finally:
        gc.enable()
        for probe in probes:
            probe.close()


def test_operators_see_the_majority_and_free_its_grant(
    redlock: list[EmbeddedServer],
) -> None:
    client = make_client(redlock, label="redlock-holder")
    admin = make_client(redlock, node_timeout=0.1)  # each call waits that long for the paused node
    try:
        lock = client.lock("job", 10)
        assert lock.acquire(timeout=0)
        token = lock.token
        redlock[0].pause()  # a node down: a majority still shows and frees the lock
        info = admin.inspect("job")
        assert info is not None
        assert (info.label, info.token) == ("redlock-holder", token)
        assert [i.name for i in admin.locks()] == ["job"]
        mismatch = admin.force_release("job", token=token + 1)
        assert mismatch.outcome is fencelock.ForceOutcome.TOKEN_MISMATCH
        forced = admin.force_release("job", token=token)
        assert forced.outcome is fencelock.ForceOutcome.RELEASED
        redlock[0].resume()
        assert admin.inspect("job") is None
        assert not lock.held()
        again = admin.lock("job", 10)
        assert again.acquire(timeout=0)
        assert again.token > token
    finally:
        client.close()
        admin.close()


def test_semaphores_are_refused_in_redlock_mode(redlock: list[EmbeddedServer]) -> None:
    client = make_client(redlock)
    with pytest.raises(TypeError, match="Redlock"):
        client.semaphore("jobs", 3)
    client.close()


def test_compute_once_is_refused_in_redlock_mode(redlock: list[EmbeddedServer]) -> None:
    """A result needs one server to live on: nothing is sent, nothing is run."""
    client = make_client(redlock)
    ran = []

    def compute() -> int:
        ran.append(1)
        return 1

    with pytest.raises(TypeError, match="Redlock"):
        client.compute_once("report", compute, fresh_for=60)
    assert ran == []
    client.close()
