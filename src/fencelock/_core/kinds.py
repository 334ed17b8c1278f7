"""Kinds: what each primitive is on the server, as plain values (no I/O).

A kind says which keys a name has, which scripts take, release and renew a grant and with which
arguments, how to ask whether a holder still holds it, and what its replies mean. The topologies
run a kind's scripts and never name a primitive; the lease engine (``_async/engine.py``) runs the
lifecycle for any kind. A new primitive is a new kind (and its ``.lua`` files), or a facade over
an existing one.

===============  ====================  ================  ======================================
kind             keys                  scripts           grant
===============  ====================  ================  ======================================
``Mutex``        string holder, token  acquire/release   one holder; local hand-off; wake one
``NativeMutex``  a ``Mutex``'s         none              the same, by plain commands; wakes all
``Reentrant``    hash holder -> count  reentrant_*       one holder, counted; wakes every waiter
``Permits``      sorted set of leases  semaphore_*       ``take`` of ``limit`` permits per holder
``AllOf``        a Mutex's, per name   multi_*           every name or none; a token per name
===============  ====================  ================  ======================================

A primitive that is none of these brings its own kind (a subclass of ``Kind``, or of
``ScoredLease`` for grants kept as scored entries of a sorted set) in its own module, with its
scripts (``_scripts.load``): the latch does (``_core/latch.py``).

A kind gives the topology its requests (``acquire_request``, ``release_request``,
``renew_request``, ``handoff_request``, ``held_commands``: lists of commands, and what replaces
the first after NOSCRIPT) and reads their replies (``acquire_result``...). A scripted kind's are
one EVALSHA each, whose replies read alike (``{1, fence}`` / ``{0, pttl, score}``,
``Released``); the watchdog renews them in batches with one script (renew.lua looks at the key's
type). A client that runs no scripts runs each kind's ``without_scripts()`` instead: a
``NativeMutex`` for a ``Mutex``, and none for the others (``ScriptsRequired``).
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from .._keys import LockKeys, MultiKeys, SemaphoreKeys, renew_keys, ttl_to_ms
from .._scripts import (
    ACQUIRE,
    HANDOFF,
    MULTI_ACQUIRE,
    MULTI_RELEASE,
    REENTRANT_ACQUIRE,
    REENTRANT_RELEASE,
    RELEASE,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_RELEASE,
    Script,
)
from ..errors import LockError
from .lease import LOCK_WORDS, Words
from .natives import ServerCommands
from .replies import (
    GONE,
    RENEWED,
    TAKEN,
    Busy,
    Granted,
    acquire_reply,
    holds,
    lock_value,
    permit_held,
    queue_entry,
    renewed_all,
)

# The metric label of each kind of grant (``primitive`` in fencelock.metrics).
LOCK: Final = "lock"
REENTRANT_LOCK: Final = "reentrant_lock"
SEMAPHORE: Final = "semaphore"
READ_LOCK: Final = "read_lock"
WRITE_LOCK: Final = "write_lock"
MULTI_LOCK: Final = "multi_lock"

WRITE_PERMITS: Final = 2**31  # a read-write lock's writer takes every permit (a reader one)

Command: TypeAlias = tuple[Any, ...]
# a request: its commands (sent on one connection), and the command that replaces the first if
# the server answers NOSCRIPT (None: no script in it)
Request: TypeAlias = tuple[list[Command], Command | None]

# A barging lock's waiter (``fair=False``) is queued by its id alone for this many tries, woken
# by a release that leaves the name to whoever takes it first; from then on it is queued to be
# granted the name in order, in the place it queued at (docs/contention.md, "Barging"): once
# queued, it finds the name taken by another at most this many times.
BARGED_TRIES: Final = 3

# How long a fencing counter started without a script is kept (NativeMutex): a counter lost or
# expired is started again from a client's clock, so the longer it lives, the less tokens rely
# on clocks (docs/modes.md, "Without scripts").
COUNTER_KEEP_MS: Final = 24 * 3600 * 1000


def raised(reply: Any) -> Any:
    """``reply``, or the error it is raised (an error reply comes as a value)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def ok(reply: object) -> bool:
    """Whether a SET was done: ``OK`` as it is, or as redis-py's callback made it (True)."""
    return reply is True or reply in (b"OK", "OK")


