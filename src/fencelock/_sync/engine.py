# GENERATED from src/fencelock/_async/engine.py by tools/gen_sync.py: edit that file instead.
"""The lease engine: the lifecycle of a grant, written once for every primitive.

Every primitive object (a lock, a semaphore, a side of a read-write lock, a candidate of an
election, a member of a multi-lock, a latch's participant) *holds* one ``AsyncLease`` and
delegates to it; what differs between them is a kind (``_core/kinds.py``: keys, scripts,
replies), never an override. The engine takes a grant (``contention.py``: the local queue, the
head-of-line try, the pub/sub wait), hands it on or gives it back (``handoff.py``), has the
client's watchdog renew it, and signals its loss once: ``on_lost``, ``lost``, ``check()``, the
``with`` block's exit policy, the metrics and the log.

Failure timeline of a lease, and what each step guards against:

1. acquire: one script takes the grant with a TTL and hands out the next fencing token, so the
   lease always has an expiry and every grant gets a larger token. The holder token is 20 fresh
   random bytes, so no other holder can match it.
2. The request times out: it is sent again with the *same* holder token; if the first one had
   succeeded the script recognises the holder and re-extends instead of refusing it.
3. The caller is cancelled (or interrupted) while the request is in flight: it may have been
   granted, so a shielded release with that holder token runs before the error propagates.
4. The work outlives the lease: ``extend`` resets it; a lease that expired meanwhile is reported
   (``LockNotOwned``/``lost``), never silently re-taken.
5. release: one script compares the holder token and deletes, so an expired holder can never
   delete its successor's grant; it then serves the next waiter (on one master it grants the
   first queued waiter in the same script), else it publishes a wake-up.
6. Meanwhile ``check()`` compares the monotonic clock with the local lease deadline (counted from
   when the request was sent, minus a drift allowance): a holder paused past its lease learns it
   before it can act, even if Redis is unreachable.
7. With ``auto_renew`` the client's watchdog renews the lease; when it cannot, the grant is
   declared lost once, and the business code hears of it: ``on_lost(obj)``, ``lost``,
   ``check()``, and on leaving the block per ``on_lost_policy`` ("raise": LockLost, "ignore":
   carry on, "cancel": asyncio only, the task in the block is cancelled and the block ends with
   LockLost).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import os
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _events as events
from .._backend import (
    SyncStateLock,
    sync_blocking,
    sync_call_scope,
    sync_current_task,
    sync_public_name,
    sync_shield,
    sync_spawn,
    sync_watchdog,
)
from .._core.inspection import NodeView
from .._core.kinds import Kind, LeaseSpec, Released
from .._core.lease import EXPLAINED, Grant, Words, loss_reason, should_cancel
from .._core.options import DEFAULT, ClientOptions, LeaseOptions
from .._core.replies import RENEWED, TAKEN
from .._core.stats import Counters
from .._keys import MIN_LEASE, validate_ttl
from .._scripts import Script
from ..errors import ClientClosed, LockError, LockLost, LockNotOwned
from . import contention, handoff
from .grants import SyncGrants
from .singleflight import LocalQueues
from .topology import SyncTopology
from .waiter import Watch
from .watchdog import SyncRenewer

logger = logging.getLogger("fencelock.lease")

MAX_SPECS = 1024  # names whose specs a client keeps made
_objects = itertools.count()  # the objects that queue alone: each line's own number


class ClientState:
    """Whether the client is closed: every call of its objects asks first, and refuses."""

    __slots__ = ("closed", "what")

    def __init__(self, what: str) -> None:
        self.closed = False
        self.what = what  # the client, as the docs name it, for the error

    def check(self) -> None:
        if self.closed:
            raise ClientClosed(f"this {self.what} is closed: make a new client")


@dataclass(frozen=True, slots=True)
class Wiring:
    """What the primitive objects of one client share, handed to each by the client."""

    topology: SyncTopology
    grants: SyncGrants  # the engine's questions about a grant
    queues: LocalQueues
    watchdog: SyncRenewer
    counters: Counters
    state: ClientState
    guard: Any  # held to mark a grant lost: the watchdog and the caller may race (no I/O)
    prefix: str
    wake_one: bool  # wake="one": waiters queue in Redis and a release wakes the first
    max_poll: float | None
    label: Any = None  # the client's holder label (labels.py)
    # The client: every object it made keeps it alive, as a redis-py Lock keeps its client (it
    # is closed by its finalizer once none is left; nothing in the background refers to this).
    client: object = None
    # the specs of the names in use: an object made per call (``with client.lock(name)``)
    # finds its keys and arguments made already
    specs: dict[tuple[Any, ...], LeaseSpec] = field(default_factory=dict)

    @classmethod
    def made(
        cls, topology: SyncTopology, options: ClientOptions, counters: Counters, client: object
    ) -> Wiring:
        """The wiring of a new ``client``."""
        return cls(
            topology,
            topology.grants,
            LocalQueues(options.max_handoffs, counters),
            sync_watchdog(topology, counters),
            counters,
            ClientState(sync_public_name(client)),
            SyncStateLock(),
            options.prefix,
            options.wake == "one",
            options.max_poll,
            options.label,
            client,
        )

    def spec(self, kind: Kind, options: LeaseOptions, words: Words) -> LeaseSpec:
        """The spec of an object of ``kind``, spoken of in ``words``."""
        key = (kind, options.name, options.ttl, words)
        spec = self.specs.get(key)
        if spec is None:
            if len(self.specs) >= MAX_SPECS:
                self.specs.clear()  # names used once: start afresh
            spec = LeaseSpec.of(kind, options.name, self.prefix, options.ttl, words)
            self.specs[key] = spec
        return spec


def fits_one_lease(wiring: Wiring, kind: Kind, keys: Sequence[str]) -> bool:
    """Whether one grant of ``kind`` can hold ``keys``: the client's servers can make it, and
    one script call reaches every key (on a Cluster: one slot)."""
    traits = wiring.topology.traits
    return traits.supports(kind) and traits.one_call(keys)


def run_script(
    wiring: Wiring, script: Script, keys: Sequence[str], args: Sequence[Any], what: str
) -> Any:
    """``script`` on the server of ``keys``, within one request timeout, for ``what`` (an
    object, or a call without one: its failure is the ``LockError`` of ``what``); refused once
    the client is closed. The door of a call that holds no lease (``AsyncLease.run``'s too)."""
    wiring.state.check()
    return wiring.topology.run(script, keys, args, what)


def clean_up(wiring: Wiring, aw: Any, error: BaseException) -> None:
    """Finish ``aw`` (a coroutine: a give-back, a release) after ``error``: in the background
    when the caller was cancelled (``AsyncDetached``; in a thread it has run already)."""
    wiring.grants.detached.clean_up(aw, error)


def refuse_unmade(wiring: Wiring, kind: Kind, words: Words, name: str) -> None:
    """Raise if an object of ``kind`` cannot be made now: the client is closed, its topology
    cannot grant that kind, or it needs scripts where none runs."""
    wiring.state.check()
    topology = wiring.topology
    if not topology.traits.supports(kind):
        raise TypeError(
            f"a {words.noun} needs one master or a Cluster: Redlock is for the lock and the "
            "election only (docs/modes.md says why)"
        )
    topology.protocol.require_kind(kind, kind.describe(words.noun, name))


class Lease:
    """One primitive object's grant and its lifecycle (see the module's docstring). ``owner``,
    the primitive object, is held weakly: it is what ``on_lost`` is called with. ``alone``: the
    object queues alone (a candidate of an election; always, for a kind whose grants are not
    handed on between objects): its local queue holds only its own acquires."""

    __slots__ = ("__weakref__", "_held", "_owner", "line", "options", "spec", "wiring")

    def __init__(
        self,
        owner: object,
        wiring: Wiring,
        options: LeaseOptions,
        spec: LeaseSpec,
        *,
        alone: bool = False,
    ) -> None:
        refuse_unmade(wiring, spec.kind, spec.words, spec.name)
        self.wiring = wiring
        self.options = options
        self.spec = spec
        # its local queue (singleflight.py), for as long as it lives, whatever kind it takes
        alone = alone or not spec.kind.local_handoff
        self.line = f"{spec.line}:{next(_objects)}" if alone else spec.line
        self._owner = weakref.ref(owner)
        # The object is the holder, in both APIs: whichever task or thread acquired, any may
        # use the grant and release it (asyncio.Lock, threading.Lock and redis-py's Lock agree).
        self._held: Grant | None = None

    @property
    def name(self) -> str:
        return self.options.name

    def what(self) -> str:
        """The object in messages: its kind and the name the user gave, never a Redis key."""
        return self.spec.what

    def use_kind(self, kind: Kind) -> None:
        """Take other permits (or sides) from now on: only while nothing is held."""
        if kind is not self.spec.kind and kind != self.spec.kind:
            self.spec = self.spec.with_kind(kind)

    def grant(self) -> Grant | None:
        """The grant this object holds (None: none, or the parent's, inherited through fork)."""
        grant = self._held
        if grant is not None and grant.pid != os.getpid():
            return None
        return grant

    def owned_grant(self, action: str) -> Grant:
        """The grant this object holds, to ``action`` (the user's call, as its docs say it);
        ``LockNotOwned`` if it holds none."""
        self.wiring.state.check()
        grant = self.grant()
        if grant is None:
            holding = self.spec.words.holding
            raise LockNotOwned(f"cannot {action} {self.what()}: it is not {holding}")
        return grant

    # -- acquire --------------------------------------------------------------------------

    def acquire(self, timeout: object = DEFAULT) -> bool:
        """Take the grant. ``timeout``: None waits forever, 0 tries once, > 0 waits that long
        (DEFAULT: the object's own). Returns whether it was granted."""
        wait = self.options.wait(timeout)
        self.wiring.state.check()
        with sync_call_scope():
            held = self.grant()
            if held is not None:
                if self.spec.kind.reentrant:
                    contention.reenter(self, held)
                    return True
                words = self.spec.words
                if not self.is_lost(held):
                    raise LockError(
                        f"{self.what()} is already {words.holding}: {words.release}() first to "
                        f"{words.acquire} again"
                    )
                if held.in_block:
                    # the block's end must still hear of the loss, and release nothing newer
                    raise LockError(
                        f"{self.what()}: its lease was lost inside a with block of this "
                        f"{words.noun}; leave the block first"
                    )
                self.forget(held)  # a lost lease holds nothing: take the name afresh
                if events.on:
                    self._hold_ended(held, time.monotonic())
            started = time.monotonic()
            deadline = None if wait is None else started + wait
            try:
                grant = contention.take(self, deadline)
            except BaseException as exc:
                if events.on:
                    self._acquire_ended(events.ERROR, started, error=exc)
                raise
            if grant is None:
                if events.on:
                    self._acquire_ended(events.TIMEOUT, started)
                return False
            self.install(grant)
            if events.on:
                grant.timed_from(self._acquire_ended(events.GRANTED, started, grant))
            return True

    def _acquire_ended(
        self,
        outcome: str,
        started: float,
        grant: Grant | None = None,
        error: BaseException | None = None,
    ) -> float:
        now = time.monotonic()
        token = None if grant is None else grant.fence
        event = events.AcquireEnded(
            self.spec.primitive, self.name, outcome, now - started, token, grant, error
        )
        events.emit(event)
        return now

    def install(self, grant: Grant) -> None:
        """This object holds ``grant`` now (taken, or handed over locally)."""
        self._held = grant
        self.wiring.counters.add(held=1, acquired=1)
        if self.options.auto_renew:
            self.wiring.watchdog.track(grant, self.spec, self.declare_lost)

    def forget(self, grant: Grant) -> None:
        """This object no longer holds ``grant`` (given up, or lost and taken afresh); the
        caller then reports the hold's end (``_hold_ended``)."""
        self._held = None
        self.wiring.counters.add(held=-1)
        self.wiring.watchdog.untrack(grant)

    def _hold_ended(self, grant: Grant, ended: float) -> None:
        if grant.since:  # (0: taken while nobody listened)
            primitive, seconds = self.spec.primitive, ended - grant.since
            events.emit(events.HoldEnded(primitive, self.name, seconds, grant.fence, grant))

    # -- release / extend ------------------------------------------------------------------

    def release(self) -> None:
        """Give the grant up (reentrant: leave one hold). ``LockNotOwned`` (deleting nothing)
        if this object does not hold it, ``LockLost`` if its lease expired."""
        words = self.spec.words
        grant = self.owned_grant(words.release)
        with sync_call_scope():
            if grant.depth > 1:
                depth = grant.depth
                grant.left_once()
                grants = self.wiring.grants
                leave = grants.release(
                    self.spec, grant.holder, depth=depth, held_until=grant.held_until
                )
                released = sync_shield(leave)
                if released == Released.NOT_HELD:
                    why = self.declare_lost(grant, "at release")
                    raise LockLost(f"{self.what()} was no longer held: {EXPLAINED[why]}")
                return
            # Forget the grant first: whatever happens below, this object no longer holds it.
            self.forget(grant)
            given_up = time.monotonic() if events.on else 0.0
            try:
                if not handoff.give_up(self, grant):
                    # found gone: a loss like any other (counted, logged and signalled once)
                    why = self.declare_lost(grant, "at release")
                    raise LockLost(
                        f"{self.what()} was no longer {words.holding} at {words.release}(): "
                        f"{EXPLAINED[why]}"
                    )
            finally:
                if given_up:  # after the loss the release found, if any
                    self._hold_ended(grant, given_up)

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining lease to ``ttl`` seconds (default: the object's ttl)."""
        new_ttl = self.options.ttl if ttl is None else validate_ttl(ttl, minimum=MIN_LEASE)
        grant = self.owned_grant("extend")
        sent_at = time.monotonic()
        grants = self.wiring.grants
        [held] = grants.renew(
            [self.spec], [grant.holder], [new_ttl], grants.request_timeout, self.what()
        )
        if isinstance(held, LockError):
            raise held
        if held != RENEWED:
            why = self.declare_lost(grant, "at extend", other_holder=held == TAKEN)
            raise LockLost(f"cannot extend {self.what()}: {EXPLAINED[why]}")
        grant.renewed(sent_at, new_ttl)

    # -- loss --------------------------------------------------------------------------------

    def declare_lost(self, grant: Grant, found: str, *, other_holder: bool = False) -> str:
        """Mark ``grant`` lost and signal it, once (from the watchdog or from the caller);
        ``found`` says how it was found, ``other_holder`` whether the server showed another
        holder. Returns why it is lost (one of ``LOSS_REASONS``, for LockLost's message): the
        reason found first, if it was declared already."""
        reason = loss_reason(grant, time.monotonic(), other_holder=other_holder)
        with self.wiring.guard:
            if not grant.mark_lost(reason):
                return grant.loss
        self.wiring.counters.add(losses=1)
        self.wiring.watchdog.untrack(grant)
        if events.on:
            lost = events.LeaseLost(self.spec.primitive, self.name, grant.fence, reason, grant)
            events.emit(lost)
        logger.warning(
            "fencelock: %s lost (token %d): %s, found %s",
            self.what(),
            grant.fence,
            reason,
            found,
            extra={
                "event": "lease_lost",
                "lock_name": self.name,
                "token": grant.fence,
                "reason": reason,
            },
        )
        owner = self._owner()
        on_lost = self.options.on_lost
        if on_lost is not None and owner is not None:
            try:
                outcome = on_lost(owner)
                if inspect.isawaitable(outcome):  # an async def: awaited in a task of its own
                    sync_spawn(outcome, f"on_lost callback of {self.what()}")
            except Exception:
                logger.exception("fencelock: on_lost callback of %s raised", self.what())
        if should_cancel(self.options.on_lost_policy, grant.task, sync_current_task()):
            grant.cancel_task()
        return reason

    # -- state -----------------------------------------------------------------------------

    def held(self) -> bool:
        """Whether this object holds the lease and may rely on it: asks the server, and is
        False once the lease is lost or has run out by the local deadline."""
        self.wiring.state.check()
        grant = self.grant()
        if grant is None or self.is_lost(grant):
            return False
        ok = self.wiring.grants.held(self.spec, grant.holder)
        if not ok:
            self.declare_lost(grant, "by held()")
        return ok and not self.is_lost(grant)  # the deadline may have passed meanwhile

    def token(self) -> int:
        """The fencing token of the current grant (kept after the lease is lost, until release).

        Redlock, where the nodes granted different tokens: the first read raises a majority's
        counters to the token (one round trip), so that every later grant gets a larger one;
        ``LockLost`` if the lease is gone by then."""
        grant = self.owned_grant("read the token of")
        if not grant.confirmed:
            return sync_blocking(self._confirm_token, grant)
        return grant.fence

    def _confirm_token(self, grant: Grant) -> int:
        if not self.is_lost(grant):
            # the lease must still be ours once the write-back is done, not only before
            grants = self.wiring.grants
            confirmed = grants.confirm(self.spec, grant.holder, grant.fence)
            if confirmed and not self.is_lost(grant):
                grant.confirm()
                return grant.fence
            self.declare_lost(grant, "when its token was read (a majority no longer held it)")
        # a later grant may have been computed without this token: it must never be used
        raise LockLost(f"{self.what()}: the lease was lost before its fencing token was read")

    def is_lost(self, grant: Grant) -> bool:
        if not grant.lost and grant.expired(time.monotonic()):
            self.declare_lost(grant, "by its local deadline")
        return grant.lost

    @property
    def lost(self) -> bool:
        """True once this process knows, or must assume, that the lease is gone."""
        grant = self.grant()
        return grant is not None and self.is_lost(grant)

    def check(self) -> None:
        """Return if the lease is still certainly held, else raise ``LockLost`` (``LockNotOwned``
        if this object never held it). Local and instant: no request to the server."""
        grant = self.owned_grant("check")
        if self.is_lost(grant):
            raise LockLost(f"{self.what()}: the lease is lost: {EXPLAINED[grant.loss]}")

    # -- the door to the servers, for the primitive that holds it ------------------------------
    # (a primitive asks its lease, never the client's topology: engine.py is the only door)

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The primitive's own ``script`` on the server of its name, within one request
        timeout; a failure raised as the ``LockError`` of this object."""
        return run_script(self.wiring, script, keys, args, self.what())

    def read(self, script: Script, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        """A read-only ``script``'s reply (sent without WAIT) from the server of its name; a
        failure raised."""
        self.wiring.state.check()
        [reply] = self.wiring.topology.run_all(script, keys, args, self.what(), read=True)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def view(self, keys: Sequence[str], listed: int) -> NodeView | None:
        """The grant at ``keys`` as the servers show it (Redlock: a majority); None when none
        is held."""
        self.wiring.state.check()
        return self.wiring.topology.view(keys, listed, self.what())

    @property
    def publish_command(self) -> str:
        """How a script publishes on this client's servers (PUBLISH; SPUBLISH on a Cluster)."""
        return self.wiring.topology.traits.publish_command

    def publish(self, channel: str, message: str) -> None:
        """Publish ``message`` on ``channel``, best effort, within one request's bound."""
        self.wiring.topology.publish(channel, message)

    def watch(
        self, channel: str, deadline: float | None = None
    ) -> contextlib.AbstractContextManager[Watch]:
        """Subscribe to ``channel`` (confirmed within what is left of the bound of a call whose
        ``deadline`` it serves: see ``topology.watch``)."""
        bound = self.wiring.grants.time_left(deadline)
        return self.wiring.topology.watch(channel, self.what(), bound)

    def wait(self, watch: Watch, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds."""
        return self.wiring.topology.wait(watch, timeout)

    def clean_up(self, aw: Any, error: BaseException) -> None:
        """``clean_up`` (above) of this object's client."""
        clean_up(self.wiring, aw, error)

    def held_by(self, holder: str) -> bool:
        """Whether the server shows the grant of ``holder`` (a holder token) holding it."""
        self.wiring.state.check()
        return self.wiring.grants.held(self.spec, holder)

    def release_by(self, holder: str) -> bool:
        """Release the grant of ``holder``, made by another object; False if it has none."""
        self.wiring.state.check()
        return self.wiring.grants.release(self.spec, holder) != Released.NOT_HELD

    def renew_by(self, holder: str, ttl: float) -> int | LockError:
        """Reset the lease of ``holder``'s grant to ``ttl`` seconds: ``RENEWED``, ``GONE``,
        ``TAKEN``, or the error that kept it from being renewed."""
        self.wiring.state.check()
        grants, spec = self.wiring.grants, self.spec
        [held] = grants.renew([spec], [holder], [ttl], grants.request_timeout, spec.what)
        return held

    def remaining(self) -> float:
        """Seconds of the current lease left by the local deadline (0: none held, or lost)."""
        grant = self.grant()
        if grant is None or grant.lost:
            return 0.0
        return max(0.0, grant.deadline - time.monotonic())
