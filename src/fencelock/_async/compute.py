"""Compute once across processes (docs/compute_once.md): ``compute_once``, the ``computed``
decorator over it, ``forget``, and ``idempotent``, the same mechanism kept longer.

A call looks (one script, compute_look.lua) and returns a fresh stored result at once. Else one
caller across every process builds it: it takes the key's builder lease (a ``Builder``, a
simple lock the client's watchdog renews while ``compute`` runs), looks again, runs ``compute``
and stores the result with the lease's fencing token (compute_store.lua, which publishes on
the lease's channel). Every other caller subscribes to that channel, looks, and waits for a
message or the end of the builder's lease, then looks again: a store wakes it (the result is
its own, however old by the time it reads it; a small one comes with the store's message, and
is not read); a release without a store (a builder cancelled, or whose store was refused)
wakes it to take the build over at once; a builder that died is replaced when its lease ends.
Within one client, the calls that ask for the same result at once follow the first of them
(``_Flights``): one look, one wait, one wake-up per process; a builder lets them go once its
result is stored.

Failure timeline: ``compute`` raises: its caller gets the exception, and the callers waiting
for that build get ``ComputeFailed`` (the failure is stored only when a waiter heard of it);
the next call builds afresh. The builder is cancelled or interrupted: it releases the lease,
and a waiter takes over. The builder pauses past its lease: another takes over with a larger
token, and the late store is refused (the caller gets the newer result if one is stored, else
its own). ``forget`` while a build runs: that build's store is refused, and its waiters build
again, after the write.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial, wraps
from typing import Any, TypeVar, cast

from .. import _events as events
from .._backend import ASYNC_CAN_CANCEL, AsyncEvent, AsyncStateLock, async_result, async_shield
from .._context import running
from .._core.compute import (
    BUILDERS,
    COMPUTE,
    COMPUTE_FORGET,
    COMPUTE_LOOK,
    COMPUTE_STORE,
    IDEMPOTENT,
    TOLD_MAX,
    Codec,
    ComputeKeys,
    Found,
    KeyOf,
    Step,
    check_codec,
    check_compute,
    check_fingerprint,
    check_key_of,
    check_max_size,
    decoded,
    encoded,
    failure_args,
    found_reply,
    key_for,
    keys_of_families,
    next_step,
    stored_reply,
    told,
)
from .._core.inspection import MAX_WAITERS_LISTED, LockInfo
from .._core.kinds import LeaseSpec
from .._core.lease import Words
from .._core.options import LeaseOptions
from .._core.timing import remaining, retry_delay
from .._keys import ttl_to_ms, validate_name, validate_timeout, validate_ttl
from .._labels import holder_label
from ..errors import ComputeFailed, FingerprintMismatch, LockError, LockTimeout
from . import admin
from .engine import AsyncLease, AsyncWiring, refuse_unmade, run_script
from .topology import AsyncTopology

# a build's lease, in the messages: "builder 'report' ..."
BUILDER = Words("builder", holding="building this result", acquire="build", release="store")

_F = TypeVar("_F", bound=Callable[..., Any])

logger = logging.getLogger("fencelock.compute")

_BUSY: Any = object()  # another caller holds the builder's lease
# what a call that followed another call of its client counts, by how that one had the result
_COUNTED = {
    events.HIT: "compute_hits",
    events.STALE: "compute_stale_hits",
    events.WAITED: "compute_waits",
}


@dataclass(frozen=True, slots=True)
class _Call:
    """One call's arguments, checked."""

    # the builder's lease, held only while this call builds; what the call asks the servers
    # otherwise (looks, waits, stores) goes through it too (engine.py is the only door)
    lease: AsyncLease
    compute: Any
    fresh_for: float
    stale_for: float
    wait: float | None  # how long it waits for another caller's build
    codec: Codec
    max_size: int
    fingerprint: bytes | None

    @property
    def options(self) -> LeaseOptions:  # (its ttl; name: the key)
        return self.lease.options

    @property
    def spec(self) -> LeaseSpec:
        return self.lease.spec

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def keys(self) -> ComputeKeys:
        keys = self.spec.keys
        assert isinstance(keys, ComputeKeys)
        return keys

    @property
    def flight(self) -> tuple[object, ...]:
        """What the calls of one client that share a local flight ask alike."""
        return (self.spec.primitive, self.name, self.fresh_for, self.stale_for, self.fingerprint,
                self.max_size, id(self.codec))  # fmt: skip


@dataclass(eq=False, slots=True)
class _Flight:
    """The calls of one client that ask for the same result at once (``_Flights``): its
    leader's outcome, for the others once ``done``: the result (encoded) and how it was had,
    or the build that raised (type name, message), or neither (they try again)."""

    done: AsyncEvent = field(default_factory=AsyncEvent)
    data: bytes | None = None
    outcome: str = ""
    failure: tuple[str, str] | None = None


