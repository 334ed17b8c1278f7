"""Getting the lock when others want it too: the local queue first, then Redis as its head.

The lock objects of one client that want one name wait in a local queue (singleflight.py); only
its head talks to Redis. The head tries once; if the lock is busy it subscribes to a wake-up
channel, confirms the subscription, and re-tries whenever woken (or when the holder's lease
ends), until granted or out of time. With wake="one" each re-try keeps the waiter's place in the
lock's queue in Redis, and on one master the release script itself may grant it the lock: the
wake-up message then carries the fencing token (a barging lock's waiter is only woken by it for
its first tries: kinds.BARGED_TRIES).

Failure timeline: cancelled, interrupted or failed with a request in flight, an acquire may have
been granted: a shielded give-back with its holder token runs before the error propagates. A
waiter that gives up leaves the queue in Redis with one script that also gives back what a
release granted it meanwhile. A request that got no reply may grant later still (a server that
resumes runs what waits in its sockets): its give-back is the client's watchdog's, until the
server answers again (``giveback.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from .. import _events as events
from .._backend import (
    async_cancelled,
    async_shield,
    async_sleep,
    async_wait_done,
)
from .._core.kinds import BARGED_TRIES
from .._core.lease import Grant, granted, reserve, trusted_release_grant
from .._core.quorum import retry_jitter
from .._core.replies import (
    CHANNEL_WAITERS,
    Busy,
    Granted,
    new_holder_token,
    new_waiter_id,
    unanswered,
)
from .._core.timing import remaining, retry_delay
from .._labels import label_now
from .._transport import async_inflight
from ..errors import LockError, LockLost, NotReplicated
from . import handoff
from .grants import GaveBack
from .singleflight import Ticket
from .waiter import Watch

if TYPE_CHECKING:
    from .engine import AsyncLease

logger = logging.getLogger("fencelock.acquire")


async def take(lease: AsyncLease, deadline: float | None) -> Grant | None:
    """A grant of ``lease``'s name by ``deadline`` (None: however long it takes), or None."""
    queues, line = lease.wiring.queues, lease.line
    label = label_now(lease.options.label)  # (before joining the line: a label callable may raise)
    ticket = queues.join(line, lease, time.monotonic())
    if not ticket.turn:  # another lock object of this client is ahead: wait locally
        handed = await _wait_in_line(lease, ticket, deadline)
        if handed is not None or not ticket.turn:
            return handed
    # The head of the local queue: the one that talks to Redis.
    grants, spec = lease.wiring.grants, lease.spec
    while True:
        holder = new_holder_token(label)
        try:
            sent_at = time.monotonic()
            polite = queues.take_yield(line, sent_at)
            result: Granted | Busy = Busy(None)
            if polite is None or remaining(deadline, sent_at) == 0:
                result = await grants.try_acquire(
                    spec, holder, block=_block(lease), deadline=deadline
                )
            # else this client's last release woke another client (let it take its turn
            # first) or granted it the lock: a try now would find the lock busy
            if isinstance(result, Busy) and remaining(deadline, time.monotonic()) != 0:
                result = await _wait(lease, holder, polite, deadline)
            grant = None
            if isinstance(result, Granted):
                grant = granted(result, holder, sent_at, spec.ttl, os.getpid())
            break
        except GaveBack:
            if remaining(deadline, time.monotonic()) == 0:
                grant = None
                break
            # again, with a new holder token
        except BaseException as error:
            # Cancelled, interrupted or failed with a request in flight: it may have been
            # granted. A cancelled caller gets control back at once: the give-back goes on in
            # the background, after the request in flight (async_inflight).
            try:
                after = async_inflight()
                # (in the background: within one request timeout, the call's may have passed)
                within = None if async_cancelled(error) else deadline
                giving = _give_back(lease, holder, within, after, unanswered(error))
                await grants.detached.clean_up(giving, error)
            finally:
                queues.pass_turn(line, ticket)
            raise
    if grant is None:
        queues.pass_turn(line, ticket)
        logger.debug("%r not acquired in time", lease.name)
        return None
    queues.holding(line, ticket, grant)
    logger.debug("%r acquired, token %d", lease.name, grant.fence)
    return grant