class Released(enum.IntEnum):
    """What a release script answered."""

    NOT_HELD = 0  # the holder token did not hold the grant: nothing was deleted
    RELEASED = 1
    STILL_HELD = 2  # a reentrant hold was left, others remain
    WOKE = 3  # released, and another client's waiter was woken to take it
    GRANTED = 4  # released, and granted to the first queued waiter by the script itself

    @property
    def freed(self) -> bool:
        """The holder's last hold is gone (whoever has the grant now)."""
        return self in (Released.RELEASED, Released.WOKE, Released.GRANTED)

    @classmethod
    def of(cls, reply: object) -> Released:
        if isinstance(reply, bytes | str | int) and not isinstance(reply, bool):
            try:
                return cls(int(reply))
            except ValueError:
                pass
        raise ValueError(f"unexpected release reply {reply!r}")


@dataclass(frozen=True, slots=True)
class Kind:
    """What one primitive is on the server (see the module's table). Subclasses bring their
    scripts and arguments, from which the requests here are made (one EVALSHA each); a kind of
    plain commands overrides the requests and the readings of their replies (``NativeMutex``)."""

    primitive: str  # the metric label
    acquire_script: Script
    release_script: Script
    # a grant may pass to the next lock object of the client that waits (one script, or none)
    local_handoff: bool = True
    # waiters always queue in Redis (a release may grant them directly); else per the client
    always_queued: bool = False
    # a Redlock majority can hold it (the scripts' replies can be counted per node)
    on_quorum: bool = True
    reentrant: bool = False
    # its release can wake (or grant) the first queued waiter alone (wake="one"); else a
    # release wakes every waiter
    wakes_one: bool = True
    # what scripts do for it, for the error where none runs (``without_scripts`` is None)
    why_scripts: str = "its grants are made by scripts"
    # its lock key holds the grant's fencing token ('holder token'): a renewal needs no counter
    token_in_key: bool = False
    # False: barging (a Mutex's, docs/contention.md, "Barging"): its release wakes the first
    # queued waiter without granting it the name, which a newcomer (the releaser too) may take
    # first; the waiter keeps its place, and is queued to be granted after BARGED_TRIES tries
    fair: bool = True

    def keys(self, name: str, prefix: str) -> LockKeys:
        return LockKeys.for_name(name, prefix)

    def acquire_keys(self, keys: LockKeys) -> tuple[str, ...]:
        return (keys.lock, keys.fence, keys.queue)

    def release_keys(self, keys: LockKeys) -> tuple[str, ...]:
        return (keys.lock, keys.queue, keys.fence)

    def acquire_args(
        self, spec: LeaseSpec, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        return (holder, spec.ttl_ms, block, entry)

    def release_args(
        self, spec: LeaseSpec, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        """``depth``: the holds ``holder`` has before this release (1: its last)."""
        return (holder, spec.keys.channel, publish, leaving)

    def held_commands(self, keys: LockKeys, holder: str) -> list[tuple[str, ...]]:
        """The reads that tell whether ``holder`` holds the grant at ``keys``."""
        return [("GET", keys.lock)]

    def held_reply(self, replies: Sequence[Any], holder: str) -> bool:
        return holds(replies[0], holder)

    def renewed_keys(self, keys: LockKeys) -> tuple[str, ...]:
        """The lock keys renew.lua lengthens for a grant (each with the grant's holder)."""
        return (keys.lock,)

    def waiter_entry(
        self,
        waiter: str,
        channel: str,
        holder: str,
        ttl_ms: int,
        block: int,
        grants: bool,
        tries: int,
    ) -> str:
        """A waiter's entry in the queue, woken on ``channel``, for its re-try after ``tries``
        others (0: the one that queues it): one that a release may grant the lock directly when
        the topology ``grants`` so (serve.lua), else its id. A barging kind's waiter is queued by
        its id (woken, not granted) for its first ``BARGED_TRIES`` tries."""
        in_order = self.fair or tries >= BARGED_TRIES
        return queue_entry(waiter, holder, ttl_ms, block) if grants and in_order else waiter

    def describe(self, noun: str, name: str) -> str:
        """The object in messages: its kind and the name the user gave, never a Redis key."""
        return f"{noun} {name!r}"

    def line_tag(self) -> str:
        """Which local queue of a name its grants share (a grant passes only within one)."""
        return "simple"

    def without_scripts(self) -> Kind | None:
        """The kind that stands in for this one where no script runs (None: none can)."""
        return None

    # -- the requests the topology sends, and what their replies mean ------------------------

    def acquire_request(
        self,
        spec: LeaseSpec,
        holder: str,
        depth: int,
        block: int,
        entry: str,
        server: ServerCommands,
        proposal: int = 0,
    ) -> Request:
        """``proposal``: Redlock's proposed fencing token (``quorum.proposed_token``), the last
        argument of a kind whose lock key holds its token (acquire.lua); 0: none."""
        script, keys = self.acquire_script, spec.acquire_keys
        args = self.acquire_args(spec, holder, depth, block, entry, server.publish)
        if proposal:
            args = (*args, proposal)
        return [script.evalsha(keys, args)], script.eval(keys, args)

    def acquire_result(self, replies: Sequence[Any]) -> Granted | Busy:
        """A grant (its fence: the last token of the block reserved) or busy; an error reply
        is raised."""
        return acquire_reply(raised(replies[0]))

    def release_request(
        self, spec: LeaseSpec, holder: str, leaving: str, server: ServerCommands, depth: int
    ) -> Request:
        script, keys = self.release_script, spec.release_keys
        args = self.release_args(spec, holder, leaving, server.publish, depth)
        return [script.evalsha(keys, args)], script.eval(keys, args)

    def release_result(self, replies: Sequence[Any]) -> Released:
        return Released.of(raised(replies[0]))

    def handoff_request(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int, server: ServerCommands
    ) -> Request:
        """The lease of ``holder``'s grant restarts at ``ttl_ms``, and ``block`` fencing tokens
        are reserved (a local hand-off, handoff.py): read by ``acquire_result``."""
        keys, args = spec.acquire_keys[:2], (holder, ttl_ms, block)
        return [HANDOFF.evalsha(keys, args)], HANDOFF.eval(keys, args)

    def handoff_result(self, replies: Sequence[Any]) -> Granted | Busy:
        return acquire_reply(raised(replies[0]))

    def renew_request(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, server: ServerCommands
    ) -> list[Command] | None:
        """Plain commands that renew one lease (read by ``renew_result``); None: renew.lua
        renews it, in a batch with others."""
        return None

    def renew_result(self, replies: Sequence[Any], holder: str) -> int:
        """``RENEWED``, ``GONE`` or ``TAKEN``, from the replies to ``renew_request``."""
        raise NotImplementedError(f"{type(self).__name__} is renewed by renew.lua")

    def held_as(self, replies: Sequence[Any], holder: str) -> str | None:
        """The value ``holder``'s grant is stored with, where the replies to an acquire, release,
        renewal or hand-off request show that it did not match it: the same request is sent
        again with that value for ``holder`` (``NativeMutex``). None: the answer stands."""
        return None


@dataclass(frozen=True, slots=True)
class Mutex(Kind):
    primitive: str = LOCK
    acquire_script: Script = ACQUIRE
    release_script: Script = RELEASE
    token_in_key: bool = True
    # its release wakes whoever listens on its channel even when no waiter is queued (they
    # listen without queueing: an election's observers, compute_once's waiters); else a release
    # publishes only to the waiters its queue holds
    announces: bool = False

    def release_args(
        self, spec: LeaseSpec, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        announce, barge = "1" if self.announces else "", "" if self.fair else "1"
        return (holder, spec.keys.channel, publish, leaving, announce, barge)

    def without_scripts(self) -> Kind | None:
        return NATIVE_MUTEX


@dataclass(frozen=True, slots=True)
class NativeMutex(Mutex):
    """A ``Mutex`` held by plain commands, for a client that runs no scripts (docs/modes.md,
    "Without scripts"): on the same keys, so that it and a scripted ``Mutex`` exclude each
    other. Taken by ``SET NX PX`` (its key holds the holder token alone), its fencing token the
    counter's ``INCRBY``, released by a compare-and-delete and a ``PUBLISH`` that wakes every
    waiter (a release cannot serve the queue; a waiter puts ``'*'`` in it, for the scripts'
    releases to wake it), renewed and handed on locally by ``SET ... IFEQ``. Each try is one
    round trip, so a busy try counts the counter up too (tokens skip values). A counter that is
    not there is started from this client's clock in microseconds plus the lease (the scripts
    take the server's), so that tokens go on increasing after it is lost, or after a scripted
    grant, which keeps its token in the lock key alone. (Its scripts are the ``Mutex``'s,
    never run.)

    Its requests compare the lock key with ``holder`` exactly. A grant made by a script, before a
    client made with scripts="auto" turned script-free, is stored as ``'holder token'``: a
    request that does not match reads the key, and ``held_as`` finds that value, with which the
    request is sent again (one round trip more, for such grants only: the protocol's
    ``request_natively``). So an acquire sent again at the switch finds the grant its first
    send made by a script, and holds it."""

    wakes_one: bool = False
    on_quorum: bool = False
    token_in_key: bool = False  # (the holder token alone: its token is the counter's)

    def without_scripts(self) -> Kind | None:
        return self

    def acquire_request(
        self,
        spec: LeaseSpec,
        holder: str,
        depth: int,
        block: int,
        entry: str,
        server: ServerCommands,
        proposal: int = 0,  # (never on a quorum: ``on_quorum``)
    ) -> Request:
        keys, ttl = spec.keys, spec.ttl_ms
        # a waiter's '*' in the queue: a scripted client's release wakes it too (release.lua);
        # kept as long as a counter, or until the next release takes it
        waiting: list[Command] = []
        if entry:
            keep = max(COUNTER_KEEP_MS, 2 * ttl)
            waiting = [("ZADD", keys.queue, "NX", "+inf", "*"), ("PEXPIRE", keys.queue, keep)]
        return [
            # ours by a request sent before (a re-sent one): its lease restarts
            ("SET", keys.lock, holder, "IFEQ", holder, "PX", ttl),
            # taken now (None: there was no value), else whose it is (``held_as``)
            ("SET", keys.lock, holder, "NX", "PX", ttl, "GET"),
            *_minted(keys.fence, block, ttl),
            ("PTTL", keys.lock),
            *waiting,
        ], None

    def acquire_result(self, replies: Sequence[Any]) -> Granted | Busy:
        ours, was, top, pttl = replies[0], replies[1], replies[3], replies[4]
        for reply in (ours, was):
            if isinstance(reply, Exception) and "WRONGTYPE" not in str(reply):
                raise reply  # (WRONGTYPE: a reentrant lock's hash holds the name: busy)
        if ok(ours) or was is None:
            return Granted(int(raised(top)))
        left = int(raised(pttl))
        # (-2: gone since the SET: free now; -1: a key without expiry)
        return Busy(0.0 if left == -2 else left / 1000 if left >= 0 else None)

    def release_request(
        self, spec: LeaseSpec, holder: str, leaving: str, server: ServerCommands, depth: int
    ) -> Request:
        keys = spec.keys
        # Plain commands, not one script: the wake-up is sent even when nothing was deleted
        # (a lease lost meanwhile: a waiter re-tries for nothing), and it wakes every waiter.
        return [
            server.delete_if(keys.lock, holder),
            ("GET", keys.lock),  # (not deleted: whose it is, ``held_as``)
            (server.publish, keys.channel, "1"),
        ], None

    def release_result(self, replies: Sequence[Any]) -> Released:
        if int(raised(replies[0])) != 1:
            return Released.NOT_HELD
        heard = replies[2]  # (an error: no right to publish; waiters re-try at the lease's end)
        woke = isinstance(heard, int) and heard > 0
        return Released.WOKE if woke else Released.RELEASED

    def renew_request(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, server: ServerCommands
    ) -> list[Command] | None:
        keys = spec.keys
        return [
            ("SET", keys.lock, holder, "IFEQ", holder, "PX", ttl_ms),
            ("GET", keys.lock),  # (not renewed: gone, or another holder's)
            # the counter kept at least as long as the lease, as renew.lua keeps it
            ("PEXPIRE", keys.fence, ttl_ms, "GT"),
        ]

    def renew_result(self, replies: Sequence[Any], holder: str) -> int:
        renewed, now = replies[0], replies[1]
        if isinstance(renewed, Exception):
            if "WRONGTYPE" not in str(renewed):
                raise renewed
            return TAKEN  # a reentrant lock's hash holds the name
        if ok(renewed):
            return RENEWED
        return GONE if raised(now) is None else TAKEN

    def held_as(self, replies: Sequence[Any], holder: str) -> str | None:
        # the second reply is the lock key's value (an acquire's SET ... GET, the others' GET),
        # after the first command: ``holder``'s grant made by a script is 'holder token' (a key
        # of another type is no grant: an error)
        value = replies[1]
        if not isinstance(value, str | bytes):
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        owner, token = lock_value(value)
        return value if owner == holder and token is not None else None

    def handoff_request(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int, server: ServerCommands
    ) -> Request:
        keys = spec.keys
        refreshed = ("SET", keys.lock, holder, "IFEQ", holder, "PX", ttl_ms)
        return [refreshed, ("GET", keys.lock), *_minted(keys.fence, block, ttl_ms)], None

    def handoff_result(self, replies: Sequence[Any]) -> Granted | Busy:
        if ok(raised(replies[0])):
            return Granted(int(raised(replies[3])))
        return Busy(None)


def _minted(fence: str, block: int, ttl_ms: int) -> list[Command]:
    """Hand out ``block`` tokens from the counter at ``fence`` (the reply to the second: the
    last of them), starting a counter that is not there from this client's clock, a lease
    ahead: a scripted grant keeps its token in the lock key alone (prelude.lua), so a counter
    started just after it must outrun it with a clock that lags the server's by up to a lease."""
    started = time.time_ns() // 1000 + ttl_ms * 1000
    keep = max(COUNTER_KEEP_MS, ttl_ms)
    return [("SET", fence, started, "NX", "PX", keep), ("INCRBY", fence, block)]


NATIVE_MUTEX: Final = NativeMutex()


@dataclass(frozen=True, slots=True)
class Reentrant(Kind):
    """A hash holder -> hold count: the same holder may enter again. Its waiters are woken all
    together (a release cannot grant a hold count to a queued waiter)."""

    primitive: str = REENTRANT_LOCK
    acquire_script: Script = REENTRANT_ACQUIRE
    release_script: Script = REENTRANT_RELEASE
    reentrant: bool = True
    wakes_one: bool = False
    why_scripts: str = "its hold count is kept by scripts"

    def acquire_args(
        self, spec: LeaseSpec, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        return (holder, spec.ttl_ms, depth, block, entry)

    def release_args(
        self, spec: LeaseSpec, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        # (the depth makes a release sent again harmless: reentrant_release.lua)
        return (holder, spec.keys.channel, publish, depth)

    def held_commands(self, keys: LockKeys, holder: str) -> list[tuple[str, ...]]:
        return [("HEXISTS", keys.lock, holder)]

    def line_tag(self) -> str:
        return "reentrant"


@dataclass(frozen=True, slots=True)
class ScoredLease(Kind):
    """A kind whose grants are entries of a sorted set (its lock key) scored by the end of their
    lease on the server's clock: renew.lua lengthens the score, and a holder holds until it.
    Each object queues alone: such grants are not handed between the objects of a client."""

    local_handoff: bool = False
    on_quorum: bool = False

    def held_commands(self, keys: LockKeys, holder: str) -> list[tuple[str, ...]]:
        return [("ZSCORE", keys.lock, holder), ("TIME",)]

    def held_reply(self, replies: Sequence[Any], holder: str) -> bool:
        return permit_held(replies[0], replies[1])


@dataclass(frozen=True, slots=True)
class Permits(ScoredLease):
    """``take`` of the ``limit`` permits of a name (_scripts/semaphore.lua): each holder's a
    lease, waiters served first come, first served, granted by the release itself. ``family``
    keeps apart the keys of a semaphore ("sem") and a read-write lock ("rw", whose writer takes
    every permit)."""

    primitive: str = SEMAPHORE
    acquire_script: Script = SEMAPHORE_ACQUIRE
    release_script: Script = SEMAPHORE_RELEASE
    always_queued: bool = True
    why_scripts: str = "its permits and their fair queue are kept by scripts"
    take: int = 1
    limit: int = 1
    family: str = "sem"

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def semaphore(take: int, limit: int) -> Permits:
        # (one value per (take, limit): a semaphore is made, and asks for its permits, per call)
        return Permits(take=take, limit=limit)

    @classmethod
    def rw_side(cls, take: int) -> Permits:
        primitive = WRITE_LOCK if take >= WRITE_PERMITS else READ_LOCK
        return cls(primitive=primitive, take=take, limit=WRITE_PERMITS, family="rw")

    def keys(self, name: str, prefix: str) -> SemaphoreKeys:
        return SemaphoreKeys.for_semaphore(name, prefix, self.family)

    def acquire_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, SemaphoreKeys)
        return (keys.lock, keys.fence, keys.queue, keys.state, keys.alive)

    def release_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, SemaphoreKeys)
        return (keys.lock, keys.queue, keys.fence, keys.state, keys.alive)

    def acquire_args(
        self, spec: LeaseSpec, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        channel = spec.keys.channel
        return (holder, spec.ttl_ms, block, entry, self.take, self.limit, channel, publish)

    def line_tag(self) -> str:
        return self.family


@dataclass(frozen=True, slots=True)
class AllOf(Kind):
    """Every one of ``names`` (canonical order) held as a simple lock by one holder token, or
    none of them, in one script each way (scripts/multi_acquire.lua, multi_release.lua): the
    multi-lock where its names share a server (one master, or one slot of a Cluster). Each name
    gets its own fencing token (``Grant.fences``), excludes plain locks and other multi-locks as
    one lock of its own would, and its release serves its own waiters (serve.lua). A waiter
    queues on the name it found busy, woken on its own channel, and re-tries the whole set: a
    release never grants it one name of several."""

    primitive: str = MULTI_LOCK
    acquire_script: Script = MULTI_ACQUIRE
    release_script: Script = MULTI_RELEASE
    local_handoff: bool = False
    always_queued: bool = True
    token_in_key: bool = True  # each name's, as a Mutex's
    on_quorum: bool = False
    why_scripts: str = "every name or none is decided in one script"
    names: tuple[str, ...] = ()

    def keys(self, name: str, prefix: str) -> MultiKeys:
        return MultiKeys.for_names(self.names, prefix)

    def acquire_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, MultiKeys)
        return tuple(key for m in keys.members for key in (m.lock, m.fence, m.queue))

    def release_keys(self, keys: LockKeys) -> tuple[str, ...]:
        return self.acquire_keys(keys)

    def acquire_args(
        self, spec: LeaseSpec, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        assert isinstance(spec.keys, MultiKeys)
        return (holder, spec.ttl_ms, entry, publish, *spec.keys.channels)

    def release_args(
        self, spec: LeaseSpec, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        assert isinstance(spec.keys, MultiKeys)
        return (holder, leaving, publish, *spec.keys.channels)

    def held_commands(self, keys: LockKeys, holder: str) -> list[tuple[str, ...]]:
        assert isinstance(keys, MultiKeys)
        return [("MGET", *keys.locks)]

    def held_reply(self, replies: Sequence[Any], holder: str) -> bool:
        return all(holds(reply, holder) for reply in replies[0])

    def renewed_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, MultiKeys)
        return keys.locks

    def waiter_entry(
        self,
        waiter: str,
        channel: str,
        holder: str,
        ttl_ms: int,
        block: int,
        grants: bool,
        tries: int,
    ) -> str:
        # '>' and the channel to wake it on, whichever name's release serves it (serve.lua)
        return f">{channel}"

    def describe(self, noun: str, name: str) -> str:
        return f"{noun} {list(self.names)!r}"

    def line_tag(self) -> str:
        return "multi"


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """What every request about one primitive object's grant needs, computed once when the
    object is made (the hot path reads it on every call)."""

    name: str
    kind: Kind
    keys: LockKeys
    ttl: float
    # how messages speak of the object ("lock 'x'", "candidate 'x' is not leading"...)
    words: Words = LOCK_WORDS
    ttl_ms: int = field(init=False)
    # the object in messages: its kind and the name the user gave, never a Redis key
    what: str = field(init=False)
    acquire_keys: tuple[str, ...] = field(init=False)
    release_keys: tuple[str, ...] = field(init=False)
    renewed_keys: tuple[str, ...] = field(init=False)  # what the watchdog renews (renew.lua)
    # the local queue of the name's grants of this kind (singleflight.py); an object that
    # queues alone (``AsyncLease``) has one of its own beside it
    line: str = field(init=False)

    def __post_init__(self) -> None:
        kind, keys = self.kind, self.keys
        for name, value in (
            ("ttl_ms", ttl_to_ms(self.ttl)),
            ("acquire_keys", kind.acquire_keys(keys)),
            ("release_keys", kind.release_keys(keys)),
            ("renewed_keys", kind.renewed_keys(keys)),
            ("line", f"{keys.lock}:{kind.line_tag()}"),
            ("what", kind.describe(self.words.noun, self.name)),
        ):
            object.__setattr__(self, name, value)  # (a frozen dataclass sets its own fields so)

    @classmethod
    def of(cls, kind: Kind, name: str, prefix: str, ttl: float, words: Words) -> LeaseSpec:
        return cls(name, kind, kind.keys(name, prefix), ttl, words)

    def with_kind(self, kind: Kind) -> LeaseSpec:
        """The same object's spec for another kind of the same keys (a semaphore asking for
        other permits, a writer downgraded to a reader)."""
        return LeaseSpec(self.name, kind, self.keys, self.ttl, self.words)

    @property
    def primitive(self) -> str:
        return self.kind.primitive

    def acquire_args(
        self, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        return self.kind.acquire_args(self, holder, depth, block, entry, publish)

    def release_args(
        self, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        return self.kind.release_args(self, holder, leaving, publish, depth)


def renewal(
    specs: Sequence[LeaseSpec], holders: Sequence[str], ttls_ms: Sequence[int]
) -> tuple[list[str], list[str | int]]:
    """renew.lua's KEYS and ARGV for a batch of grants (``holders[i]``'s of ``specs[i]``, for
    ``ttls_ms[i]``): every key each grant renews (a multi-lock's: one per name)."""
    keys: list[str] = []
    args: list[str | int] = []
    for spec, holder, ttl_ms in zip(specs, holders, ttls_ms, strict=True):
        for key in spec.renewed_keys:
            # a lock key that holds its token stands for its counter too: the script then names
            # no key a Cluster's slot migration has yet to move (TRYAGAIN until it ends)
            keys += (key, key) if spec.kind.token_in_key else renew_keys([key])
            args += (holder, ttl_ms)
    return keys, args


def per_grant(
    specs: Sequence[LeaseSpec], answers: Sequence[int | LockError]
) -> list[int | LockError]:
    """renew.lua's answers, one per key (``renewal``), as one per grant."""
    if len(answers) == len(specs):  # (one key each: the answers are the grants')
        return list(answers)
    each = iter(answers)
    return [renewed_all([next(each) for _ in spec.renewed_keys]) for spec in specs]
