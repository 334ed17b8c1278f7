# GENERATED from src/fencelock/_async/lock.py by tools/gen_sync.py: edit that file instead.
"""One lock: a name, a lease length, and at most one grant per holder.

Failure timeline of a simple lease, and what each step guards against:

1. acquire: one script sets ``lock = holder`` with ``PX ttl`` if the name is free and hands out
   the next fencing token (scripts/tokens.lua), so the lease always has an expiry (no
   SETNX-then-EXPIRE gap) and every grant gets a larger token. The holder token is 20 fresh
   random bytes, so no other holder can match it.
2. The request times out: the library sends it again with the *same* holder token; if the first
   one had succeeded the script recognises the holder and re-extends instead of refusing it.
3. The caller is cancelled (or interrupted) while the request is in flight: it may have been
   granted, so a shielded release with that holder token runs before the error propagates.
4. The work outlives the lease: ``extend`` resets it; a lease that expired meanwhile is reported
   (``LockNotOwned``/``lost``), never silently re-taken.
5. release: one script compares the holder token and deletes, so an expired holder can never
   delete its successor's lock; it then serves the next waiter: on one master it grants the
   first queued waiter the lock in the same script (wake="one"), else it publishes a wake-up.
6. Meanwhile ``check()`` compares the monotonic clock with the local lease deadline (counted from
   when the request was sent, minus a drift allowance): a holder paused past its lease learns it
   before it can act, even if Redis is unreachable.
7. With ``auto_renew`` the client's watchdog renews the lease; when it cannot, the lock is
   declared lost once, and the business code hears of it: ``on_lost(lock)``, ``lost``,
   ``check()``, and on leaving the block per ``on_lost_policy`` ("raise": LockLost, "ignore":
   carry on, "cancel": asyncio only, the task in the block is cancelled and the block ends with
   LockLost).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from redis.exceptions import ConnectionError, RedisError, ResponseError, TimeoutError

from .._backend import (
    SYNC_AWAITS_CALLBACKS,
    SYNC_CAN_CANCEL,
    SYNC_LAZY_TOKEN,
    SyncEvent,
    SyncStateLock,
    sync_blocking,
    sync_call_scope,
    sync_checkpoint,
    sync_current_task,
    sync_shield,
    sync_sleep,
    sync_spawn,
    sync_uncancel,
)
from .._core.quorum import (
    acquire_outcome,
    node_timeout,
    owned_by_quorum,
    renew_answers,
    retry_jitter,
    tally,
    validity,
)
from .._core.replies import (
    Busy,
    Granted,
    acquire_reply,
    check_replicated,
    new_holder_token,
    new_waiter_id,
    queue_entry,
    release_grant,
    renew_reply,
    reserved_block,
    translate_error,
)
from .._core.timing import (
    handoff_needs_refresh,
    lease_deadline,
    remaining,
    retry_delay,
    yield_after_release,
)
from ..errors import (
    LockConnectionError,
    LockError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotReplicated,
)
from ..keys import (
    MIN_LEASE,
    LockKeys,
    ttl_to_ms,
    validate_name,
    validate_timeout,
    validate_ttl,
)
from ..scripts import (
    ACQUIRE,
    FENCE_RAISE,
    HANDOFF,
    REENTRANT_ACQUIRE,
    REENTRANT_RELEASE,
    RELEASE,
    RENEW,
    Script,
)

if TYPE_CHECKING:
    from .client import LockClient
    from .singleflight import Ticket

logger = logging.getLogger("fencelock")

# A request that timed out, or whose connection broke (a Sentinel failover closes every client
# connection), is sent once more: with the same holder token it cannot count twice (see step 2).
ATTEMPTS: Final = 2
POLICIES: Final = ("raise", "ignore", "cancel")


class _GaveBack(Exception):
    """A grant came back after its lease and was given back. Its holder token must not be used
    again: the give-back (or a copy redis-py re-sent) may reach the server later still, and it
    would delete a grant made later to the same token."""


class _Default:
    pass


_DEFAULT: Final = _Default()


@dataclass(eq=False, slots=True)
class Grant:
    """What this process knows about one grant of the lock."""

    holder: str  # the random holder token stored in Redis
    fence: int  # the fencing token of this grant
    pid: int  # a forked child must not act on its parent's grant
    deadline: float  # monotonic time until which the lease is certainly ours
    depth: int = 1  # hold count of a reentrant lock
    lost: bool = False
    task: Any = None  # the task inside ``async with``, cancelled under on_lost_policy="cancel"
    cancelled: bool = False  # the library cancelled that task because the lease was lost
    in_block: bool = False  # taken by ``with``/``async with``: the block's end releases it
    # Redlock: ``fence`` is safe to hand out only once a majority's counters were raised to it
    confirmed: bool = True
    # local hand-offs: the highest fencing token reserved for this streak (0: none reserved)
    reserved: int = 0


class Lock:
    def __init__(
        self,
        client: LockClient,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        auto_renew: bool = False,
        reentrant: bool = False,
        on_lost: Callable[[Lock], object] | None = None,
        on_lost_policy: str = "raise",
    ) -> None:
        self.name = validate_name(name)
        self.ttl = validate_ttl(ttl, minimum=MIN_LEASE)
        self.timeout = validate_timeout(timeout)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        if not SYNC_AWAITS_CALLBACKS and inspect.iscoroutinefunction(on_lost):
            raise TypeError(
                "on_lost is an async def, which a thread cannot await: pass a plain function "
                "(or use fencelock.asyncio)"
            )
        if on_lost_policy not in POLICIES or (on_lost_policy == "cancel" and not SYNC_CAN_CANCEL):
            allowed = POLICIES if SYNC_CAN_CANCEL else POLICIES[:2]
            raise ValueError(f"on_lost_policy must be one of {allowed}, got {on_lost_policy!r}")
        for arg, flag in (("auto_renew", auto_renew), ("reentrant", reentrant)):
            if not isinstance(flag, bool):
                raise TypeError(f"{arg} must be a bool, not {type(flag).__name__}")
        self.auto_renew = auto_renew
        self.reentrant = reentrant
        self.on_lost = on_lost
        self.on_lost_policy = on_lost_policy
        self._client = client
        self._keys = LockKeys.for_name(self.name, client.prefix)
        # The lock object is the holder, in both APIs: whichever task or thread acquired, any may
        # use the grant and release it (asyncio.Lock, threading.Lock and redis-py's Lock agree).
        self._held: Grant | None = None
        self._guard = SyncStateLock()
        # built once: the uncontended cycle is a hot path
        self._ttl_ms = ttl_to_ms(self.ttl)
        self._acquire_keys = (self._keys.lock, self._keys.fence)
        self._lock_key = (self._keys.lock,)
        # a simple lock's acquire also keeps the queue of waiters woken one at a time
        # (reentrant waiters are always woken all together); a release of either kind serves it
        self._try_keys = (
            self._acquire_keys if reentrant else (*self._acquire_keys, self._keys.queue)
        )
        self._release_keys = (self._keys.lock, self._keys.queue, self._keys.fence)
        self._wake_one = client.wake == "one" and not reentrant
        # wake="one" on one master: a release grants the lock to the first queued waiter itself
        # (no Redlock majority, no replica acknowledgement can be given by one release script)
        self._granted_by_release = self._wake_one and not (client.nodes or client.min_replicas)
        self._acquire_script = REENTRANT_ACQUIRE if reentrant else ACQUIRE
        self._release_script = REENTRANT_RELEASE if reentrant else RELEASE
        # its local queue (singleflight.py): simple and reentrant locks on one name queue apart,
        # a grant of one kind cannot be handed to the other (the key types differ)
        self._line = f"{self._keys.lock}:{'reentrant' if reentrant else 'simple'}"
        # Redlock: how long one node may take to answer a request about this lock
        self._node_timeout = client.node_timeout or node_timeout(self.ttl)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"

    def _grant(self) -> Grant | None:
        grant = self._held
        if grant is not None and grant.pid != os.getpid():
            return None  # the parent's grant, inherited through fork(): not ours
        return grant

    def _owned_grant(self, action: str) -> Grant:
        grant = self._grant()
        if grant is None:
            raise LockNotOwned(f"cannot {action} {self.name!r}: this lock does not hold it")
        return grant

    # -- acquire --------------------------------------------------------------------------

    def acquire(self, timeout: float | _Default | None = _DEFAULT) -> bool:
        """Take the lock. ``timeout``: None waits forever, 0 tries once, > 0 waits that long
        (default: the lock's own timeout). Returns whether the lock was acquired."""
        wait = self.timeout if isinstance(timeout, _Default) else validate_timeout(timeout)
        with sync_call_scope():
            held = self._grant()
            if held is not None:
                if self.reentrant:
                    self._reenter(held)
                    return True
                if not self._is_lost(held):
                    raise LockError(f"{self.name!r} is already held by this lock (not reentrant)")
                if held.in_block:
                    # the block's end must still hear of the loss, and release nothing newer
                    raise LockError(
                        f"{self.name!r}: its lease was lost inside a with block of this lock; "
                        "leave the block first"
                    )
                self._forget(held)  # a lost lease holds nothing: take the name afresh
            return self._take(None if wait is None else time.monotonic() + wait)

    def _take(self, deadline: float | None) -> bool:
        queues, key = self._client._queues, self._line
        ticket = queues.join(key, self, time.monotonic())
        if not ticket.turn:  # another lock object of this client is ahead: wait locally
            handed = self._wait_in_line(ticket, deadline)
            if handed is not None:
                self._install(handed)
                return True
            if not ticket.turn:
                return False
        # The head of the local queue: the one that talks to Redis.
        while True:
            holder = new_holder_token()
            try:
                grant = self._acquire(holder, deadline)
                break
            except _GaveBack:
                if remaining(deadline, time.monotonic()) == 0:
                    grant = None
                    break
                # again, with a new holder token
            except BaseException:
                # Cancelled, interrupted or failed with a request in flight: it may have been
                # granted.
                try:
                    sync_shield(self._release_quietly(holder, deadline))
                finally:
                    queues.pass_turn(key, ticket)
                raise
        if grant is None:
            queues.pass_turn(key, ticket)
            return False
        queues.holding(key, ticket, grant)
        self._install(grant)
        return True

    def _install(self, grant: Grant) -> None:
        self._held = grant
        if self.auto_renew:
            self._client._watchdog.track(self, grant)

    def _forget(self, grant: Grant) -> None:
        """This object no longer holds ``grant`` (released, or lost and taken afresh)."""
        self._held = None
        self._client._watchdog.untrack(grant)
        self._client._queues.pass_turn(self._line, grant)

    def _wait_in_line(self, ticket: Ticket, deadline: float | None) -> Grant | None:
        """Wait in the local queue: a grant handed over, or None (``ticket.turn``: go to Redis
        as the head; else the deadline passed)."""
        queues, key = self._client._queues, self._line
        try:
            while True:
                now = time.monotonic()
                # (a local holder whose lease ran out gives the first in line its turn here)
                left, lease = remaining(deadline, now), queues.holder_gone(key, now)
                waits = [t for t in (left, lease) if t is not None]
                if ticket.event.wait(min(waits) if waits else None):
                    return ticket.grant
                if remaining(deadline, time.monotonic()) != 0:
                    continue  # the local holder's lease ran out, or was renewed meanwhile
                if queues.leave(key, ticket):
                    break  # the lock or the turn reached us just now: take it
                return None  # timed out
        except BaseException:
            if queues.leave(key, ticket):  # it reached us as we were leaving: pass it on
                sync_shield(self._pass_on(ticket))
            raise
        ticket.event.wait(None)  # set by now, or within one request (a hand-off script)
        return ticket.grant

    def _pass_on(self, ticket: Ticket) -> None:
        ticket.event.wait(None)
        if ticket.grant is not None:
            with contextlib.suppress(LockError):
                self._give_up(ticket.grant)
        else:
            self._client._queues.pass_turn(self._line, ticket)

    def _reenter(self, grant: Grant) -> None:
        self.check()
        sent_at = time.monotonic()
        try:
            # one server answers a count that is not ours (LockLost), never "busy", to a
            # re-entry; Redlock answers "busy" when a majority did not let it in
            if isinstance(self._try(grant.holder, grant.depth, deadline=sent_at), Busy):
                raise LockLost(f"{self.name!r}: a majority of nodes refused the re-entry")
        except LockLost:
            self._declare_lost(grant, "re-entry found the hold count changed")
            raise
        except NotReplicated:
            sync_shield(self._release_once(grant.holder))  # take the extra hold back
            raise
        grant.depth += 1
        grant.deadline = lease_deadline(sent_at, self.ttl)

    def _acquire(self, holder: str, deadline: float | None) -> Grant | None:
        client = self._client
        sent_at = time.monotonic()
        polite = client._queues.take_yield(self._line, sent_at)
        if polite is not None and remaining(deadline, sent_at) != 0:
            # this client's last release woke another client (let it take its turn first) or
            # granted it the lock: a try now would find the lock busy
            result: Granted | Busy = Busy(None)
        else:
            result = self._try(holder, block=self._block(), deadline=deadline)
        if isinstance(result, Busy) and remaining(deadline, time.monotonic()) != 0:
            # wake="one": queued in Redis by the re-tries below, woken on a channel of its own
            waiter = new_waiter_id() if self._wake_one else ""
            channel = self._keys.channel + ":" + waiter if waiter else self._keys.channel
            block = self._block()  # fixed: a grant by a release reserves what the entry says
            entry = waiter
            if self._granted_by_release:
                entry = queue_entry(waiter, holder, self._ttl_ms, block)
            # (confirmed within the call's bound: its deadline plus one request timeout)
            with client.watch(channel, self._time_left(deadline)) as wake:
                try:
                    if polite:
                        left = remaining(deadline, time.monotonic())
                        client.wait(wake, polite if left is None else min(polite, left))
                    result = self._wait_for_grant(holder, block, entry, wake, deadline)
                finally:
                    if isinstance(result, Busy) and entry:
                        # timed out, cancelled or failed: leave the queue, and give back what
                        # a release may have granted meanwhile
                        sync_shield(self._leave_queue(holder, entry, deadline))
        if isinstance(result, Busy):
            return None
        # a request re-sent after a timeout was granted later than the first one left
        deadline = lease_deadline(result.sent_at or sent_at, self.ttl)
        return Grant(
            holder,
            result.fence,
            os.getpid(),
            deadline,
            confirmed=result.confirmed,
            reserved=result.reserved,
        )

    def _wait_for_grant(
        self, holder: str, block: int, entry: str, wake: SyncEvent, deadline: float | None
    ) -> Granted | Busy:
        """Re-try whenever woken (or when the holder's lease ends) until granted or the
        deadline passes. With wake="one" each re-try keeps this waiter's place in the queue, and
        on one master the release itself may grant the lock: the message then carries the token.

        The lease of such a grant is counted from when the last re-try that found this waiter's
        entry still queued was sent: the grant came after that re-try ran. A grant that leaves
        less than half the ttl is confirmed by one more re-try (it re-extends the lease)."""
        client = self._client
        result: Granted | Busy = Busy(None)
        while True:
            left = remaining(deadline, time.monotonic())
            if left == 0:
                return result
            # Subscribed (and confirmed) before this re-try: a release after it wakes us.
            wake.clear()
            sent_at = time.monotonic()
            result = self._try(holder, block=block, waiter=entry, deadline=deadline)
            if isinstance(result, Granted):  # its lease runs from its own request (_try)
                return result
            queued, queued_at = result.queued, sent_at
            if client.nodes:
                # Redlock: contenders that split the nodes must not collide again
                sync_sleep(retry_jitter(client.max_poll))
            left = remaining(deadline, time.monotonic())
            client.wait(wake, retry_delay(result.pttl, left, client.max_poll, self.ttl))
            message, wake.grant = wake.grant, None
            granted = release_grant(message, queued, block)
            # with less than half the ttl left, the next re-try finds the lock ours and
            # re-extends it instead
            if (
                granted is not None
                and lease_deadline(queued_at, self.ttl) - time.monotonic() >= self.ttl / 2
            ):
                return replace(granted, sent_at=queued_at)

    def _leave_queue(self, holder: str, entry: str, deadline: float | None = None) -> None:
        """A waiter that gives up leaves the queue of wake="one" (best effort: a release skips
        an entry nobody listens for, and the queue expires): a release with the waiter's token,
        which gives back what a release may have granted it meanwhile, and passes on a wake-up
        it got but will not use (release.lua). Within what is left of the acquire's bound
        (``deadline`` plus one request timeout)."""
        with contextlib.suppress(RedisError, LockError):
            self._release_once(holder, entry, self._time_left(deadline))

    def _block(self) -> int:
        """Fencing tokens to reserve with a grant: one, or enough for a streak of local
        hand-offs when waiters of this client are queued already (singleflight.py)."""
        if self._client.nodes or self._client.min_replicas:
            return 1
        return 1 + self._client._queues.handoffs_ahead(self._line)

    def _try(
        self,
        holder: str,
        depth: int = 0,
        block: int = 1,
        waiter: str = "",
        *,
        deadline: float | None = None,
    ) -> Granted | Busy:
        """One try at the lock. A request that timed out or whose connection broke is sent once
        more, in the time left: the try ends by the caller's ``deadline`` (None: none) plus one
        request timeout, however often the server fails to answer."""
        args: tuple[str | int, ...] = (holder, self._ttl_ms)
        if self.reentrant:
            args += (depth, block)
        else:
            args += (block, waiter)
        if self._client.nodes:
            return self._try_quorum(holder, depth, args, deadline)
        limit = self._client.request_timeout
        end = None if deadline is None else max(deadline, time.monotonic()) + limit
        for attempt in range(1, ATTEMPTS + 1):
            try:
                sent_at = time.monotonic()
                bound = limit if end is None else min(limit, end - sent_at)
                reply, acked = self._client.run_replicated(
                    self._acquire_script, self._try_keys, args, bound
                )
                sync_checkpoint()
                result = acquire_reply(reply)
                if isinstance(result, Granted):
                    check_replicated(acked, self._client.min_replicas, f"grant of {self.name!r}")
                    if depth == 0 and lease_deadline(sent_at, self.ttl) <= time.monotonic():
                        # The reply came back after the lease's local deadline: the lease may
                        # be someone else's by now. Give it back; acquire tries again.
                        sync_shield(self._release_quietly(holder, deadline))
                        raise _GaveBack
                    return replace(reserved_block(result.fence, block), sent_at=sent_at)
                return result
            except (TimeoutError, ConnectionError) as exc:
                if attempt == ATTEMPTS or (end is not None and time.monotonic() >= end):
                    raise translate_error(exc, self._keys.lock) from exc
            except RedisError as exc:
                raise translate_error(exc, self._keys.lock) from exc
        raise AssertionError("unreachable")

    def _try_quorum(
        self, holder: str, depth: int, args: tuple[str | int, ...], deadline: float | None
    ) -> Granted | Busy:
        """Redlock: ask every node at once; a majority within the validity grants. A round in
        which too few nodes could be reached to decide is no vote: it is sent once more while
        the caller's ``deadline`` has time left."""
        for attempt in range(1, ATTEMPTS + 1):
            sent_at = time.monotonic()
            replies = self._fan_out(self._acquire_script, self._try_keys, args)
            sync_checkpoint()
            try:
                outcome = acquire_outcome(replies, self.ttl, time.monotonic() - sent_at)
                break
            except LockConnectionError:
                if attempt == ATTEMPTS or remaining(deadline, time.monotonic()) == 0:
                    raise
        result = outcome.result
        if isinstance(result, Granted) and depth == 0 and not SYNC_LAZY_TOKEN:
            # asyncio cannot do the write-back later, inside the ``token`` property
            try:
                confirmed = self._raise_fence(holder, result.fence)
            except LockConnectionError:
                confirmed = False
            result = Granted(result.fence) if confirmed else Busy(None)
        if isinstance(result, Busy):
            if depth == 0 and outcome.touched:
                # some nodes may have granted (or still will): give it back on all of them
                sync_shield(self._release_quietly(holder))
            return result
        return replace(result, sent_at=sent_at)  # the lease runs from this round

    def _fan_out(self, script: Script, keys: tuple[str, ...], args: Any) -> list[Any]:
        return self._client.fan_out_script(script, keys, args, self._node_timeout)

    def _raise_fence(self, holder: str, fence: int) -> bool:
        """Redlock fencing: raise a majority's counters to ``fence`` (see fence_raise.lua).
        False when a majority no longer holds the grant; LockConnectionError when unknown."""
        replies = self._fan_out(FENCE_RAISE, self._acquire_keys, (holder, fence))
        return owned_by_quorum(replies, (1,), f"token of {self.name!r}")

    def _confirm_token(self, grant: Grant) -> int:
        if not self._is_lost(grant):
            # the lease must still be ours once the write-back is done, not only before
            if self._raise_fence(grant.holder, grant.fence) and not self._is_lost(grant):
                grant.confirmed = True
                return grant.fence
            self._declare_lost(grant, "a majority no longer held it when its token was read")
        # a later grant may have been computed without this token: it must never be used
        raise LockLost(f"{self.name!r}: the lease was lost before its fencing token was read")

    def _time_left(self, deadline: float | None) -> float:
        """What is left of the bound of a call whose ``deadline`` (None: none) has passed or is
        near: that deadline plus one request timeout, and at most one request timeout."""
        limit = self._client.request_timeout
        return limit if deadline is None else min(limit, deadline + limit - time.monotonic())

    def _release_quietly(self, holder: str, deadline: float | None = None) -> bool:
        """Give back what ``holder`` may have been granted, best effort, within what is left of
        the bound of the call whose ``deadline`` (None: none) it serves: that deadline plus one
        request timeout. No time left (the server did not answer for all that): not sent, and
        the lease expires on its own."""
        try:
            return self._release_once(holder, timeout=self._time_left(deadline)) in (1, 3, 4)
        except (RedisError, LockError):
            return False  # the server is unreachable: the lease expires on its own

    # -- release / extend ------------------------------------------------------------------

    def _release_once(
        self, holder: str, leaving: str = "", timeout: float | None = None
    ) -> int:
        """1: released, 3: released and another client was woken, 4: released and granted to a
        queued waiter, 2: a reentrant hold left but still held, 0: not held by ``holder``.
        ``leaving``: a queue entry removed first (a simple lock's waiter giving up). Within
        ``timeout`` seconds (default: one request timeout; Redlock: the node timeout)."""
        args: tuple[str, ...] = (holder, self._keys.channel, self._client.publish_command)
        if not self.reentrant:
            args += (leaving,)
        if self._client.nodes:
            replies = self._fan_out(self._release_script, self._release_keys, args)
            return int(owned_by_quorum(replies, (1, 2, 3, 4), f"release of {self.name!r}"))
        try:
            reply = self._client.run(self._release_script, self._release_keys, args, timeout)
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc
        return int(reply)

    def release(self) -> None:
        """Give the lock up (a reentrant lock: leave one hold). Raises ``LockNotOwned``
        (deleting nothing) if this lock does not hold it, ``LockLost`` if its lease expired."""
        grant = self._owned_grant("release")
        with sync_call_scope():
            if grant.depth > 1:
                grant.depth -= 1
                if sync_shield(self._release_once(grant.holder)) == 0:
                    self._declare_lost(grant, "found gone at release")
                    raise LockLost(f"{self.name!r} was no longer held: its lease had expired")
                return
            # Forget the grant first: whatever happens below, this object no longer holds it.
            self._held = None
            self._client._watchdog.untrack(grant)
            self._give_up(grant)

    def _give_up(self, grant: Grant) -> None:
        """Release ``grant``: hand it to the next local waiter if there is one, else in Redis."""
        queues, key = self._client._queues, self._line
        ticket = None
        if not (grant.lost or self._client.nodes or self._client.min_replicas):
            ticket = queues.next_for_handoff(key, grant)
        if ticket is not None:
            to = ticket.lock
            left = grant.deadline - time.monotonic()
            if grant.fence < grant.reserved and not handoff_needs_refresh(left, to.ttl):
                # the next token of the reserved block, the same lease: no request at all
                handed = replace(grant, fence=grant.fence + 1, lost=False, task=None)
                queues.hand(key, ticket, handed)
                return
            # the script and the bookkeeping after it must both happen, whatever the caller does
            if sync_shield(self._hand_to(grant, ticket)):
                return
        else:
            sent_at = time.monotonic()
            try:
                released = self._release_once(grant.holder)
                while released == 2:
                    # The server counts more holds than this lock did: a re-entry applied whose
                    # reply was lost (LockConnectionError). They are all this lock's: leave them.
                    released = self._release_once(grant.holder)
                sync_checkpoint()  # a cancellation redis.asyncio swallowed
            except LockError:
                raise
            except BaseException:
                # Cancelled or interrupted with the request in flight: make sure it happened
                # (a compare-and-delete with our own holder token is safe to repeat).
                sync_shield(self._release_quietly(grant.holder))
                raise
            finally:
                queues.pass_turn(key, grant)
            now = time.monotonic()
            if released == 3:  # someone elsewhere was woken: let them have the next turn
                queues.yield_to_others(key, now + yield_after_release(now - sent_at), True)
            elif released == 4:  # granted to someone elsewhere: busy for their hold, at most
                # about a ttl (their lock on this name is likely configured like this one)
                queues.yield_to_others(key, now + self.ttl, False)
            if released != 0:
                return
        raise LockLost(f"{self.name!r} was no longer held when released: its lease had expired")

    def _hand_to(self, grant: Grant, ticket: Ticket) -> bool:
        """Hand ``grant`` to ``ticket``; False if it was no longer ours (the ticket then goes to
        Redis as the head)."""
        queues = self._client._queues
        try:
            handed = self._hand_off(grant, ticket.lock)
        except BaseException:
            queues.give_turn(ticket)
            raise
        if handed is None:
            queues.give_turn(ticket)
            return False
        queues.hand(self._line, ticket, handed)
        return True

    def _hand_off(self, grant: Grant, to: Lock) -> Grant | None:
        """One script: the lease restarts at ``to``'s ttl, and a block of fencing tokens is
        reserved for this streak of hand-offs (the first is ``to``'s). None if ``grant`` no
        longer held the lock."""
        block = self._client._queues.max_handoffs
        sent_at = time.monotonic()
        args = (grant.holder, to._ttl_ms, block)
        try:
            reply = self._client.run(HANDOFF, self._acquire_keys, args)
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc
        result = acquire_reply(reply)
        if isinstance(result, Busy):
            return None
        deadline = lease_deadline(sent_at, to.ttl)
        handed = reserved_block(result.fence, block)
        return Grant(grant.holder, handed.fence, os.getpid(), deadline, reserved=handed.reserved)

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining lease to ``ttl`` seconds (default: the lock's ttl)."""
        new_ttl = self.ttl if ttl is None else validate_ttl(ttl, minimum=MIN_LEASE)
        grant = self._owned_grant("extend")
        sent_at = time.monotonic()
        args = (grant.holder, ttl_to_ms(new_ttl))
        if self._client.nodes:
            replies = self._fan_out(RENEW, self._lock_key, args)
            held = tally(renew_answers(replies, 1)[0]).outcome(
                len(replies), f"extend {self.name!r}"
            )
            if held and validity(new_ttl, time.monotonic() - sent_at) <= 0:
                raise LockConnectionError(f"extend {self.name!r}: the nodes answered too late")
            reply, acked = [int(held)], None
        else:
            try:
                reply, acked = self._client.run_replicated(RENEW, self._lock_key, args)
            except RedisError as exc:
                raise translate_error(exc, self._keys.lock) from exc
        if not renew_reply(reply, 1)[0]:
            self._declare_lost(grant, "found gone at extend")
            raise LockLost(f"cannot extend {self.name!r}: its lease had already expired")
        # an extension the replicas did not confirm could be undone by a failover
        check_replicated(acked, self._client.min_replicas, f"extension of {self.name!r}")
        grant.deadline = lease_deadline(sent_at, new_ttl)

    # -- loss --------------------------------------------------------------------------------

    def _declare_lost(self, grant: Grant, reason: str) -> None:
        """Mark ``grant`` lost and signal it, once (from the watchdog or from the caller)."""
        with self._guard:
            if grant.lost:
                return
            grant.lost = True
        self._client._watchdog.untrack(grant)
        logger.warning("fencelock: lock %r lost: %s", self.name, reason)
        if self.on_lost is not None:
            try:
                outcome = self.on_lost(self)
                if inspect.isawaitable(outcome):  # an async def: awaited in a task of its own
                    sync_spawn(outcome, f"on_lost callback of {self.name!r}")
            except Exception:
                logger.exception("fencelock: on_lost callback of %r raised", self.name)
        # Not the task that is declaring it (its check(), or the release at the block's end):
        # that one raises LockLost now, and a cancellation of itself would stay pending (before
        # Python 3.13 Task.uncancel() does not withdraw it) and land in whatever it awaits next.
        task = grant.task
        if (
            self.on_lost_policy == "cancel"
            and task is not None
            and task is not sync_current_task()
        ):
            grant.cancelled = True
            task.cancel()

    # -- state -----------------------------------------------------------------------------

    def held(self) -> bool:
        """Whether this lock holds the lease and may rely on it: asks the server, and is False
        once the lease is lost or has run out by the local deadline, whatever the server still
        shows."""
        grant = self._grant()
        if grant is None or self._is_lost(grant):
            return False
        if self._client.nodes:
            ok = self._held_by_quorum(grant)
        else:
            ok = self._held_by_server(grant)
        if not ok:
            self._declare_lost(grant, "found gone by held()")
        return ok and not self._is_lost(grant)  # the deadline may have passed meanwhile

    def _held_by_quorum(self, grant: Grant) -> bool:
        key, holder = self._keys.lock, grant.holder
        command = ("HEXISTS", key, holder) if self.reentrant else ("GET", key)
        replies = self._client.fan_out(command, self._node_timeout, key)
        answers: list[bool | BaseException] = []
        for r in replies:
            if not isinstance(r, BaseException):
                answers.append(r in (1, holder, holder.encode()))
            else:  # WRONGTYPE: a lock of the other kind holds the name on that node, not ours
                answers.append(False if "WRONGTYPE" in str(r) else r)
        return tally(answers).outcome(len(replies), f"held {self.name!r}")

    def _held_by_server(self, grant: Grant) -> bool:
        key = self._keys.lock
        command = ("HEXISTS", key, grant.holder) if self.reentrant else ("GET", key)
        # a read is safe to send again, within one request timeout in all
        end = time.monotonic() + self._client.request_timeout
        for attempt in range(1, ATTEMPTS + 1):
            try:
                [reply] = self._client.request([command], end, key)
                if isinstance(reply, RedisError):
                    raise reply
                # (a Cluster request goes through the user's client, which may decode)
                return reply in (1, grant.holder, grant.holder.encode())
            except (TimeoutError, ConnectionError) as exc:
                if attempt == ATTEMPTS or time.monotonic() >= end:
                    raise translate_error(exc, key) from exc
            except ResponseError as exc:
                if "WRONGTYPE" in str(exc):
                    return False  # a lock of the other kind holds the name now
                raise translate_error(exc, key) from exc
            except RedisError as exc:
                raise translate_error(exc, key) from exc
        raise AssertionError("unreachable")

    @property
    def token(self) -> int:
        """The fencing token of the current grant (kept after the lease is lost, until release).

        Redlock: the first read raises a majority's counters to the token (one round trip), so
        that every later grant gets a larger one; ``LockLost`` if the lease is gone by then."""
        grant = self._owned_grant("read the token of")
        if not grant.confirmed:
            return sync_blocking(self._confirm_token, grant)
        return grant.fence

    def _is_lost(self, grant: Grant) -> bool:
        if not grant.lost and time.monotonic() >= grant.deadline:
            self._declare_lost(grant, "its lease ran out (local deadline)")
        return grant.lost

    @property
    def lost(self) -> bool:
        """True once this process knows, or must assume, that the lease is gone."""
        grant = self._grant()
        return grant is not None and self._is_lost(grant)

    def check(self) -> None:
        """Return if the lease is still certainly held, else raise ``LockLost`` (``LockNotOwned``
        if this lock never held it). Local and instant: no request to the server."""
        if self._is_lost(self._owned_grant("check")):
            raise LockLost(f"{self.name!r}: the lease is lost (expired or taken over)")

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockTimeout(f"{self.name!r} not acquired within {self.timeout} s")
        grant = self._grant()
        if grant is not None and grant.depth == 1:
            grant.task = sync_current_task()
            grant.in_block = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        grant = self._grant()
        if grant is None:
            return  # released inside the block
        by_us = grant.cancelled and grant.depth == 1
        if by_us:
            sync_uncancel(grant.task)  # our cancellation becomes LockLost below
        loss: LockNotOwned | None = None
        try:
            self.release()
        except LockNotOwned as error:
            loss = error
        except LockError:
            if not grant.lost:
                raise
            # the server could not be reached to release: the loss is what the block must hear
        if loss is None and grant.lost:
            loss = LockLost(f"{self.name!r}: the lease was lost while the block ran")
        if loss is None or self.on_lost_policy == "ignore":
            return
        if exc is None or by_us:
            raise loss from exc
        # The body's own error is the one to see; the loss rides along as a note.
        exc.add_note(f"fencelock: {loss}")