async def _give_back(
    lease: AsyncLease,
    holder: str,
    deadline: float | None,
    after: Awaitable[object] | None,
    late: bool,
) -> None:
    """Give back what ``holder`` may have been granted, after ``after`` (a request of the call
    still in flight), within what is left of the bound of the call whose ``deadline`` it
    serves. ``late``: a request of it got no reply (nor did ``after``, if it ends so): it may
    grant later than anything sent now, so the client's watchdog gives it back again, until
    the server answers."""
    if after is not None and not await async_wait_done(after):
        late = True
    await lease.wiring.grants.give_back(lease.spec, holder, deadline)
    if late:
        lease.wiring.watchdog.give_back_late(lease.spec, holder)


async def reenter(lease: AsyncLease, grant: Grant) -> None:
    """A reentrant lock that holds ``grant`` takes one more hold of it (one request)."""
    lease.check()
    grants = lease.wiring.grants
    sent_at = time.monotonic()
    try:
        # one server answers a count that is not ours (LockLost), never "busy", to a re-entry;
        # Redlock answers "busy" when a majority did not let it in
        result = await grants.try_acquire(lease.spec, grant.holder, grant.depth)
        if isinstance(result, Busy):
            raise LockLost(f"{lease.what()}: a majority of nodes refused the re-entry")
    except LockLost:
        lease.declare_lost(grant, "at re-entry")
        raise
    except NotReplicated:
        extra = grants.release(lease.spec, grant.holder, depth=grant.depth + 1)
        await async_shield(extra)  # the hold it just took
        raise
    grant.reentered(sent_at, lease.spec.ttl)


async def _wait_in_line(lease: AsyncLease, ticket: Ticket, deadline: float | None) -> Grant | None:
    """Wait in the local queue: a grant handed over, or None (``ticket.turn``: go to Redis
    as the head; else the deadline passed)."""
    queues, line = lease.wiring.queues, lease.line
    try:
        while True:
            now = time.monotonic()
            # (a local holder whose lease ran out gives the first in line its turn here)
            left, holder_left = remaining(deadline, now), queues.holder_gone(line, now)
            waits = [t for t in (left, holder_left) if t is not None]
            if await ticket.event.wait(min(waits) if waits else None):
                break  # the lock or the turn reached us (a hand-off may be under way)
            if remaining(deadline, time.monotonic()) != 0:
                continue  # the local holder's lease ran out, was renewed, or became known
            if queues.leave(line, ticket):
                break  # the lock or the turn reached us just now: take it
            return None  # timed out
        await ticket.event.wait(None)  # set by now, or within one request (a hand-off script)
    except BaseException as error:
        if queues.leave(line, ticket):  # it reached us as we were leaving: pass it on
            await lease.wiring.grants.detached.clean_up(_pass_on(lease, ticket), error)
        raise
    return ticket.grant


async def _pass_on(lease: AsyncLease, ticket: Ticket) -> None:
    await ticket.event.wait(None)
    if ticket.grant is not None:
        with contextlib.suppress(LockError):
            await handoff.give_up(lease, ticket.grant)
    else:
        lease.wiring.queues.pass_turn(lease.line, ticket)


async def _wait(
    lease: AsyncLease, holder: str, polite: float | None, deadline: float | None
) -> Granted | Busy:
    """The head found the lock busy: wait for wake-ups and re-try until granted or out of time
    (``polite``: first hold back that long, to let a client this one woke go first)."""
    parts, spec = lease.wiring, lease.spec
    topology = parts.topology
    # wake="one": queued in Redis by the re-tries below, woken on a channel of its own
    # (a semaphore's waiters always queue: the queue is its first come, first served order);
    # else woken on the lock's channel with every other such waiter, for which the re-tries
    # keep '*' in the queue (a release with nobody queued publishes nothing)
    kind = topology.protocol.running(spec.kind)
    wake_one = kind.always_queued or (parts.wake_one and kind.wakes_one)
    waiter = new_waiter_id() if wake_one else ""
    channel = f"{spec.keys.channel}:{waiter}" if waiter else spec.keys.channel
    block = _block(lease)  # fixed: a grant by a release reserves what the entry says

    def entry(tries: int) -> str:
        """This waiter's queue entry for its re-try after ``tries`` others (a barging lock's
        changes once: kinds.BARGED_TRIES)."""
        if not wake_one:
            return CHANNEL_WAITERS
        # (a release may grant a lock's, or a semaphore's permits, by the entry)
        grants = topology.traits.grants_by_release
        return kind.waiter_entry(waiter, channel, holder, spec.ttl_ms, block, grants, tries)

    result: Granted | Busy = Busy(None)
    # (confirmed within the call's bound: its deadline plus one request timeout)
    async with topology.watch(channel, spec.what, parts.grants.time_left(deadline)) as watch:
        try:
            if polite:
                left = remaining(deadline, time.monotonic())
                await _wait_for_wakeup(lease, watch, polite if left is None else min(polite, left))
            result = await _wait_for_grant(lease, holder, block, entry, watch, deadline)
        except BaseException as error:
            if waiter:  # cancelled or failed: leave the queue, giving back what it was granted
                # (after the try in flight, if any; '*' stays for the other waiters; the entry
                # in order removes a barging waiter's by id too: release.lua)
                leave = _leave_queue(lease, holder, entry(BARGED_TRIES), deadline, async_inflight())
                await parts.grants.detached.clean_up(leave, error)
            raise
    if isinstance(result, Busy) and waiter:  # timed out
        await async_shield(_leave_queue(lease, holder, entry(BARGED_TRIES), deadline, None))
    return result


