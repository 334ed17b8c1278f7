# GENERATED from src/fencelock/_async/client.py by tools/gen_sync.py: edit that file instead.
"""The client: one per application (or per process), shared by all its primitive objects.

It only checks what it is given and wires the parts that must not be per object: the topology
(``connect.py``: the connections, the pub/sub listener per server), the one watchdog that renews
every lease, the local queues and the counters. Each factory method checks its options once and
hands them, with the wiring, to the object it makes.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Never, Self, TypeVar, Unpack, cast

from .._backend import SYNC_CAN_CANCEL, SyncStateLock, sync_public_name
from .._core.compute import COMPUTE, IDEMPOTENT, MAX_SIZE, SyncCompute, Codec, KeyOf
from .._core.inspection import ForceReleased, LockInfo
from .._core.options import (
    CLIENT_KEYWORDS,
    DEFAULT,
    DEFAULT_MAX_HANDOFFS,
    DEFAULT_SOCKET_TIMEOUT,
    MULTI_LOCK_KEYWORDS,
    PARTICIPANT_KEYWORDS,
    ClientOptions,
    LeaseKeywords,
    LeaseOptions,
    MultiLockKeywords,
    ParticipantKeywords,
    refuse_unknown,
)
from .._core.replies import new_waiter_id
from .._core.stats import Counters, Statistics
from .._keys import DEFAULT_PREFIX, ttl_to_ms, validate_flag, validate_ttl
from .._live_clients import LIVE_CLIENTS
from .._transport import SyncRedis, SyncRedisCluster
from . import admin
from .compute import Results, computed
from .connect import abandoned, close, connect, from_urls
from .election import DEFAULT_POLICY, Election
from .engine import Wiring
from .latch import LATCH_KEEP, Barrier, Latch
from .lock import Lock
from .multilock import MultiLock, canonical_names
from .periodic import OncePer
from .resources import Resources, Value
from .rw_lock import ReadWriteLock
from .semaphore import Semaphore, at_most
from .versioned import Versioned

if TYPE_CHECKING:
    from .._glide import SyncGlideClients

T = TypeVar("T")
_F = TypeVar("_F", bound=Callable[..., Any])
Server = SyncRedis | SyncRedisCluster


class LockClient:
    """Distributed locks on one Redis server, a Redis Cluster, or several masters (Redlock).

    ``LockClient(redis.asyncio.Redis(...))``, ``LockClient([r1, r2, r3])`` (Redlock) or
    ``LockClient.from_url("redis://...")`` / ``LockClient.from_url([url1, url2, url3])``.
    Options: docs/api.md ("Client")."""

    def __init__(
        self,
        redis: Server | Sequence[SyncRedis] | SyncGlideClients,
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        max_poll: float | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        node_timeout: float | None = None,
        max_handoffs: int = DEFAULT_MAX_HANDOFFS,
        wake: str | None = None,
        label: Any = None,
        scripts: str = "auto",
        **mistyped: Never,
    ) -> None:
        refuse_unknown(sync_public_name(self), mistyped, CLIENT_KEYWORDS)
        options = ClientOptions.checked(
            prefix=prefix,
            socket_timeout=socket_timeout,
            max_poll=max_poll,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            node_timeout=node_timeout,
            max_handoffs=max_handoffs,
            wake=wake,
            label=label,
            scripts=scripts,
        )
        counters = Counters(SyncStateLock())
        topology = connect(redis, options, counters)
        self._wiring = wiring = Wiring.made(topology, options, counters, self)
        # the client's other sides, each an object of its own module: the resource writes, the
        # computed results, the operators' calls
        self._resources = Resources(topology, wiring.state)
        self._results = Results(wiring)
        self._operators = admin.Operators(topology, options.prefix, wiring.state)
        name = sync_public_name(self)
        self._finalizer = weakref.finalize(self, abandoned, name, wiring.watchdog, topology)
        self._finalizer.atexit = False  # at exit the daemon threads just stop
        LIVE_CLIENTS.add(self)

    @classmethod
    def from_url(
        cls,
        url: str | Sequence[str],
        *,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        **kwargs: Any,
    ) -> Self:
        """A client for ``url``; a list of URLs means Redlock over those masters."""
        refuse_unknown("from_url", kwargs, CLIENT_KEYWORDS)
        socket_timeout = validate_ttl(socket_timeout, "socket_timeout")
        return cls(from_urls(url, socket_timeout), socket_timeout=socket_timeout, **kwargs)

    def _options(
        self,
        call: str,
        name: object,
        ttl: object,
        given: LeaseKeywords | MultiLockKeywords,
        own: tuple[str, ...] = (),
    ) -> LeaseOptions:
        """The options of the object ``call`` (the factory) makes; ``own``: its other keywords."""
        self._wiring.state.check()
        label, threads = self._wiring.label, not SYNC_CAN_CANCEL
        return LeaseOptions.given(call, name, ttl, given, own, label=label, threads=threads)

    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        *,
        reentrant: bool = False,
        fair: bool = True,
        **options: Unpack[LeaseKeywords],
    ) -> Lock:
        """A lock on ``name`` (no request is sent until it is acquired); ``reentrant``: the
        same lock object may acquire it again; ``fair=False``: barging, a release wakes the
        first waiter and whoever asks first takes the name (docs/contention.md, "Barging").
        ``options``: ``timeout``, ``auto_renew``, ``on_lost``, ``on_lost_policy``, ``label``
        (docs/api.md)."""
        reentrant, fair = validate_flag("reentrant", reentrant), validate_flag("fair", fair)
        if reentrant and not fair:
            raise ValueError(
                "fair=False is for a simple lock: a reentrant lock's release wakes every "
                "waiter, and any of them or a newcomer may take the name (docs/contention.md)"
            )
        made = self._options("lock", name, ttl, options, ("reentrant", "fair"))
        return Lock(self._wiring, made, reentrant=reentrant, fair=fair)

    def multi_lock(
        self, names: Iterable[str], ttl: float = 30.0, **options: Unpack[MultiLockKeywords]
    ) -> MultiLock:
        """One lock over several ``names``, taken all or none (docs/multilock.md). Whatever the
        order given, the names are taken sorted and deduplicated, so two multi-locks sharing
        names can never deadlock. ``multi.tokens``: the fencing token of each name. No
        ``on_lost_policy``: its block ends by none (a ``TypeError``, not ignored)."""
        refuse_unknown("multi_lock", options, MULTI_LOCK_KEYWORDS)
        canonical = canonical_names(names)
        self._wiring.topology.protocol.require_scripts(
            "a multi-lock", "its names are taken all or none by scripts"
        )
        made = self._options("multi_lock", canonical[0], ttl, options)
        return MultiLock(self._wiring, canonical, made)

    def semaphore(
        self, name: str, limit: int, ttl: float = 30.0, **options: Unpack[LeaseKeywords]
    ) -> Semaphore:
        """A semaphore of ``limit`` permits on ``name``: each acquire takes some, each permit a
        lease of ``ttl`` (docs/semaphore.md). One master or a Cluster (not Redlock)."""
        return Semaphore(self._wiring, self._options("semaphore", name, ttl, options), limit)

    def rw_lock(
        self, name: str, ttl: float = 30.0, **options: Unpack[LeaseKeywords]
    ) -> ReadWriteLock:
        """A phase-fair read-write lock on ``name``: ``.read()`` and ``.write()`` make its lock
        objects, each holder with a lease of ``ttl`` (docs/rw_lock.md). One master or a Cluster."""
        return ReadWriteLock(self._wiring, self._options("rw_lock", name, ttl, options))

    def election(
        self,
        name: str,
        ttl: float = 10.0,
        *,
        timeout: float | None = None,
        label: Any = DEFAULT,
        on_lost: Callable[[Election], object] | None = None,
        on_lost_policy: str | None = None,
        **mistyped: Never,
    ) -> Election:
        """A candidate in the leader election ``name`` (docs/election.md): ``campaign()`` to
        lead for an auto-renewed lease of ``ttl``, its term a fencing token. ``label``: what
        ``leader()`` shows of it (default: the client's). ``on_lost_policy``: as a lock's
        (default "cancel" under asyncio, "raise" with threads)."""
        refuse_unknown("election", mistyped, ("timeout", "label", "on_lost", "on_lost_policy"))
        self._wiring.topology.protocol.require_scripts(
            "an election", "leader() and observe() read the term by scripts"
        )
        policy = DEFAULT_POLICY if on_lost_policy is None else on_lost_policy
        given = LeaseKeywords(timeout=timeout, label=label, on_lost=on_lost, on_lost_policy=policy)
        options = self._options("election", name, ttl, {**given, "auto_renew": True})
        return Election(self._wiring, options)

    def latch(
        self,
        name: str,
        count: int,
        ttl: float = 30.0,
        *,
        participant: str | None = None,
        keep: float = LATCH_KEEP,
        **options: Unpack[ParticipantKeywords],
    ) -> Latch:
        """A countdown latch of ``count`` on ``name``, as one participant (docs/latch.md): it
        counts down once per generation by its id (``participant``, default a new one), and
        may join with a lease of ``ttl``. ``keep``: seconds an unused latch stays in Redis."""
        made = self._participant("latch", name, ttl, participant, options)
        return Latch(self._wiring, made, count, ttl_to_ms(max(keep, made.ttl)))

    def barrier(
        self,
        name: str,
        parties: int,
        ttl: float = 30.0,
        *,
        keep: float = LATCH_KEEP,
        **options: Unpack[ParticipantKeywords],
    ) -> Barrier:
        """A double barrier of ``parties`` on ``name``, as one participant (docs/latch.md):
        ``enter()`` waits for them all, ``leave()`` for all to leave; each holds a lease of
        ``ttl`` meanwhile. ``keep``: seconds an unused barrier stays in Redis."""
        made = self._participant("barrier", name, ttl, None, options)
        return Barrier(self._wiring, made, parties, ttl_to_ms(max(keep, made.ttl)))

    def _participant(
        self,
        call: str,
        name: str,
        ttl: float,
        participant: str | None,
        given: ParticipantKeywords,
    ) -> LeaseOptions:
        """A participant's options: renewed, labelled with its id (its holder token's label);
        the lease options it does not take refused (``ParticipantKeywords``), not ignored."""
        own = ("participant", "keep") if call == "latch" else ("keep",)
        refuse_unknown(call, given, (*own, *PARTICIPANT_KEYWORDS))
        label = new_waiter_id() if participant is None else participant
        return self._options(call, name, ttl, {**given, "auto_renew": True, "label": label}, own)

    def at_most(
        self,
        limit: int,
        name: str,
        *,
        ttl: float = 30.0,
        timeout: float | None = None,
        **mistyped: Never,
    ) -> Callable[[_F], _F]:
        """A decorator: at most ``limit`` runs of the function at once, across every process
        using this ``name``. Each run holds a permit, renewed while it runs (freed when the
        process dies), and waits up to ``timeout`` for one (``LockTimeout`` after that)."""
        refuse_unknown("at_most", mistyped, ("ttl", "timeout"))
        self.semaphore(name, limit, ttl, timeout=timeout)  # checks them now
        return at_most(self.semaphore, limit, name, ttl, timeout)

    def once_per(
        self,
        name: str,
        period: float | timedelta,
        *,
        ttl: float = 30.0,
        offset: float | timedelta = 0.0,
        timeout: float = 0.0,
        redis: Server | None = None,
        **mistyped: Never,
    ) -> OncePer:
        """A decorator for a periodic job that every runner of a fleet ticks: each ``period``
        (seconds or a timedelta, counted from the epoch + ``offset``), the first tick that takes
        the lock ``name`` runs it, and records the period with a fenced write; the other ticks
        return None (docs/scheduling.md). ``redis``: the server of the record (Redlock mode)."""
        refuse_unknown("once_per", mistyped, ("ttl", "offset", "timeout", "redis"))
        server = self._resources.server(redis, "once_per")
        return OncePer(
            self, name, period, ttl=ttl, offset=offset, timeout=timeout, redis=server
        )

    # -- fenced writes and versioned values (resources.py) ---------------------------------

    def fenced_set(
        self, key: str, value: Value, token: int, *, redis: Server | None = None
    ) -> None:
        """Write ``value`` to ``key`` only if ``token`` is >= every token seen for ``key``;
        otherwise raise ``StaleToken`` and write nothing."""
        self._resources.fenced_set(key, value, token, redis)

    def fenced_get(
        self, key: str, token: int, *, redis: Server | None = None
    ) -> bytes | None:
        """The value of ``key`` (bytes; None: no value), read for the holder of ``token``: in the
        same step every older token is refused from then on (``StaleToken`` here if ``token``
        is older itself), so no older holder's write can land between this read and this
        holder's ``fenced_set``."""
        return self._resources.fenced_get(key, token, redis)

    def fenced_update(
        self,
        key: str,
        token: int,
        fn: Callable[[bytes | None], Value],
        *,
        redis: Server | None = None,
    ) -> Value:
        """A fenced read-modify-write: ``fenced_get``, then write ``fn(value)`` if ``token`` is
        still the newest and the value is still the one read (``Conflict`` otherwise: someone
        wrote it without fencing, or with this token). Returns what was written. Two requests,
        each within one request timeout."""
        return self._resources.fenced_update(key, token, fn, redis)

    def versioned(self, key: str, *, redis: Server | None = None) -> Versioned:
        """``key`` as a versioned value, written by compare-and-set without any lock (see
        ``AsyncVersioned``). ``redis``: the server of the key (this client's by default;
        required in Redlock mode)."""
        return self._resources.versioned(key, redis)

    # -- results computed once (compute.py) --------------------------------------------------

    def compute_once(
        self,
        key: str,
        compute: SyncCompute[T],
        *,
        fresh_for: float,
        stale_for: float = 0.0,
        ttl: float = 30.0,
        timeout: float | None = None,
        codec: Codec | None = None,
        max_size: int = MAX_SIZE,
    ) -> T:
        """The result of ``compute()`` for ``key``, computed once across every process: the
        stored one while it is younger than ``fresh_for`` seconds; else one caller runs
        ``compute`` under a lease of ``ttl`` (renewed while it runs) and stores its result,
        and every other caller waits for it (up to ``timeout``: ``LockTimeout``) and returns
        it. With ``stale_for``, a result up to that much older is returned at once while one
        caller refreshes it. ``codec``: how the result is stored (JSON by default), at most
        ``max_size`` bytes (``ResultError``). Waiters of a build that raised get
        ``ComputeFailed``. docs/compute_once.md."""
        call = self._results.call(
            COMPUTE,
            key,
            compute,
            fresh_for=fresh_for,
            stale_for=stale_for,
            ttl=ttl,
            timeout=timeout,
            codec=codec,
            max_size=max_size,
        )
        return cast(T, self._results.get(call))

    def idempotent(
        self,
        key: str,
        compute: SyncCompute[T],
        *,
        fingerprint: str | bytes | None = None,
        keep_for: float = 86400.0,
        timeout: float | None = None,
        ttl: float = 30.0,
        codec: Codec | None = None,
        max_size: int = MAX_SIZE,
    ) -> T:
        """Run ``compute`` once per idempotency ``key`` (as the IETF Idempotency-Key draft
        says): a repeat while it runs waits for it (up to ``timeout``), a repeat within
        ``keep_for`` seconds after gets its stored result, a repeat with another
        ``fingerprint`` (the request body's digest; None: not checked) is refused with
        ``FingerprintMismatch``, and a first attempt that died is taken over when its lease of
        ``ttl`` ends, with a larger fencing token. The rest as ``compute_once``'s."""
        call = self._results.call(
            IDEMPOTENT,
            key,
            compute,
            fresh_for=keep_for,
            stale_for=0.0,
            ttl=ttl,
            timeout=timeout,
            codec=codec,
            max_size=max_size,
            fingerprint=fingerprint,
        )
        return cast(T, self._results.get(call))

    def computed(
        self,
        key: KeyOf,
        *,
        fresh_for: float,
        stale_for: float = 0.0,
        ttl: float = 30.0,
        timeout: float | None = None,
        codec: Codec | None = None,
        max_size: int = MAX_SIZE,
    ) -> Callable[[_F], _F]:
        """A decorator: the function's result computed once across processes per key, with
        ``compute_once``. ``key``: a template of the function's parameters
        (``"report:{user_id}"``), or a function of its arguments that returns the key."""
        ask: dict[str, Any] = {"fresh_for": fresh_for, "stale_for": stale_for, "ttl": ttl}
        ask.update(timeout=timeout, codec=codec, max_size=max_size)
        return computed(self._results, self.compute_once, key, ask)

    def forget(self, key: str) -> bool:
        """Drop the result stored for ``key`` (after a write to what it was computed from):
        the next call builds afresh, and a build under way now cannot store its result (it
        may have read the data before the write; its caller still gets it). True if a stored
        result was dropped."""
        return self._results.forget(key)

    # -- the operators' calls (admin.py, docs/operations.md) ---------------------------------

    def inspect(self, name: str) -> LockInfo | None:
        """The lock on ``name`` as the server shows it now (Redlock: as a majority of nodes
        hold it): holder, label, ttl, fencing token, kind, queued waiters; when no lock of that
        name is held, its semaphore, read-write lock or latch, with every holder. None when
        nothing is held. One script per kind looked at, each within one request timeout."""
        return self._operators.inspect(name)

    def locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        """Whatever is held (locks, semaphores, read-write locks, latches) under names that match
        ``pattern`` (a Redis glob over names), found by SCAN on every server of this client: a
        name released meanwhile is left out, one taken meanwhile may be. Each SCAN call and each
        inspection is bounded by one request timeout."""
        for info in self._operators.locks(pattern):
            yield info

    def force_release(self, name: str, *, token: int | None = None) -> ForceReleased:
        """An administrator's release of ``name``, whoever holds it; with ``token`` (the
        fencing token ``inspect`` showed) only if that grant still holds. The waiters are served
        as by a release; the next grant gets a larger token, so the forced-out holder's fenced
        writes are refused, and its next renewal, extend, release or held() reports the loss.
        Logged on the "fencelock.admin" logger."""
        return self._operators.force_release(name, token)

    # -- the client itself ---------------------------------------------------------------------

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} prefix={self.prefix!r}{' closed' if self.closed else ''}>"

    @property
    def prefix(self) -> str:
        return self._wiring.prefix

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: every call of the client and its objects refuses."""
        return self._wiring.state.closed

    def statistics(self) -> Statistics:
        """What this client's locks have done so far, and what they hold and wait for now."""
        return self._wiring.counters.snapshot(queued=self._wiring.queues.queued())

    # -- closing ---------------------------------------------------------------------------

    def retire(self) -> None:
        """Closed as one collected unclosed is (from a finalizer: waiting for nothing), without
        the warning: fencelock.compat's client of an application's redis client just collected."""
        if self._finalizer.detach() is not None:
            self._wiring.state.closed = True
            abandoned(None, self._wiring.watchdog, self._wiring.topology)

    def close(self) -> None:
        """Stop the watchdog and the listeners and close fencelock's connections. From then on
        every call of the client, and of the objects it made, raises ``ClientClosed``."""
        self._finalizer.detach()
        self._wiring.state.closed = True
        LIVE_CLIENTS.discard(self)
        close(self._wiring.watchdog, self._wiring.topology)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
