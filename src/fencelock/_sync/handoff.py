# GENERATED from src/fencelock/_async/handoff.py by tools/gen_sync.py: edit that file instead.
"""Releasing a lock: to the next lock object of this client waiting for it, or in Redis.

A release with a local waiter queued hands the grant over (singleflight.py): the process keeps
its holder token in Redis. The first hand-off of a streak runs one script that restarts the lease
at the next holder's ttl and reserves a block of fencing tokens; the next ones take the next
token of the block and send nothing, while enough of the lease is left (``_core/lease.py``). A
holder whose lease was lost cannot hand it on: the next in line goes to Redis as the head.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from .._backend import sync_checkpoint, sync_shield
from .._core.kinds import Released
from .._core.lease import Grant, granted, handoff_within_block
from .._core.replies import Busy, reserved_block
from .._core.timing import yield_after_release
from .._transport import sync_inflight
from ..errors import LockConnectionError, LockError
from .singleflight import Ticket

if TYPE_CHECKING:
    from .engine import Lease

logger = logging.getLogger("fencelock.release")
handoff_logger = logging.getLogger("fencelock.handoff")


def give_up(lease: Lease, grant: Grant) -> bool:
    """Release ``grant``: hand it to the next local waiter if there is one, else in Redis.
    False if it was no longer held (nothing was deleted)."""
    parts, spec = lease.wiring, lease.spec
    queues, line, grants = parts.queues, lease.line, parts.grants
    ticket = None
    if not grant.lost and parts.topology.traits.local_handoff and spec.kind.local_handoff:
        ticket = queues.next_for_handoff(line, grant)
    if ticket is not None:
        handed = handoff_within_block(grant, ticket.lease.spec.ttl, time.monotonic())
        if handed is not None:  # the next token of the reserved block: no request at all
            queues.hand(line, ticket, handed)
            handoff_logger.debug("%r handed on, token %d", spec.name, handed.fence)
            return True
        # the script and the bookkeeping after it must both happen, whatever the caller does
        if sync_shield(_hand_to(lease, grant, ticket)):
            return True
    else:
        sent_at = time.monotonic()
        try:
            held_until = grant.held_until
            released = grants.release(spec, grant.holder, held_until=held_until)
            while released is Released.STILL_HELD:
                # The server counts more holds than this lock did: a re-entry applied whose
                # reply was lost (LockConnectionError). They are all this lock's: leave them.
                released = grants.release(spec, grant.holder, held_until=held_until)
            sync_checkpoint()  # a cancellation redis.asyncio swallowed
        except LockConnectionError:
            # unanswered: the grant may be held still, and nobody would release it once the
            # server answers again (a release that went out runs before: harmless)
            parts.watchdog.give_back_late(spec, grant.holder)
            raise
        except LockError:
            raise
        except BaseException as error:
            # Cancelled or interrupted with the request in flight: make sure it happened
            # (a compare-and-delete with our own holder token is safe to repeat), after it; a
            # cancelled caller gets control back at once, and that goes on in the background.
            after = sync_inflight()
            grants.detached.clean_up(grants.give_back(spec, grant.holder, None, after), error)
            raise
        finally:
            queues.pass_turn(line, grant)
        logger.debug("%r released, token %d: %s", spec.name, grant.fence, released.name)
        now = time.monotonic()
        if released is Released.WOKE and spec.kind.fair:
            # someone elsewhere was woken: let them have the turn (a barging lock's releaser
            # may take the name again at once: docs/contention.md, "Barging")
            queues.yield_to_others(line, now + yield_after_release(now - sent_at), True)
        elif released is Released.GRANTED:  # granted to someone elsewhere: busy for their
            # hold, at most about a ttl (their lock on this name is likely configured alike)
            queues.yield_to_others(line, now + spec.ttl, False)
        return released.freed
    return False


def _hand_to(lease: Lease, grant: Grant, ticket: Ticket) -> bool:
    """Hand ``grant`` to ``ticket``; False if it was no longer ours (the ticket then goes to
    Redis as the head)."""
    parts, spec = lease.wiring, lease.spec
    queues, to = parts.queues, ticket.lease
    try:
        block = queues.max_handoffs
        sent_at = time.monotonic()
        result = parts.grants.hand_off(spec, grant.holder, to.spec.ttl_ms, block)
    except BaseException:
        queues.give_turn(ticket)
        raise
    if isinstance(result, Busy):
        queues.give_turn(ticket)
        return False
    block_grant = reserved_block(result.fence, block)
    handed = granted(block_grant, grant.holder, sent_at, to.spec.ttl, os.getpid())
    queues.hand(lease.line, ticket, handed)
    handoff_logger.debug("%r handed on, token %d (new block)", spec.name, handed.fence)
    return True
