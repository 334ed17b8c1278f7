"""asyncio leases renewed off the event loop.

An asyncio lease renewed by a task of the loop dies with the loop's responsiveness: one blocking
call inside the block (a sync database driver, CPU work, a slow logging handler) longer than
the lease, and another client takes the lock although the process lived and worked the whole
time. So the asyncio client renews as the sync one does: the sync watchdog, in a thread of its
own, over a twin of the client's topology with connections of its own to the same servers
(``renewal_twin``). What it finds is delivered back onto the loop: a loss is declared there
(``on_lost``, a cancelled block, the metrics), as it always was.

A process paused as a whole (SIGSTOP, a long garbage collection) pauses this thread too: its
leases run out, and when it runs again the renewal finds them gone and declares them lost;
``check()`` and the local deadline say so even before, and fencing refuses the paused holder's
writes.

The loop's stalls are reported (``LoopMonitor``): a task of the loop wakes at short intervals
while leases are held; when it wakes late by more than a third of the shortest lease held, the
loop was blocked that long, which the renewals survived but the rest of the application may
not have: a warning on the ``fencelock.watchdog`` logger and a ``LoopStalled`` event (the
``fencelock_event_loop_stall_seconds`` metric).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from functools import partial
from typing import Any

from . import _events as events
from ._async.topology import AsyncTopology
from ._async.watchdog import Lose
from ._core.kinds import LeaseSpec, Released
from ._core.lease import Grant
from ._core.quorum import socket_limit
from ._core.routing import CLUSTER, GLIDE, QUORUM
from ._core.stats import Counters
from ._glide import sync_glide_like
from ._sync.routes import route as sync_route
from ._sync.topology import SyncTopology
from ._sync.watchdog import Watchdog as SyncWatchdog
from ._transport import sync_client_like, sync_cluster_like
from .errors import LockConnectionError, LockError

logger = logging.getLogger("fencelock.watchdog")

# How often the loop monitor wakes, as a part of the shortest lease held (and at most this).
MONITOR_FRACTION = 10
MONITOR_PERIOD_MAX = 0.1


def renewal_twin(topology: AsyncTopology, counters: Counters) -> Callable[[], SyncTopology]:
    """How to make a sync topology over the same servers as ``topology``, on connections of
    its own: what the renewal thread renews with (one request at a time, batched: a few
    connections). Made from the route's settings, with sync clients of the same servers: what
    it needs of the asyncio client is read now, on the client's loop; the making, a Cluster
    client's discovery of its slots (I/O), is the call's."""
    settings = topology.route.settings
    timeout = settings.request_timeout
    # (the client's own ScriptMode: what the one learns, the other knows)
    mode = topology.protocol.mode
    # Redlock's nodes: each socket within the node timeout, as the route's own clients of them
    # (connect.py). A fan-out's connecting is not bounded by its caller's timeout: with the
    # request timeout, a hung node would hold the renewal thread (every lease of the client)
    # past the leases' deadlines each time its connection is made again.
    limit = socket_limit(settings.node_timeout) if settings.shape == QUORUM else timeout
    clients: tuple[Any, ...] = ()
    deferred: list[Callable[[], Any]] = []  # (made in the call: their making is I/O)
    if settings.client == GLIDE:
        deferred = [sync_glide_like(server, limit) for server in settings.servers]
    elif settings.shape == CLUSTER:
        deferred = [sync_cluster_like(server, timeout) for server in settings.servers]
    else:
        clients = tuple(sync_client_like(server, limit) for server in settings.servers)

    def make() -> SyncTopology:
        made: list[Any] = []
        try:
            for making in deferred:
                made.append(making())
            twin = replace(settings, servers=clients + tuple(made), owned=True, listens=False)
            return SyncTopology(sync_route(twin), counters, mode)
        except BaseException:
            for client in made:  # (made again at the next request: these would be left open)
                client.close()
            raise

    return make


class DeferredTwin:
    """The renewal thread's grants: those of ``renewal_twin`` of the client's topology, made
    in a thread of its own from the first lease on, never on the loop. A Cluster's twin is a
    ``RedisCluster``, which discovers the slots as it is made: a round trip to a node, and a
    timeout more for each node that does not answer first, which no task of the loop may wait
    for. The renewals keep their schedule: the first is due a third of the way into the lease,
    the twin made meanwhile; a request asked of it before it is ready waits for it within its
    own bound, and fails as an unanswered one would (tried again, as a renewal is, until the
    lease's deadline). A twin that could not be made (no node answered) is made again at the
    next request."""

    def __init__(self, topology: AsyncTopology, counters: Counters) -> None:
        self._make = renewal_twin(topology, counters)
        self.request_timeout = topology.grants.request_timeout
        self.node_count = topology.grants.node_count
        self._closed = False
        self._maker, self._twin = self._start()

    def _start(self) -> tuple[threading.Thread, Future[SyncTopology]]:
        twin: Future[SyncTopology] = Future()

        def make() -> None:
            try:
                twin.set_result(self._make())
            except BaseException as exc:
                twin.set_exception(exc)

        maker = threading.Thread(target=make, name="fencelock-watchdog-connect", daemon=True)
        maker.start()
        return maker, twin

    def _ready(self, timeout: float) -> SyncTopology:
        """(In the renewal thread) the twin, made within ``timeout`` seconds."""
        if self._closed:
            raise LockConnectionError("the client is closed")
        if not self._twin.done() and not self._maker.is_alive():  # (a forked child's)
            self._maker, self._twin = self._start()
        try:
            return self._twin.result(max(timeout, 0.0))
        except FutureTimeout:
            raise LockConnectionError(
                "the renewal connections are still being made: the servers are slow to answer"
            ) from None
        except Exception as exc:
            self._maker, self._twin = self._start()  # (for the next request)
            raise LockConnectionError(f"cannot connect to renew the leases: {exc}") from exc

    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> Sequence[int | LockError]:
        end = time.monotonic() + timeout
        twin = self._ready(timeout)
        return twin.grants.renew(specs, holders, ttls, end - time.monotonic(), what)

    def release_at(self, spec: LeaseSpec, holder: str, node: int, timeout: float) -> Released:
        end = time.monotonic() + timeout
        twin = self._ready(timeout)
        return twin.grants.release_at(spec, holder, node, end - time.monotonic())

    def close(self) -> None:
        """Close the twin: now, or as soon as it is made."""
        self._closed = True
        self._twin.add_done_callback(_close_made)


def _close_made(twin: Future[SyncTopology]) -> None:
    if not twin.cancelled() and twin.exception() is None:
        twin.result().close()


def _on_loop(loop: asyncio.AbstractEventLoop, lose: Lose, grant: Grant, found: str,
             other_holder: bool) -> None:  # fmt: skip
    """Declare a loss found by the renewal thread on the loop of its lock object."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to hear
        loop.call_soon_threadsafe(partial(lose, grant, found, other_holder=other_holder))


class OffLoopWatchdog:
    """The asyncio client's watchdog: the sync watchdog's thread over ``DeferredTwin`` (from
    the first lease, or the first late give-back), and ``LoopMonitor``. The same calls as the
    watchdog of the loop."""

    def __init__(self, topology: AsyncTopology, counters: Counters) -> None:
        self._topology = topology
        self._counters = counters
        self._guard = threading.Lock()
        self._twin: DeferredTwin | None = None
        self._watchdog: SyncWatchdog | None = None
        self._ttls: weakref.WeakKeyDictionary[Grant, float] = weakref.WeakKeyDictionary()
        self._monitor = LoopMonitor(self._shortest)
        self._closed = False

    def __len__(self) -> int:
        return 0 if self._watchdog is None else len(self._watchdog)

    def _shortest(self) -> float | None:
        return min(self._ttls.values(), default=None)

    def _worker(self) -> SyncWatchdog:
        with self._guard:
            if self._watchdog is None:
                self._twin = DeferredTwin(self._topology, self._counters)
                slot_of = self._topology.traits.slot_of  # (the same rule on both sides: no I/O)
                self._watchdog = SyncWatchdog(self._twin, slot_of, self._counters)
            return self._watchdog

    def track(self, grant: Grant, spec: LeaseSpec, lose: Lose) -> None:
        loop = asyncio.get_running_loop()
        watchdog = self._worker()
        self._ttls[grant] = spec.ttl
        watchdog.track(grant, spec, lose, deliver=partial(_on_loop, loop))
        self._monitor.watch(loop, spec.ttl)

    def untrack(self, grant: Grant) -> None:
        self._ttls.pop(grant, None)
        if self._watchdog is not None:
            self._watchdog.untrack(grant)

    def give_back_late(self, spec: LeaseSpec, holder: str) -> None:
        """Given back by the renewal thread too, off the loop (``giveback.py``)."""
        if not self._closed:
            self._worker().give_back_late(spec, holder)

    def abandon(self) -> None:
        if self._watchdog is not None:
            self._watchdog.abandon()

    async def close(self) -> None:
        self._closed = True  # (a clean-up still running may hand a give-back over: too late)
        self._monitor.stop()
        self._ttls.clear()
        watchdog, twin = self._watchdog, self._twin
        if watchdog is not None:
            await asyncio.to_thread(watchdog.close)  # (joins its thread, bounded)
        if twin is not None:
            await asyncio.to_thread(twin.close)


class LoopMonitor:
    """A task of the loop that wakes at short intervals while leases are held (``shortest``:
    the shortest ttl held, None when none), and reports a wake-up late by more than a third of
    it: the loop was blocked that long."""

    def __init__(self, shortest: Any) -> None:
        self._shortest = shortest
        self._task: asyncio.Task[None] | None = None

    def watch(self, loop: asyncio.AbstractEventLoop, ttl: float) -> None:
        if self._task is None or self._task.done():
            # (counted from now: the loop may be blocked before the task first runs)
            watching = self._run(loop, loop.time(), ttl)
            self._task = loop.create_task(watching, name="fencelock-loop-monitor")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self, loop: asyncio.AbstractEventLoop, due: float, ttl: float) -> None:
        while True:
            # how late this step ran: the loop was blocked that long (with leases of ``ttl``
            # held then, whether or not they are still held now)
            blocked = loop.time() - due
            if blocked > ttl / 3:
                _stalled(blocked, ttl)
            shortest = self._shortest()
            if shortest is None:
                return
            ttl = shortest
            period = min(ttl / MONITOR_FRACTION, MONITOR_PERIOD_MAX)
            due = loop.time() + period
            await asyncio.sleep(period)


def _stalled(seconds: float, ttl: float) -> None:
    if events.on:
        events.emit(events.LoopStalled(seconds, ttl))
    logger.warning(
        "fencelock: the event loop was blocked for about %.3f s, more than a third of the "
        "shortest lease held (%g s): the leases were renewed off the loop, but a blocking call "
        "in async code holds up every other task",
        seconds,
        ttl,
        extra={"event": "loop_stalled", "seconds": seconds, "ttl": ttl},
    )
