# GENERATED from tests/primitives/_async/test_latch.py by tools/gen_sync.py: edit that file instead.
"""Countdown latches and double barriers: counted once per participant, woken by pub/sub,
participants with leases (a dead one is named), generations.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.latch import Latch
from fencelock._backend import sync_sleep
from fencelock._core.latch import LatchKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import RENEWED_TTL, TIMEOUT, SyncCall, sync_until, evalsha_calls


@pytest.mark.glide
def test_the_latch_opens_when_every_participant_counted_down(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    waiter = sync_client_b.latch("l-open", 3)
    waiting = SyncCall(lambda: waiter.wait(timeout=None))
    workers = [sync_client.latch("l-open", 3) for _ in range(3)]
    assert workers[0].count_down() == 2
    assert workers[1].count_down() == 1
    assert waiter.count() == 1 and not waiter.wait(timeout=0)
    assert workers[2].count_down() == 0
    assert waiting.result()
    assert waiter.wait(timeout=0)  # open: returns at once from now on
    assert waiter.count() == 0


@pytest.mark.parametrize("keyword", ["on_lost_policy", "auto_renew", "label"])
def test_lease_options_a_participant_does_not_take_are_refused(
    sync_client: LockClient, keyword: str
) -> None:
    """A participant's lease is always renewed, labelled by its id, and ends by no block's
    policy: those keywords were accepted and ignored; each is refused now, naming what is
    taken."""
    given = {keyword: "cancel" if keyword == "on_lost_policy" else True}
    with pytest.raises(TypeError, match=rf"latch\(\) got an unexpected keyword .*'{keyword}'"):
        sync_client.latch("l", 2, **given)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(its keywords: keep, timeout, on_lost\)"):
        sync_client.barrier("b", 2, **given)  # type: ignore[arg-type]
    latch = sync_client.latch("l", 2, participant="p", timeout=1.0, on_lost=print)
    assert (latch.participant, latch.count_from) == ("p", 2)


def test_a_retried_count_down_counts_once(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """Redisson's latch is a DECR: a count_down sent again after a lost reply counts twice.
    Here a participant counts once per generation by its id, however often it is sent."""
    worker = sync_client.latch("l-retry", 2, participant="worker-1")
    assert worker.count_down() == 1
    assert worker.count_down() == 1  # the retry: no second count
    again = sync_client.latch("l-retry", 2, participant="worker-1")  # a restarted process
    assert again.count_down() == 1
    assert not worker.wait(timeout=0)
    assert raw.scard(LatchKeys.for_latch("l-retry").counted) == 1
    assert sync_client.latch("l-retry", 2, participant="worker-2").count_down() == 0
    assert worker.wait(timeout=0)


def test_a_participant_that_died_is_missing(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    alive = sync_client.latch("l-dead", 2, ttl=10, participant="alive")
    alive.join()
    dying = sync_client_b.latch("l-dead", 2, ttl=0.2, participant="dying")
    dying.join()
    sync_client_b.close()  # it stops renewing, as a SIGKILLed process would
    sync_until_missing(alive, ("dying",))
    assert alive.count_down() == 1  # counted: its lease ends, it is not missing
    assert alive.missing() == ("dying",)
    assert not alive.wait(timeout=0)


def sync_until_missing(latch: Latch, expected: tuple[str, ...]) -> None:
    """Wait for a lease to run out on the server (no event tells of it)."""
    deadline = time.monotonic() + TIMEOUT
    while (seen := latch.missing()) != expected:
        assert time.monotonic() < deadline, f"missing() is still {seen}"
        sync_sleep(0.01)


@pytest.mark.glide
def test_a_joined_participant_is_renewed_and_leaves_on_count_down(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    worker = sync_client.latch("l-renew", 1, ttl=RENEWED_TTL, participant="w")
    worker.join()
    renewals = sync_client.statistics().renewals
    # renewed every third of its ttl: four renewals take it past its first lease
    sync_until(lambda: sync_client.statistics().renewals >= renewals + 4)
    assert worker.missing() == ()  # renewed past its ttl: not missing
    assert raw.zcard(LatchKeys.for_latch("l-renew").lock) == 1
    assert worker.count_down() == 0
    assert raw.zcard(LatchKeys.for_latch("l-renew").lock) == 0  # its lease ended with it
    assert len(sync_client._wiring.watchdog) == 0
    with pytest.raises(fencelock.LockError):
        worker.leave()  # left already


@pytest.mark.glide
def test_reset_starts_a_new_generation(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    latch = sync_client.latch("l-reset", 1, participant="a")
    assert latch.count_down() == 0 and latch.wait(timeout=0)
    latch.reset(count=2)
    assert latch.count() == 2 and not latch.wait(timeout=0)
    assert latch.count_down() == 1  # counted again, in the new generation
    waiter = sync_client_b.latch("l-reset", 1)
    waiting = SyncCall(lambda: waiter.wait(timeout=None))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    latch.reset()  # the generation it waits for will never open
    with pytest.raises(fencelock.LatchReset):
        waiting.result()
    assert latch.count() == 1


def test_a_waiter_is_woken_by_a_message_not_a_timer(
    sync_client: LockClient, server: EmbeddedServer, raw: redis.Redis
) -> None:
    with LockClient.from_url(server.url) as other:
        waiter = other.latch("l-wake", 1, ttl=3600)  # it looks again once an hour at most
        waiting = SyncCall(lambda: waiter.wait(timeout=None))
        sync_until(lambda: other.statistics().waiting == 1)
        scripts = evalsha_calls(raw)
        assert sync_client.latch("l-wake", 1).count_down() == 0
        assert waiting.result()
        assert other.statistics().polls == 0 and other.statistics().wakeups == 1
        assert evalsha_calls(raw) - scripts == 2  # the count_down, and the waiter's one look


def test_latches_are_listed_and_inspected(sync_client: LockClient) -> None:
    latch = sync_client.latch("l-listed", 3, ttl=10, participant="p1")
    latch.join()
    sync_client.latch("l-listed", 3, participant="p2").count_down()
    info = sync_client.inspect("l-listed")
    assert info is not None and info.kind == "latch"
    assert (info.count, info.limit, info.token, info.missing) == (2, 3, None, ())
    assert [h.label for h in info.holders] == ["p1"]
    assert info.label == "p1" and info.ttl is not None and 0 < info.ttl <= 10  # its lease
    assert [i.name for i in sync_client.locks("l-listed")] == ["l-listed"]


def test_a_latch_nobody_joined_is_listed(sync_client: LockClient) -> None:
    """``locks()`` found a latch by its participants' key alone: one only counted down, or only
    reset, was left out (and inspected as a lock with a hold count)."""
    sync_client.latch("l-counted", 3).count_down()
    sync_client.latch("l-made", 3).reset()
    listed = {i.name: i for i in sync_client.locks("l-*")}
    assert sorted(listed) == ["l-counted", "l-made"]
    for name, left in (("l-counted", 2), ("l-made", 3)):
        info = listed[name]
        assert (info.kind, info.count, info.limit, info.holders) == ("latch", left, 3, ())
        assert (info.ttl, info.token) == (None, None)  # no participant, no fencing token
        assert sync_client.inspect(name) == info


def test_a_barrier_shows_its_parties_in(sync_client: LockClient) -> None:
    barrier = sync_client.barrier("b-shown", 2, ttl=10)
    entering = SyncCall(lambda: barrier.enter(timeout=None))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    info = sync_client.inspect("b-shown")
    assert info is not None and (info.kind, info.count, info.limit) == ("barrier", 1, 2)
    other = sync_client.barrier("b-shown", 2, ttl=10)
    assert other.enter(timeout=None) and entering.result()
    info = sync_client.inspect("b-shown")
    assert info is not None and (info.count, info.limit) == (2, 2)


def test_a_latch_refuses_what_it_cannot_do(sync_client: LockClient) -> None:
    with pytest.raises(ValueError, match="count"):
        sync_client.latch("l-bad", 0)
    with pytest.raises(TypeError, match="count"):
        sync_client.latch("l-bad", 1.5)  # type: ignore[arg-type]
    latch = sync_client.latch("l-bad", 1)
    with pytest.raises(TypeError, match="timeout="):
        latch.wait(1)  # type: ignore[misc]
    latch.join()
    with pytest.raises(fencelock.LockError, match="already"):
        latch.join()
    sync_client.close()
    with pytest.raises(fencelock.ClientClosed):
        latch.count_down()


def test_messages_speak_of_joining_entering_and_leaving(
    sync_client: LockClient,
) -> None:
    """A latch's and a barrier's errors say what a participant does: it joins (enters) and
    leaves (a second join said "latch 'x' is already held by this latch"; issue 29, item 6)."""
    latch = sync_client.latch("l-words", 2)
    with pytest.raises(fencelock.LockNotOwned) as refused:
        latch.leave()
    assert (
        str(refused.value) == "cannot leave latch 'l-words': it is not joined by this participant"
    )
    latch.join()
    with pytest.raises(fencelock.LockError) as twice:
        latch.join()
    assert str(twice.value) == (
        "latch 'l-words' is already joined by this participant: leave() first to join again"
    )
    latch.leave()
    barrier = sync_client.barrier("b-words", 1)
    with pytest.raises(fencelock.LockNotOwned) as refused:
        barrier.leave(timeout=0)
    assert str(refused.value) == (
        "cannot leave barrier 'b-words': it is not entered by this participant"
    )
    assert barrier.enter(timeout=0)
    with pytest.raises(fencelock.LockError, match="already entered by this participant"):
        barrier.enter(timeout=0)
    assert barrier.leave(timeout=0)


@pytest.mark.glide
def test_the_barrier_lets_all_in_then_waits_for_all_to_leave(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    first = sync_client.barrier("b-all", 2, ttl=10)
    entering = SyncCall(lambda: first.enter(timeout=None))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    second = sync_client_b.barrier("b-all", 2, ttl=10)
    assert second.enter(timeout=5)
    assert entering.result()
    leaving = SyncCall(lambda: first.leave(timeout=None))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    assert second.leave(timeout=5)
    assert leaving.result()
    # the next round
    third = sync_client.barrier("b-all", 2, ttl=10)
    assert not third.enter(timeout=0)  # alone: not in, and left again
    info = sync_client.inspect("b-all")
    assert info is None or info.holders == ()


def test_a_barrier_does_not_wait_for_a_dead_participant_to_leave(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    alive = sync_client.barrier("b-dead", 2, ttl=10)
    entering = SyncCall(lambda: alive.enter(timeout=None))
    dying = sync_client_b.barrier("b-dead", 2, ttl=0.3)
    assert dying.enter(timeout=5)
    assert entering.result()
    sync_client_b.close()  # dead: it never leaves, its lease ends
    assert alive.leave(timeout=None)  # once its lease ended


def test_a_barrier_as_a_context_manager(sync_client: LockClient) -> None:
    with sync_client.barrier("b-with", 1, ttl=10) as barrier:
        info = sync_client.inspect("b-with")
        assert info is not None and info.kind == "barrier" and len(info.holders) == 1
    assert barrier.parties == 1
    info = sync_client.inspect("b-with")
    assert info is None or info.holders == ()


def test_a_barrier_block_over_a_lost_lease_ends_as_every_leased_block(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """The loss is raised when the body ended normally, and noted on the body's own error
    when it raised one (the body's error is the one to see), as a lock's block does: a
    barrier's block replaced the body's error with the LockLost of its leave."""
    lease_key = LatchKeys.for_latch("b-lost").lock
    with pytest.raises(fencelock.LockLost):
        with sync_client.barrier("b-lost", 1, ttl=10):
            assert raw.delete(lease_key) == 1  # the participant's lease is gone
    with pytest.raises(KeyError) as raised:
        with sync_client.barrier("b-lost", 1, ttl=10):
            assert raw.delete(lease_key) == 1
            raise KeyError("the body's own")
    assert any("fencelock:" in note for note in getattr(raised.value, "__notes__", ()))