class _Flights:
    """A client's flights in progress: the first call of a result leads its flight."""

    def __init__(self) -> None:
        self._guard = AsyncStateLock()
        self._on: dict[tuple[object, ...], _Flight] = {}
        self._pid = os.getpid()

    def join(self, key: tuple[object, ...]) -> tuple[_Flight, bool]:
        """The flight of ``key``, and whether this call leads it."""
        with self._guard:
            if self._pid != os.getpid():  # a forked child: the parent's callers are not here
                self._on, self._pid = {}, os.getpid()
            flight = self._on.get(key)
            if flight is not None:
                return flight, False
            flight = self._on[key] = _Flight()
            return flight, True

    def land(
        self, key: tuple[object, ...], flight: _Flight, landed: tuple[bytes, str] | None = None
    ) -> None:
        """Let ``flight``'s other calls go, with ``landed`` (the result, encoded, and how it was
        had) or without (they share its failure, or try again). Landed once, it stays so."""
        if landed is not None:
            flight.data, flight.outcome = landed
        with self._guard:
            if self._on.get(key) is flight:
                del self._on[key]
        flight.done.set()


class AsyncResults:
    """The calls of one client's ``compute_once`` and ``idempotent`` (see the module)."""

    def __init__(self, wiring: AsyncWiring) -> None:
        self._wiring = wiring
        self._flights = _Flights()

    def call(
        self,
        family: str,
        name: object,
        compute: object,
        *,
        fresh_for: object,
        stale_for: object,
        ttl: object,
        timeout: object,
        codec: object,
        max_size: object,
        fingerprint: object = None,
    ) -> _Call:
        """The call's arguments, each checked (before anything is sent)."""
        wiring, kind = self._wiring, BUILDERS[family]
        label = holder_label if wiring.label is None else wiring.label  # (who builds, for ls)
        options = LeaseOptions.checked(
            validate_name(name, "key"),
            ttl,
            timeout=0.0,
            auto_renew=True,
            label=label,
            threads=not ASYNC_CAN_CANCEL,
        )
        return _Call(
            AsyncLease(self, wiring, options, wiring.spec(kind, options, BUILDER)),
            check_compute(compute, threads=not ASYNC_CAN_CANCEL),
            validate_ttl(fresh_for, "fresh_for" if family == COMPUTE else "keep_for"),
            validate_ttl(stale_for, "stale_for", minimum=0.0),
            validate_timeout(timeout),
            check_codec(codec),
            check_max_size(max_size),
            check_fingerprint(fingerprint),
        )

    async def get(self, call: _Call) -> Any:
        """The result: stored, built by this call, or built by another that it waited for."""
        deadline = None if call.wait is None else time.monotonic() + call.wait
        if not events.on:
            return decoded(call.codec, (await self._flown(call, deadline))[0], call.name)
        started, outcome = time.monotonic(), events.ERROR
        try:
            data, outcome = await self._flown(call, deadline)
            return decoded(call.codec, data, call.name)
        except LockTimeout:
            outcome = events.TIMEOUT
            raise
        finally:
            seconds = time.monotonic() - started
            events.emit(events.ComputeEnded(call.spec.primitive, call.name, outcome, seconds))

    async def _flown(self, call: _Call, deadline: float | None) -> tuple[bytes, str]:
        """The result (encoded) and how it was had: by this call, or by the call of this client
        that asked for it first and is at it (a local single flight: one look, one wait, one
        wake-up per process, however many of its callers want the result)."""
        while True:
            flight, leads = self._flights.join(call.flight)
            if leads:
                landed = None
                try:
                    landed = await self._get(call, deadline, flight)
                    return landed
                finally:
                    self._flights.land(call.flight, flight, landed)
            counters = self._wiring.counters
            counters.add(compute_queued=1)
            try:
                arrived = await flight.done.wait(remaining(deadline, time.monotonic()))
            finally:
                counters.add(compute_queued=-1)
            if not arrived:
                raise _timed_out(call)
            if flight.data is not None:  # (a build of the leader's is a wait of this call's)
                outcome = events.WAITED if flight.outcome == events.BUILT else flight.outcome
                counters.add(**{_COUNTED[outcome]: 1})
                return flight.data, outcome
            if flight.failure is not None:
                raise ComputeFailed(call.name, *flight.failure)
            # the leader was cancelled, or failed otherwise (its timeout, the server): again

    async def _get(self, call: _Call, deadline: float | None, flight: _Flight) -> tuple[bytes, str]:
        """``_flown``'s, for the leader of ``flight``."""
        counters = self._wiring.counters
        found = await self._look(call)
        waited_for: int | None = None
        while True:
            step = _next(found, call, waited_for)
            if step in (Step.HIT, Step.STALE, Step.WAITED):
                hit = step is Step.HIT and waited_for is None  # (else: what it waited for)
                counters.add(compute_hits=int(hit), compute_stale_hits=int(step is Step.STALE))
                outcome = (
                    events.HIT if hit else events.STALE if step is Step.STALE else events.WAITED
                )
                return found.value or b"", outcome
            if step is Step.FAILED:
                assert found.failure is not None
                flight.failure = (found.failure.type_name, found.failure.message)
                raise ComputeFailed(call.name, *flight.failure)
            if step in (Step.REFRESH, Step.BUILD):
                built = await self._build(call, flight, taking_over=waited_for is not None)
                if built is not _BUSY:
                    return cast(tuple[bytes, str], built)
                if step is Step.REFRESH:  # another caller refreshes it meanwhile
                    counters.add(compute_stale_hits=1)
                    return found.value or b"", events.STALE
            if remaining(deadline, time.monotonic()) == 0:
                raise _timed_out(call)
            if waited_for is None:
                counters.add(compute_waits=1)
            found, waited_for = await self._wait(call, deadline, waited_for)

    async def forget(self, key: object) -> bool:
        """Drop the results stored for ``key``; a build under way cannot store its own."""
        wiring, name = self._wiring, validate_name(key, "key")
        refuse_unmade(wiring, BUILDERS[COMPUTE], BUILDER, name)
        keys = keys_of_families(name, wiring.prefix)
        return bool(await run_script(wiring, COMPUTE_FORGET, keys, (), f"forget {name!r}"))

    async def _look(self, call: _Call, *, claim: bool = False) -> Found:
        """What the server has for the key now. ``claim``: the builder of an idempotent call
        records its request's fingerprint (a write)."""
        keys = call.keys.looked()
        if claim and call.fingerprint is not None:
            args = (call.fingerprint, ttl_to_ms(call.fresh_for))
            return found_reply(await call.lease.run(COMPUTE_LOOK, keys, args))
        return found_reply(await call.lease.read(COMPUTE_LOOK, keys, ("", 1)))

    async def _wait(
        self, call: _Call, deadline: float | None, waited_for: int | None
    ) -> tuple[Found, int | None]:
        """Wait while another caller builds: what is found once it stored, failed or its lease
        ended, and the token of the build waited for. ``LockTimeout`` past ``deadline``."""
        wiring, lease = self._wiring, call.lease
        async with lease.watch(call.keys.channel, deadline) as watch:
            while True:
                watch.rearm()  # subscribed before this look: a store after it wakes us
                sent_at = time.monotonic()
                found = await self._look(call)
                if waited_for is None:
                    waited_for = found.building
                if _next(found, call, waited_for) is not Step.WAIT:
                    return found, waited_for
                now = time.monotonic()
                left = remaining(deadline, now)
                if left == 0:
                    raise _timed_out(call)
                # until the lease's end at the latest: a builder that died publishes nothing
                ends, ttl = found.lease_left, call.options.ttl
                delay = retry_delay(ends, left, wiring.max_poll, ttl, now - sent_at)
                await lease.wait(watch, delay)
                # (a small result comes with its store's message)
                carried = told(watch.message, waited_for)
                if carried is not None and call.fingerprint is None:
                    return carried, waited_for

    async def _build(self, call: _Call, flight: _Flight, *, taking_over: bool) -> Any:
        """Build the result under the builder's lease, store it, and return it as stored (and
        how it was had: ``events.BUILT``); ``_BUSY`` when another caller holds the lease.
        ``flight``'s other callers get the result before the lease is released, and learn of
        it when ``compute`` raises."""
        lease = AsyncLease(self, self._wiring, call.options, call.spec)
        if not await lease.acquire(timeout=0):
            return _BUSY
        try:
            found = await self._look(call, claim=True)  # (a build may have ended meanwhile)
            if _next(found, call, None) is Step.HIT:
                self._wiring.counters.add(compute_hits=1)
                had: tuple[Any, str] = (found.value or b"", events.HIT)
            else:
                token = lease.token()
                self._wiring.counters.add(compute_builds=1, compute_takeovers=int(taking_over))
                if taking_over and events.on:
                    events.emit(events.TookOver(call.spec.primitive, call.name))
                try:
                    with running(token):
                        result = await async_result(call.compute)
                    data = encoded(call.codec, result, call.max_size, call.name)
                except Exception as exc:
                    flight.failure = failure_args(exc)
                    await self._failed(call, token, flight.failure)
                    raise
                had = (await self._stored(call, token, data), events.BUILT)
        except BaseException as error:
            # (a waiter takes over if nothing was stored) in the background when the caller was
            # cancelled; not at all in a call closed for good, whose lease ends by itself
            await lease.clean_up(_release(lease), error)
            raise
        # the calls following this one need not wait for the release
        self._flights.land(call.flight, flight, had)
        await async_shield(_release(lease))
        return had

    async def _store(
        self, call: _Call, token: int, *args: str | bytes | int, carried: bool = False
    ) -> object:
        """``carried``: the store's message carries the result (its waiters need not read it)."""
        lease, keys = call.lease, call.keys
        args = (token, *args, keys.channel, lease.publish_command, "1" if carried else "")
        return await lease.run(COMPUTE_STORE, keys.stored(), args)

    async def _stored(self, call: _Call, token: int, data: bytes) -> bytes:
        """Store ``data``, built with ``token``: the result as stored, or, refused (a newer
        build, or a forget, came while it ran), the newer result stored if any, else its own."""
        keep = ttl_to_ms(call.fresh_for + call.stale_for)
        fingerprint, carried = call.fingerprint or b"", len(data) <= TOLD_MAX
        reply = await self._store(call, token, "v", data, keep, fingerprint, carried=carried)
        stored, newer, value = stored_reply(reply)
        if not stored:
            logger.info(  # (a lease lost meanwhile was logged as a warning when found)
                "fencelock: %s: the result of token %d was not stored: token %d or a forget "
                "came while it was built",
                call.spec.what,
                token,
                newer,
                extra={"event": "compute_refused", "lock_name": call.name, "token": token},
            )
            if value is not None and newer > token:
                return value
        return data

    async def _failed(self, call: _Call, token: int, failure: tuple[str, str]) -> None:
        """Tell the waiters of the build of ``token`` that it raised (``failure``: the
        exception's type name and message; best effort: its caller gets the exception whatever
        happens here)."""
        try:
            await self._store(call, token, "e", *failure, call.spec.ttl_ms)
        except LockError as error:
            logger.warning("fencelock: %s: its failure not stored: %s", call.spec.what, error)


