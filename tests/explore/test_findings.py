"""What the explorer found on the code it was built against: each a regression test that
replays the finding's schedule (``python -m tests.sim.explore --replay CONFIG SCHEDULE`` shows
it step by step), now fixed. A finding comes back as ``Finding`` (its own violation, by its
own actor): while one is open, its test is marked ``xfail(strict=True, raises=Finding)``, which
nothing else can pass for. The first ones need no exploration at all once seen: the default
schedule shows them.
"""

from __future__ import annotations

import asyncio

from tests.sim.explore import FINDINGS, SPECS, Outcome, Randomly, Replay, report, run
from tests.sim.harness import simulate
from tests.sim.topology import SimClient


class Finding(AssertionError):
    """The finding itself: the violation it names, by the actor it names. Anything else a run
    raises or reports is another failure, which an xfail must not pass for the finding."""


def no_finding(outcome: Outcome, check: str, actor: str) -> None:
    """``outcome`` has no violation; ``Finding`` if it has the finding's."""
    violation = outcome.violation
    if violation is None:
        return
    if violation.check == check and str(violation).startswith(f"{check}: {actor} "):
        raise Finding(report(outcome))
    raise AssertionError(f"not the finding ({check} by {actor}):\n{report(outcome)}")


def test_a_lock_object_queued_while_the_head_acquires_hears_when_its_grant_lapses() -> None:
    """Two lock objects of one client want the name at once; the first takes it and drops it
    without a release. The second, queued while the first was still acquiring, never learns
    the holder's deadline (``holder_gone`` answers None while the owner is a ticket, and
    ``holding`` wakes nobody): it waits for its own timeout, for ever with ``timeout=None``,
    while the name is free from the lease's end (singleflight.py, contention._wait_in_line)."""
    no_finding(run(FINDINGS["lapse-race"], Replay({})), "wake-up", "p0.1")


def test_the_second_lock_object_gets_the_name_once_the_dropped_grant_runs_out() -> None:
    granted: list[float] = []

    async def main(client: SimClient) -> None:
        first, second = client.lock("job", 1.0), client.lock("job", 1.0)

        async def drop() -> None:
            assert await first.acquire(timeout=0)  # and never released

        async def wait() -> None:
            if await second.acquire(timeout=3):
                granted.append(asyncio.get_running_loop().time())
                await second.release()

        await asyncio.gather(drop(), wait())

    simulate(main)
    if not granted or granted[0] >= 100 + 1.1:  # the first lease ended at 101.0
        raise Finding(f"granted at {granted}, not when the dropped grant ran out")


def test_a_redlock_waiter_whose_grant_could_not_be_confirmed_tries_again_soon() -> None:
    """Seed 124 (one fault: p0 paused as it acquires): p1, waiting, re-tries when p0's lease
    ends, and a majority grants it, but its token cannot be confirmed in time (time moves while
    the fence_raise replies are in flight). p1 gives the grant back, as it must, and then
    waited a whole ttl while the name was free: ``AsyncQuorum.try_acquire`` answered
    ``Busy(None)`` for a grant it could not confirm, and ``retry_delay`` falls back on the ttl
    when the holder's pttl is unknown. (First found as ``redlock 0.10,46.2``: the schedules
    of that time no longer lead there.)"""
    no_finding(run(SPECS["redlock"], Randomly(124), faults=3, seed=124), "wake-up", "p1.0")


def test_a_waiter_whose_connection_broke_before_its_subscription_was_confirmed_waits_on() -> None:
    """A reader subscribes (SUBSCRIBE, then PING with its nonce) and its pub/sub connection is
    reset before the PING's reply arrives. The listener makes the connection again at once,
    subscribes every channel and confirms it with a PING of its own, but the reader's nonce is
    never answered: it waits out the whole confirmation timeout (one request timeout: 5 s by
    default) while the writer releases, and its acquire then fails with LockConnectionError
    ("no confirmation in time") although the server was reachable all along (waiter.py: the
    re-subscription wakes the watchers, not the watches still waiting for a confirmation)."""
    no_finding(run(SPECS["rwlock"], Replay({5: 2, 17: 7})), "wake-up", "p2.0")


def test_a_waiters_fallback_retry_is_counted_from_when_its_request_left() -> None:
    """A waiter's busy reply (pttl 501 ms) arrives 0.19 s late; the holder's lease then ends
    with no release (nothing is published). The waiter re-tries pttl after the reply *arrived*
    (``retry_delay(result.pttl, ...)`` from now, contention._wait_for_grant), 0.19 s after the
    name was free, where counting pttl from the request's send time would re-try at the
    lease's end: a slow reply delays the fallback re-try by its own lateness (up to a request
    timeout)."""
    no_finding(run(SPECS["expiry"], Replay({19: 2, 50: 1})), "wake-up", "p1.0")


def test_a_semaphore_waiter_behind_a_dead_waiter_retries_when_its_turn_ends() -> None:
    """Limit 2: one holder paused, one crashed holding, and the first queued waiter crashed.
    With no permit held and the dead waiter first in line, the live waiter's busy reply
    carries the whole ttl as its pttl instead of the dead waiter's remaining turn:
    semaphore_acquire.lua computed it with ``ipairs({lease, turn})``, which in Lua 5.1 stops at
    the nil ``lease`` (no permit held) and never looks at ``turn``. The waiter re-tries a ttl
    later, not when the turn ends, while the name is free. (Seed 61's schedule: ``python -m
    tests.sim.explore --replay semaphore --seed 61`` finds it again with the fix undone.)"""
    forced = {10: 1, 18: 6, 22: 6, 27: 1, 29: 1, 33: 2, 36: 2}
    no_finding(run(SPECS["semaphore"], Replay(forced), faults=3), "wake-up", "p2.0")
