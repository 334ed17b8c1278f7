"""The local queue (``fencelock._sync.singleflight.LocalQueues``) as plain state, without a
server: who has the turn, who gets a hand-off, what a waiter that gives up leaves behind.

A ticket's ``lock`` is only carried along (its ttl is read while it is the head acquiring),
so plain objects stand in for lock objects; times are explicit ``now`` values.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from fencelock._core.lease import Grant
from fencelock._core.stats import Counters
from fencelock._sync.singleflight import LocalQueues, Ticket

KEY = "fencelock:{job}:lock:simple"
NOW = 1000.0


def queues(max_handoffs: int = 3) -> tuple[LocalQueues, Counters]:
    counters = Counters()
    return LocalQueues(max_handoffs, counters), counters


def grant(deadline: float = NOW + 10, fence: int = 1) -> Grant:
    return Grant("tok", fence, os.getpid(), deadline)


TTL = 30.0


def join(q: LocalQueues, now: float = NOW) -> Ticket:
    lock: Any = SimpleNamespace(spec=SimpleNamespace(ttl=TTL))
    return q.join(KEY, lock, now)


def holding(q: LocalQueues, deadline: float = NOW + 10) -> tuple[Ticket, Grant]:
    """A head that got a grant in Redis."""
    head, g = join(q), grant(deadline)
    q.holding(KEY, head, g)
    return head, g


# -- join: the head goes to Redis, the others wait in line -----------------------------------------


def test_first_to_join_is_the_head() -> None:
    q, _ = queues()
    head = join(q)
    assert head.turn and head.grant is None
    assert head.queued is None  # the head does not wait: nothing to wake it, none made
    assert q.queued() == 0


def test_later_joiners_wait_in_line_in_order() -> None:
    q, _ = queues()
    join(q)
    first, second = join(q), join(q)
    assert not first.turn and not second.turn
    assert not first.event.is_set() and not second.event.is_set()
    assert q.queued() == 2


def test_keys_queue_apart() -> None:
    q, _ = queues()
    join(q)
    other = q.join("fencelock:{job}:lock:reentrant", object(), NOW)  # type: ignore[arg-type]
    assert other.turn
    assert q.queued() == 0


def test_ticket_carries_its_lease() -> None:
    q, _ = queues()
    lease: Any = object()
    assert q.join(KEY, lease, NOW).lease is lease


# -- the head fails, or the holder releases to Redis: pass_turn ------------------------------------


def test_head_that_fails_passes_the_turn_to_the_next() -> None:
    q, _ = queues()
    head = join(q)
    first, second = join(q), join(q)
    q.pass_turn(KEY, head)
    assert first.turn and first.event.is_set() and first.grant is None
    assert not second.turn and not second.event.is_set()
    assert q.queued() == 1


def test_release_with_nobody_queued_frees_the_key_here() -> None:
    q, _ = queues()
    _, g = holding(q)
    q.pass_turn(KEY, g)
    assert join(q).turn  # the next acquire is the head at once


def test_pass_turn_by_one_without_the_turn_changes_nothing() -> None:
    q, _ = queues()
    head, g = holding(q)
    waiter = join(q)
    q.pass_turn(KEY, head)  # the ticket: its grant has the turn now
    q.pass_turn(KEY, grant())  # another grant altogether
    q.pass_turn("fencelock:{other}:lock:simple", g)  # another key
    assert not waiter.turn and q.queued() == 1
    q.pass_turn(KEY, g)
    assert waiter.turn


def test_holding_by_one_without_the_turn_is_ignored() -> None:
    q, _ = queues()
    head = join(q)
    waiter = join(q)
    q.holding(KEY, waiter, grant())  # not the head: it has no say
    q.pass_turn(KEY, head)  # the head still has the turn, and passes it
    assert waiter.turn


# -- hand-offs and their streak bound --------------------------------------------------------------


def test_nobody_queued_no_handoff() -> None:
    q, _ = queues()
    _, g = holding(q)
    assert q.next_for_handoff(KEY, g) is None


def test_a_waiter_queued_while_the_head_acquires_learns_the_grants_deadline() -> None:
    q, _ = queues()
    head, waiter = join(q), join(q)
    # no deadline yet, but the head's grant will end within its ttl: look again then
    assert q.holder_gone(KEY, NOW) == TTL
    q.holding(KEY, head, grant(deadline=NOW + 10))
    assert not waiter.event.is_set()  # a grant wakes nobody (P3: 8 threads on one name)
    assert q.holder_gone(KEY, NOW) == 10.0
    assert q.holder_gone(KEY, NOW + 10) is None and waiter.turn  # the lease ran out


def test_handoff_goes_to_the_first_in_line() -> None:
    q, counters = queues()
    _, g = holding(q)
    first, second = join(q), join(q)
    assert q.next_for_handoff(KEY, g) is first
    assert q.queued() == 1
    assert not first.event.is_set()  # woken by ``hand``, once the grant is ready
    handed = grant(fence=2)
    q.hand(KEY, first, handed)
    assert first.grant is handed and first.event.is_set() and not first.turn
    assert counters["handoffs"] == 1
    assert not second.event.is_set()


def test_the_handed_grant_has_the_turn() -> None:
    q, _ = queues()
    _, g = holding(q)
    first, second = join(q), join(q)
    assert q.next_for_handoff(KEY, g) is first
    handed = grant(fence=2)
    q.hand(KEY, first, handed)
    assert q.next_for_handoff(KEY, g) is None  # the old grant has no say any more
    assert q.next_for_handoff(KEY, handed) is second


@pytest.mark.parametrize("max_handoffs", [1, 3])
def test_a_streak_of_handoffs_is_bounded(max_handoffs: int) -> None:
    q, counters = queues(max_handoffs)
    _, g = holding(q)
    tickets = [join(q) for _ in range(max_handoffs + 1)]
    for n, ticket in enumerate(tickets[:-1]):
        assert q.next_for_handoff(KEY, g) is ticket
        g = grant(fence=n + 2)
        q.hand(KEY, ticket, g)
    # the bound reached: the lock goes through Redis, the last waiter competes as the head
    assert q.next_for_handoff(KEY, g) is None
    assert counters["handoffs"] == max_handoffs
    q.pass_turn(KEY, g)
    assert tickets[-1].turn and tickets[-1].event.is_set()


def test_max_handoffs_zero_never_hands_off() -> None:
    q, _ = queues(0)
    _, g = holding(q)
    join(q)
    assert q.next_for_handoff(KEY, g) is None
    assert q.handoffs_ahead(KEY) == 0


def test_a_new_streak_starts_after_the_lock_went_through_redis() -> None:
    q, _ = queues(1)
    _, g = holding(q)
    first, second = join(q), join(q)
    assert q.next_for_handoff(KEY, g) is first
    g = grant(fence=2)
    q.hand(KEY, first, g)
    assert q.next_for_handoff(KEY, g) is None  # streak of one used up
    q.pass_turn(KEY, g)  # released in Redis
    g = grant(fence=9)
    q.holding(KEY, second, g)  # the new head got it from Redis
    third = join(q)
    assert q.next_for_handoff(KEY, g) is third


def test_handoffs_ahead() -> None:
    q, _ = queues(5)
    assert q.handoffs_ahead(KEY) == 0  # no local user at all
    join(q)
    assert q.handoffs_ahead(KEY) == 0  # the head alone: reserve one token
    join(q)
    assert q.handoffs_ahead(KEY) == 5  # someone queued: reserve a whole streak


def test_failed_handoff_sends_the_ticket_to_redis_as_head() -> None:
    q, _ = queues()
    _, g = holding(q)
    first, second = join(q), join(q)
    assert q.next_for_handoff(KEY, g) is first
    q.give_turn(first)  # the hand-off script found the lease gone
    assert first.turn and first.event.is_set() and first.grant is None
    # it has the turn: its grant from Redis is the holder, and passes on to the next
    g2 = grant(fence=5)
    q.holding(KEY, first, g2)
    assert q.next_for_handoff(KEY, g2) is second


# -- a waiter that gives up ------------------------------------------------------------------------


def test_leave_while_still_queued() -> None:
    q, _ = queues()
    head = join(q)
    first, second = join(q), join(q)
    assert q.leave(KEY, first) is False  # nothing reached it: nothing to pass on
    assert q.queued() == 1
    q.pass_turn(KEY, head)
    assert second.turn and not first.turn


def test_leave_after_the_turn_reached_it() -> None:
    q, _ = queues()
    head, waiter = join(q), join(q)
    q.pass_turn(KEY, head)
    assert q.leave(KEY, waiter) is True  # it must pass the turn on itself
    assert waiter.turn


def test_leave_after_a_handoff_reached_it() -> None:
    q, _ = queues()
    _, g = holding(q)
    waiter = join(q)
    assert q.next_for_handoff(KEY, g) is waiter
    # taken out of the queue for a hand-off still in flight: it must wait for it, then pass it on
    assert q.leave(KEY, waiter) is True


def test_leave_of_a_key_with_no_line_left() -> None:
    q, _ = queues()
    head = join(q)
    q.pass_turn(KEY, head)
    assert q.leave(KEY, head) is True  # not queued: whatever reached it is its to pass on


# -- a holder whose lease lapsed without a release -------------------------------------------------


def test_holder_gone_tells_a_waiter_how_long_the_lease_has_left() -> None:
    q, _ = queues()
    join(q)
    assert q.holder_gone(KEY, NOW) == TTL  # the head is still acquiring: its grant's bound
    q2, _ = queues()
    holding(q2, deadline=NOW + 4)
    join(q2)
    assert q2.holder_gone(KEY, NOW + 1) == pytest.approx(3.0)


def test_a_lapsed_holder_gives_its_turn_to_the_first_in_line() -> None:
    q, _ = queues()
    _, g = holding(q, deadline=NOW + 4)
    first, second = join(q), join(q)
    assert q.holder_gone(KEY, NOW + 4) is None
    assert first.turn and first.event.is_set() and not second.turn
    # its late release or hand-off must not take the turn from the new head
    assert q.next_for_handoff(KEY, g) is None
    q.pass_turn(KEY, g)
    assert not second.turn and q.queued() == 1


def test_a_lost_holder_gives_its_turn_before_its_deadline() -> None:
    q, _ = queues()
    _, g = holding(q, deadline=NOW + 4)
    first = join(q)
    g.mark_lost("expired")
    assert q.holder_gone(KEY, NOW) is None
    assert first.turn


def test_after_a_lapse_the_streak_starts_afresh() -> None:
    q, _ = queues(1)
    _, g = holding(q)
    first, second = join(q), join(q)
    assert q.next_for_handoff(KEY, g) is first
    g = grant(deadline=NOW + 4, fence=2)
    q.hand(KEY, first, g)  # streak used up
    assert q.holder_gone(KEY, NOW + 5) is None  # lapsed: second is the head
    g = grant(fence=9)
    q.holding(KEY, second, g)
    third = join(q)
    assert q.next_for_handoff(KEY, g) is third


def test_join_after_a_lapsed_holder_with_nobody_queued_is_the_head() -> None:
    q, _ = queues(1)
    _, g = holding(q, deadline=NOW + 4)
    late = join(q, now=NOW + 4)
    assert late.turn and q.queued() == 0
    q.pass_turn(KEY, g)  # the lapsed grant's late release
    assert join(q, now=NOW + 5).turn is False  # the key is still the new head's


def test_join_after_a_lapsed_holder_wakes_the_first_in_line_at_once() -> None:
    # FIFO: the turn the lapsed holder left goes to the one waiting longest, now, not to the
    # newcomer, and not only when that waiter's own timer fires
    q, _ = queues()
    holding(q, deadline=NOW + 1)
    waiting = join(q)
    newcomer = join(q, now=NOW + 2)
    assert waiting.turn and waiting.event.is_set()
    assert not newcomer.turn and q.queued() == 1


def test_join_while_the_holder_is_alive_waits() -> None:
    q, _ = queues()
    holding(q, deadline=NOW + 4)
    assert join(q, now=NOW + 3.9).turn is False


# -- yielding to other clients after a release -----------------------------------------------------


def test_no_yield_tries_at_once() -> None:
    q, _ = queues()
    assert q.take_yield(KEY, NOW) is None


def test_yield_to_a_woken_waiter_holds_back_until_then() -> None:
    q, _ = queues()
    q.yield_to_others(KEY, NOW + 0.003, hold_back=True)
    assert q.take_yield(KEY, NOW) == pytest.approx(0.003)
    assert q.take_yield(KEY, NOW) is None  # taken once


def test_yield_to_a_granted_waiter_skips_the_try_without_waiting() -> None:
    q, _ = queues()
    q.yield_to_others(KEY, NOW + 10, hold_back=False)
    assert q.take_yield(KEY, NOW) == 0.0


@pytest.mark.parametrize("hold_back", [False, True])
def test_a_yield_that_ran_out_is_ignored(hold_back: bool) -> None:
    q, _ = queues()
    q.yield_to_others(KEY, NOW, hold_back)
    assert q.take_yield(KEY, NOW) is None


def test_yields_are_per_key_and_the_latest_wins() -> None:
    q, _ = queues()
    q.yield_to_others(KEY, NOW + 1, hold_back=False)
    q.yield_to_others(KEY, NOW + 2, hold_back=True)
    assert q.take_yield("fencelock:{other}:lock:simple", NOW) is None
    assert q.take_yield(KEY, NOW) == pytest.approx(2.0)


# -- counting and fork -----------------------------------------------------------------------------


def test_queued_counts_waiters_of_every_key() -> None:
    q, _ = queues()
    join(q)
    join(q)
    q.join("fencelock:{b}:lock:simple", object(), NOW)  # type: ignore[arg-type]
    q.join("fencelock:{b}:lock:simple", object(), NOW)  # type: ignore[arg-type]
    assert q.queued() == 2


def test_a_forked_child_starts_with_empty_queues() -> None:
    q, _ = queues()
    holding(q)
    join(q)
    pid = os.fork()
    if pid == 0:  # the child: the parent's holder and waiter do not exist here
        ok = join(q).turn and q.queued() == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert q.queued() == 1  # the parent's queue is untouched