def _next(found: Found, call: _Call, waited_for: int | None) -> Step:
    if call.fingerprint is not None and found.fingerprint not in (None, call.fingerprint):
        raise FingerprintMismatch(call.name)
    return next_step(found, call.fresh_for, call.stale_for, waited_for)


def _timed_out(call: _Call) -> LockTimeout:
    return LockTimeout(
        f"{call.spec.what}: no result within {call.wait} s (another caller is building it)"
    )


async def _release(lease: AsyncLease) -> None:
    try:
        await lease.release()
    except LockError as error:  # lost, or the server unreachable: the lease ends by itself
        logger.debug("fencelock: %s: not released: %s", lease.what(), error)


def computed(
    results: AsyncResults,
    compute_once: Callable[..., Awaitable[Any]],
    key: KeyOf,
    ask: dict[str, Any],
) -> Callable[[_F], _F]:
    """The decorator of ``LockClient.computed``: each call's result by ``compute_once`` (the
    client's) of the key ``key`` makes of the call's arguments; ``ask``: its other arguments,
    checked now."""
    results.call(COMPUTE, "key", _unused, **ask)

    def decorate(fn: _F) -> _F:
        check_compute(fn, threads=not ASYNC_CAN_CANCEL)
        signature = check_key_of(key, fn)

        @wraps(fn)
        async def cached(*args: Any, **kwargs: Any) -> Any:
            name = key_for(key, signature, args, kwargs)
            return await compute_once(name, partial(fn, *args, **kwargs), **ask)

        return cast(_F, cached)

    return decorate


def _unused() -> None:
    """The ``compute`` of a decorator's early check (never called)."""


def _view(family: str) -> admin.View:
    """How ``inspect`` and ``fencelock ls`` show a build in progress: its builder's lease (the
    holder's label says who builds: the client's, by default host:pid:thread), as KIND
    ``compute build`` (``idempotent build``)."""

    async def building(topology: AsyncTopology, prefix: str, name: str) -> LockInfo | None:
        keys = ComputeKeys.for_compute(name, prefix, family)
        shown = (keys.lock, keys.fence, keys.queue)
        view = await topology.view(shown, MAX_WAITERS_LISTED, f"builder {name!r}")
        info = None if view is None else view.info(name)
        return None if info is None else replace(info, kind=f"{family} build")

    return admin.View(family, BUILDERS[family], building)


admin.register(_view(COMPUTE))
admin.register(_view(IDEMPOTENT))