async def _wait_for_grant(
    lease: AsyncLease,
    holder: str,
    block: int,
    entry: Callable[[int], str],
    watch: Watch,
    deadline: float | None,
) -> Granted | Busy:
    """Re-try whenever woken (or when the holder's lease ends) until granted or the deadline
    passes. A grant announced by a release is used as it is only when it can be trusted
    (``trusted_release_grant``); else the next re-try finds the lock ours and re-extends it."""
    parts, spec = lease.wiring, lease.spec
    topology = parts.topology
    result: Granted | Busy = Busy(None)
    tries = 0
    while True:
        if remaining(deadline, time.monotonic()) == 0:
            return result
        # Subscribed (and confirmed) before this re-try: a release after it wakes us.
        watch.event.clear()
        sent_at = time.monotonic()
        result = await parts.grants.try_acquire(
            spec, holder, block=block, waiter=entry(tries), deadline=deadline
        )
        tries += 1
        if isinstance(result, Granted):  # its lease runs from its own request
            return result
        queued = result.queued
        if topology.traits.jitters:  # Redlock: contenders splitting the nodes must not collide
            await async_sleep(retry_jitter(parts.max_poll))
        now = time.monotonic()
        delay = retry_delay(
            result.pttl, remaining(deadline, now), parts.max_poll, spec.ttl, now - sent_at
        )
        await _wait_for_wakeup(lease, watch, delay)
        message, watch.grant = watch.grant, None
        by_release = trusted_release_grant(
            message, queued, block, sent_at, spec.ttl, time.monotonic()
        )
        if by_release is not None:
            return by_release


async def _wait_for_wakeup(lease: AsyncLease, watch: Watch, timeout: float) -> None:
    if await lease.wiring.topology.wait(watch, timeout) and events.on:
        events.emit(events.WokenUp(lease.spec.primitive, lease.name))


async def _leave_queue(
    lease: AsyncLease,
    holder: str,
    entry: str,
    deadline: float | None,
    after: Awaitable[object] | None,
) -> None:
    """A waiter that gives up leaves the queue of wake="one" (best effort: a release skips an
    entry nobody listens for, and the queue expires): a release with the waiter's token, which
    gives back what a release may have granted it meanwhile, and passes on a wake-up it got but
    will not use (release.lua). Within what is left of the acquire's bound, after ``after`` (a
    re-try of the waiter still in flight: its grant must not come after this)."""
    grants = lease.wiring.grants
    if after is not None and not await async_wait_done(after):
        lease.wiring.watchdog.give_back_late(lease.spec, holder)  # (the re-try may grant late)
    with contextlib.suppress(RedisError, LockError):
        await grants.release(lease.spec, holder, entry, grants.time_left(deadline))


def _block(lease: AsyncLease) -> int:
    """Fencing tokens to reserve with a grant (see ``reserve``): one for a kind whose grants are
    never handed on (a multi-lock's script takes one token per name whatever it is asked)."""
    parts = lease.wiring
    local = parts.topology.traits.local_handoff and lease.spec.kind.local_handoff
    return reserve(not local, parts.queues.handoffs_ahead(lease.line) if local else 0)
