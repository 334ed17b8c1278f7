"""Where the time of a cross-process hand-off goes: fencelock's wake path, step by step.

    python -m bench.wake_path [--handoffs 3000] [--warmup 200] [--repeat 3] [--gap 1]
                              [--releaser idle|reacquire] [--only NAME ...] [--url redis://...]
    python -m bench.wake_path --count [--instructions] [--handoffs 200] [--url redis://...]

Two spawned processes pass one lock back and forth (each is in turn the holder and the waiter, so
both sides are measured; no hold time). A hand-off goes from ``release()`` called in the holder
A to the return of the blocked ``acquire()`` in the waiter B. Every step is stamped with
``time.monotonic()``, which is CLOCK_MONOTONIC on Linux and so shared by the two processes:

* ``t0``/``t1``: A calls ``release()`` / it returns.
* ``tcr``: B's pub/sub listener thread comes back from ``poll()`` with the message to read (the
  hiredis parser's ``can_read`` returned True; the instance method is wrapped).
* ``t2``: the message is handed to fencelock (the waiter's ``_deliver`` is wrapped).
* ``tw``: the waiting thread's ``wait()`` returns True (the ``threading.Event`` was set).
* ``ts``/``tr``: the re-try of the acquire script is sent / its reply is parsed (``try_acquire``
  wrapped: the last, granted, try).
* ``t3``: ``acquire()`` returns in B (after the ``with client.watch(...)`` block ends, which sends
  ``UNSUBSCRIBE``; ``tu0``/``tu1`` time that call).

The holder releases only when the waiter is parked: the waiter's wrapped ``wait()`` sends
"ready" on a pipe just before it blocks (only after a re-try that found the lock busy, so never
in the releaser-yield wait), and the holder then sleeps ``--gap`` ms, as long as the waiter needs
to be asleep in the kernel, before it calls ``release()``. With ``--releaser idle`` (default) the
releaser then waits, idle, until the waiter has the lock before it asks for the lock again, so the
measured path runs alone; ``--releaser reacquire`` asks again at once (as in
``bench.compare``'s P2: the releaser's own acquire, its yield to the woken waiter, its SUBSCRIBE
and PING, run during the hand-off). A hand-off is kept for the breakdown only when its stamps are
in order and the waiter was woken by the message (not by its fallback poll); the others are
counted as dropped.

``fencelock, fewer stamps`` is the same hand-off with only the wrappers the gating needs
(``try_acquire`` and ``client.wait``), to show what the listener-side stamps cost.

The same harness measures what the wake path could cost at best, with bare redis-py between two
processes (the same pipe, the same gap):

* ``pubsub, same thread``: ``PUBLISH`` in A; B's only thread is blocked in
  ``pubsub.get_message(timeout=0.5)``, as fencelock's listener is.
* ``pubsub + thread hop``: the same, but B's reader thread sets a ``threading.Event`` that B's
  main thread waits on (``Event.wait(timeout)``): fencelock's shape without fencelock.
* ``LPUSH -> BLPOP``: B's only thread is blocked in ``BLPOP``.
* ``python-redis-lock``: its ``Lock`` handing over between the processes: the release script
  ``LPUSH``-es a signal, the waiter comes back from ``BLPOP`` (``tb``) and re-tries ``SET NX``
  (``ts``/``tr``), on the waiting thread itself.
* ``round trips``: one process, after sleeping ``--gap`` ms (the state every hand-off above
  starts from) and back to back: ``PING``; ``SET NX EX`` (python-redis-lock's re-try); and
  fencelock's re-try itself (``try_acquire`` on a free lock).

Reported per step: p50, p99 and mean over the kept hand-offs of one run, and the step's share of
the mean hand-off (means add up along the path, percentiles do not); then the median over
``--repeat`` runs with the min and max, and the 1-minute load average after each run (other
work on the machine is the main source of noise). The scenarios run in an order rotated by the
repetition and reversed on every other one. With ``--url`` keys named ``wake-path:*`` are
written to that server.

``--count`` reads no clock: it counts what each stage of the same hand-off calls (Python
functions, and C functions), sync and asyncio, in one process: A holds, B (a thread, or a task,
with a client of its own) waits, A releases once B waits (the release grants B the lock and
publishes the grant), B's listener reads and dispatches the message, B's ``acquire()`` returns;
B releases and A takes the lock again. The load of the machine does not change these counts: a
change to the path shows as a change of them. Reported per stage: the median over the
hand-offs in which B was woken by the grant's message (no re-try). With ``--instructions``
(valgrind installed) the same hand-offs run under valgrind's callgrind, without the counting,
and each thread's instructions per hand-off are reported instead: A's, B's and B's listener's
(sync), the loop's (asyncio).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import itertools
import math
import multiprocessing
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import redis

import fencelock
import fencelock.asyncio
from fencelock._core.replies import Granted
from fencelock_tools.servers.embedded import EmbeddedServer

from ._common import callgrind_total

SOCKET_TIMEOUT: Final = 5.0
TTL: Final = 30.0  # s: far longer than any run; a lease never runs out here
WAIT_LIMIT: Final = 30.0  # s: a blocked step that takes longer than this is a failure
READ_TIMEOUT: Final = 0.5  # s: one pub/sub read, as fencelock's listener does
PREFIX: Final = "wake-path"

mono = time.monotonic
NAN: Final = math.nan

Stamps = dict[str, float]
Parked = Callable[[], None]


class BenchError(RuntimeError):
    pass


def _wrap(obj: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``obj.name`` (an instance attribute shadowing the method) by ``make(original)``."""
    setattr(obj, name, make(getattr(obj, name)))


def _redis(url: str) -> redis.Redis:
    # the settings LockClient.from_url uses
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


def _stamp_can_read(connection: Any, sink: Callable[[float], None]) -> None:
    """Report when the connection's parser comes back from ``poll()`` with data to read."""
    parser = connection._parser

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def can_read(timeout: float = 0) -> Any:
            readable = original(timeout)
            if readable:
                sink(mono())
            return readable

        return can_read

    _wrap(parser, "can_read", make)


# -- the two sides of a hand-off -------------------------------------------------------------


class Side:
    """One process's part: ``release`` hands over (returns t0, t1), ``acquire`` blocks until the
    peer hands over (calling ``parked`` just before it blocks) and returns its stamps."""

    def start_holding(self) -> None:
        pass

    def release(self) -> tuple[float, float]:
        raise NotImplementedError

    def acquire(self, parked: Parked) -> Stamps:
        raise NotImplementedError

    def finish(self) -> None:
        """Give up what is held at the end (the peer is gone: nobody is to be woken)."""

    def close(self) -> None:
        pass


class FencelockSide(Side):
    """``listener``: also stamp the listener thread and the UNSUBSCRIBE (without: only what the
    gating needs, the acquire script's tries and the waits, to see what the stamps cost)."""

    def __init__(self, url: str, name: str, listener: bool = True) -> None:
        self.client = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)
        self.lock = self.client.lock(name, ttl=TTL)
        self.waiter = self.client._wiring.topology.route.waiters[0]
        self.parked: Parked | None = None
        self.busy = False
        self.tries: list[tuple[float, float, bool]] = []
        self.waits: list[tuple[float, bool]] = []
        self.messages: list[list[float]] = []  # [tcr, t2 (entry), t2x (exit)] per message
        self.unwatches: list[tuple[float, float]] = []
        self.readable = NAN
        self.parser: object = None
        self.listener = listener
        # (the grants and topology are this client's alone: wrapping them stamps this client's
        # tries and waits only)
        _wrap(self.client._wiring.grants, "try_acquire", self._make_try)
        _wrap(self.client._wiring.topology, "wait", self._make_wait)
        if listener:
            _wrap(self.waiter, "_deliver", self._make_deliver)
            _wrap(self.waiter, "unwatch", self._make_unwatch)

    def _make_try(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def try_(*args: Any, **kwargs: Any) -> Any:
            sent = mono()
            result = original(*args, **kwargs)
            granted = isinstance(result, Granted)
            self.tries.append((sent, mono(), granted))
            self.busy = not granted
            return result

        return try_

    def _make_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wait(watch: Any, timeout: float) -> Any:
            if self.busy and self.parked is not None:  # after a busy re-try, not the yield
                self.busy = False
                self.parked()
            woken = original(watch, timeout)
            self.waits.append((mono(), bool(woken)))
            return woken

        return wait

    def _make_deliver(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def deliver(channel: bytes, data: bytes) -> None:
            # stamped before the call: the waiting thread may look before it has returned
            stamps = [self.readable, mono(), NAN]
            self.messages.append(stamps)
            original(channel, data)
            stamps[2] = mono()

        return deliver

    def _make_unwatch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def unwatch(*args: Any, **kwargs: Any) -> Any:
            began = mono()
            result = original(*args, **kwargs)
            self.unwatches.append((began, mono()))
            return result

        return unwatch

    def _set_readable(self, when: float) -> None:
        self.readable = when

    def _stamp_listener(self) -> None:
        pubsub = self.waiter._pubsub
        connection = None if pubsub is None else pubsub.connection
        parser = None if connection is None else getattr(connection, "_parser", None)
        if parser is not None and parser is not self.parser:  # made (again) since last time
            self.parser = parser
            _stamp_can_read(connection, self._set_readable)

    def start_holding(self) -> None:
        if not self.lock.acquire(timeout=0):
            raise BenchError("fencelock: the lock was busy at the start")

    def release(self) -> tuple[float, float]:
        t0 = mono()
        self.lock.release()
        return t0, mono()

    def acquire(self, parked: Parked) -> Stamps:
        if self.listener:
            self._stamp_listener()
        self.tries, self.waits, self.messages, self.unwatches = [], [], [], []
        self.busy, self.parked = False, parked
        if not self.lock.acquire(timeout=WAIT_LIMIT):
            raise BenchError(f"fencelock: not acquired in {WAIT_LIMIT:g} s")
        t3 = mono()
        self.parked = None
        granted = [t for t in self.tries if t[2]]
        if granted:
            ts, tr = granted[-1][:2]
            waits = [w for w in self.waits if w[0] <= ts]
            tw, woken = waits[-1] if waits else (NAN, False)
        else:  # the release granted the lock with its wake-up: no re-try
            tw, woken = self.waits[-1] if self.waits else (NAN, False)
            ts = tr = tw
        messages = [m for m in self.messages if m[1] <= tw]
        tcr, t2, t2x = messages[-1] if messages else [NAN, NAN, NAN]
        tu0, tu1 = self.unwatches[-1] if self.unwatches else (NAN, NAN)
        return {
            "t3": t3, "tcr": tcr, "t2": t2, "t2x": t2x, "tw": tw, "ts": ts, "tr": tr,
            "tu0": tu0, "tu1": tu1, "woken": float(woken), "tries": float(len(self.tries)),
        }  # fmt: skip

    def finish(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.client.close()


class RedisLockSide(Side):
    """python-redis-lock: ``SET NX``, else ``BLPOP`` on the signal list; re-try on a signal."""

    def __init__(self, url: str, name: str) -> None:
        module = importlib.import_module("redis_lock")
        self.redis = _redis(url)
        self.lock = module.Lock(self.redis, name, expire=int(TTL))
        self.parked: Parked | None = None
        self.sets: list[tuple[float, float, bool]] = []
        self.pops: list[float] = []
        _wrap(self.redis, "set", self._make_set)
        _wrap(self.redis, "blpop", self._make_blpop)

    def _make_set(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def set_(*args: Any, **kwargs: Any) -> Any:
            sent = mono()
            result = original(*args, **kwargs)
            self.sets.append((sent, mono(), bool(result)))
            return result

        return set_

    def _make_blpop(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def blpop(*args: Any, **kwargs: Any) -> Any:
            if self.parked is not None:
                self.parked()
            result = original(*args, **kwargs)
            self.pops.append(mono() if result is not None else NAN)
            return result

        return blpop

    def start_holding(self) -> None:
        if not self.lock.acquire(blocking=False):
            raise BenchError("python-redis-lock: the lock was busy at the start")

    def release(self) -> tuple[float, float]:
        t0 = mono()
        self.lock.release()
        return t0, mono()

    def acquire(self, parked: Parked) -> Stamps:
        self.sets, self.pops, self.parked = [], [], parked
        if not self.lock.acquire(blocking=True):
            raise BenchError("python-redis-lock: not acquired")
        t3 = mono()
        self.parked = None
        granted = [s for s in self.sets if s[2]]
        ts, tr = granted[-1][:2] if granted else (NAN, NAN)
        pops = [p for p in self.pops if p <= ts]
        tb = pops[-1] if pops else NAN
        return {"t3": t3, "tb": tb, "ts": ts, "tr": tr, "woken": float(not math.isnan(tb))}

    def finish(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.redis.close()


class PubSubSide(Side):
    """``PUBLISH`` to the peer's channel; read our own channel on this thread, or (``hop``) on a
    reader thread that sets an event the main thread waits on."""

    def __init__(self, url: str, name: str, me: int, hop: bool) -> None:
        self.redis = _redis(url)
        self.pubsub = self.redis.pubsub()  # type: ignore[no-untyped-call]
        self.mine, self.theirs = f"{name}:{me}", f"{name}:{1 - me}"
        self.pubsub.subscribe(self.mine)
        deadline = mono() + WAIT_LIMIT
        while (message := self.pubsub.get_message(timeout=READ_TIMEOUT)) is None or message[
            "type"
        ] != "subscribe":
            if mono() > deadline:
                raise BenchError("pub/sub: no subscription confirmation")
        self.readable = NAN
        _stamp_can_read(self.pubsub.connection, self._set_readable)
        self.hop = hop
        self.event = threading.Event()
        self.got: tuple[float, float] = (NAN, NAN)  # tcr, tg
        self.closing = False
        self.reader: threading.Thread | None = None
        if hop:
            self.reader = threading.Thread(target=self._read, name="wake-path-reader", daemon=True)
            self.reader.start()

    def _set_readable(self, when: float) -> None:
        self.readable = when

    def _read(self) -> None:
        while not self.closing:
            message = self.pubsub.get_message(timeout=READ_TIMEOUT)
            if message is not None and message["type"] == "message":
                self.got = (self.readable, mono())  # before set(): the main thread reads it
                self.event.set()

    def release(self) -> tuple[float, float]:
        t0 = mono()
        receivers = self.redis.publish(self.theirs, "1")
        t1 = mono()
        if receivers != 1:
            raise BenchError(f"PUBLISH reached {receivers} subscribers, not 1")
        return t0, t1

    def acquire(self, parked: Parked) -> Stamps:
        if self.hop:
            self.event.clear()
            parked()
            if not self.event.wait(WAIT_LIMIT):
                raise BenchError("pub/sub: no message")
            tw = mono()
            tcr, tg = self.got
            return {"t3": tw, "tcr": tcr, "tg": tg, "woken": 1.0}
        parked()
        deadline = mono() + WAIT_LIMIT
        while True:
            message = self.pubsub.get_message(timeout=READ_TIMEOUT)
            if message is not None and message["type"] == "message":
                tg = mono()
                return {"t3": tg, "tcr": self.readable, "tg": tg, "woken": 1.0}
            if mono() > deadline:
                raise BenchError("pub/sub: no message")

    def close(self) -> None:
        self.closing = True
        if self.reader is not None:
            self.reader.join(2 * READ_TIMEOUT + 1)
        self.pubsub.close()
        self.redis.close()


class ListSide(Side):
    """``LPUSH`` to the peer's list; ``BLPOP`` our own."""

    def __init__(self, url: str, name: str, me: int) -> None:
        self.redis = _redis(url)
        self.mine, self.theirs = f"{name}:{me}", f"{name}:{1 - me}"
        self.redis.delete(self.mine)

    def release(self) -> tuple[float, float]:
        t0 = mono()
        self.redis.lpush(self.theirs, "1")
        return t0, mono()

    def acquire(self, parked: Parked) -> Stamps:
        parked()
        popped = self.redis.blpop([self.mine], timeout=int(SOCKET_TIMEOUT) - 2)
        tb = mono()
        if popped is None:
            raise BenchError("BLPOP: nothing pushed")
        return {"t3": tb, "tb": tb, "woken": 1.0}

    def close(self) -> None:
        self.redis.close()


def make_side(scenario: str, url: str, name: str, me: int) -> Side:
    if scenario == "fencelock":
        return FencelockSide(url, name)
    if scenario == "fencelock, fewer stamps":
        return FencelockSide(url, name, listener=False)
    if scenario == "python-redis-lock":
        return RedisLockSide(url, name)
    if scenario == "pubsub, same thread":
        return PubSubSide(url, name, me, hop=False)
    if scenario == "pubsub + thread hop":
        return PubSubSide(url, name, me, hop=True)
    if scenario == "LPUSH -> BLPOP":
        return ListSide(url, name, me)
    raise ValueError(f"unknown scenario {scenario!r}")


# -- one run: two processes ------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    rounds: int  # releases before the last one (warm-up included)
    gap: float  # s: the holder sleeps this long once the waiter is parked
    reacquire: bool  # the releaser asks for the lock again at once


def _expect(conn: Connection, wanted: Sequence[str]) -> str:
    """The next message on the pipe among ``wanted`` (others are skipped)."""
    while True:
        if not conn.poll(WAIT_LIMIT):
            raise BenchError(f"no {'/'.join(wanted)} from the other process")
        kind: str = conn.recv()
        if kind in wanted:
            return kind


def _pair_worker(
    scenario: str, url: str, name: str, me: int, conn: Connection, count: Any, settings: Settings,
    out: Any,
) -> None:  # fmt: skip
    """One of the two processes. ``count`` (a shared int) counts the releases of both."""
    releases: list[tuple[float, float]] = []
    acquires: list[Stamps] = []
    try:
        side = make_side(scenario, url, name, me)
        try:

            def parked() -> None:
                conn.send("ready")

            if me == 0:
                side.start_holding()
                conn.send("start")
                holding = True
            else:
                _expect(conn, ["start"])
                holding = False
            while True:
                if not holding:
                    acquires.append(side.acquire(parked))
                    conn.send("got")
                    holding = True
                    continue
                if _expect(conn, ["ready", "stop"]) == "stop":
                    side.finish()  # the other process has left
                    break
                last = count.value >= settings.rounds
                if last:
                    conn.send("stop")
                time.sleep(settings.gap)
                releases.append(side.release())
                count.value += 1
                holding = False
                if last:
                    _expect(conn, ["got"])
                    break
                if not settings.reacquire:
                    _expect(conn, ["got"])
        finally:
            side.close()
        out.put((me, releases, acquires, None))
    except BaseException as exc:
        out.put((me, releases, acquires, f"{type(exc).__name__}: {exc}"))


def merge(
    releases: Sequence[Sequence[tuple[float, float]]], acquires: Sequence[Sequence[Stamps]]
) -> tuple[list[Stamps], int]:
    """Pair each acquire with the release just before it: a hand-off when the other process
    released (its t0, t1 added to the acquire's stamps); returns them and the re-takes (the
    releaser got the lock back itself)."""
    events: list[tuple[float, int, int, Stamps | tuple[float, float]]] = []
    for w in (0, 1):
        events += [(t0, 0, w, (t0, t1)) for t0, t1 in releases[w]]
        events += [(s["t3"], 1, w, s) for s in acquires[w]]
    events.sort(key=lambda e: (e[0], e[1]))
    handoffs: list[Stamps] = []
    retakes = 0
    last: tuple[int, tuple[float, float]] | None = None
    for _, kind, w, data in events:
        if kind == 0:
            assert isinstance(data, tuple)
            last = (w, data)
        elif last is not None:
            assert isinstance(data, dict)
            if last[0] == w:
                retakes += 1
            else:
                handoffs.append({**data, "t0": last[1][0], "t1": last[1][1]})
            last = None
    return handoffs, retakes


def pair_run(scenario: str, url: str, run: int, settings: Settings) -> tuple[list[Stamps], int]:
    ctx = multiprocessing.get_context("spawn")
    name = f"{PREFIX}:{scenario.replace(' ', '')}:{run}"
    ends = ctx.Pipe(duplex=True)
    count = ctx.Value("i", 0, lock=False)
    out = ctx.Queue()
    workers = [
        ctx.Process(
            target=_pair_worker,
            args=(scenario, url, name, me, ends[me], count, settings, out),
            daemon=True,
        )
        for me in (0, 1)
    ]
    try:
        for worker in workers:
            worker.start()
        limit = 60 + settings.rounds * (settings.gap + 0.05)
        results = sorted(out.get(timeout=limit) for _ in workers)
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
                worker.join()
    errors = sorted({error for *_, error in results if error})
    if errors:
        raise BenchError(f"{scenario}: {'; '.join(errors)}")
    return merge([r[1] for r in results], [r[2] for r in results])


def _round_trip_worker(url: str, n: int, gap: float, out: Any) -> None:
    """Round trips in one process: ``PING``; ``SET NX EX`` (python-redis-lock's re-try); and
    fencelock's re-try itself, ``try_acquire`` on a free lock (the acquire script, as the waiter
    sends it; the lock is deleted again, untimed). Each after sleeping ``gap``, then back to
    back."""
    try:
        with ExitStack() as stack:
            client = _redis(url)
            stack.callback(client.close)
            locks = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)
            stack.callback(locks.close)
            lock = locks.lock(f"{PREFIX}:round-trip", ttl=TTL)
            lock_key = lock._lease.spec.keys.lock
            set_key = f"{PREFIX}:round-trip:set"

            def ping() -> None:
                client.ping()

            def set_nx() -> None:
                if not client.set(set_key, secrets.token_urlsafe(20), nx=True, ex=int(TTL)):
                    raise BenchError("SET NX: the key was there")

            def acquire_script() -> None:
                grants = locks._wiring.grants
                holder = secrets.token_urlsafe(20)
                if not isinstance(grants.try_acquire(lock._lease.spec, holder), Granted):
                    raise BenchError("fencelock: the lock was busy")

            samples: dict[str, list[float]] = {}
            for label, op, key in (
                ("PING", ping, None),
                ("SET NX EX", set_nx, set_key),
                ("fencelock acquire script (try_acquire)", acquire_script, lock_key),
            ):
                for pause, when in ((gap, "after the gap"), (0.0, "back to back")):
                    times = samples.setdefault(f"{label}, {when}", [])
                    for i in range(n + 200):  # the first 200: warm-up
                        if pause:
                            time.sleep(pause)
                        t0 = mono()
                        op()
                        took = mono() - t0
                        if i >= 200:
                            times.append(took)
                        if key is not None:
                            client.delete(key)
        out.put((samples, None))
    except BaseException as exc:
        out.put(({}, f"{type(exc).__name__}: {exc}"))


def round_trip_run(url: str, n: int, gap: float) -> dict[str, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    worker = ctx.Process(target=_round_trip_worker, args=(url, n, gap, out), daemon=True)
    try:
        worker.start()
        samples, error = out.get(timeout=60 + 6 * (n + 200) * (gap + 0.01))
    finally:
        worker.join(10)
        if worker.is_alive():
            worker.kill()
            worker.join()
    if error:
        raise BenchError(f"round trips: {error}")
    result: dict[str, list[float]] = samples
    return result


# -- the steps reported ----------------------------------------------------------------------

# scenario -> (label, start stamp, end stamp); the last line is the whole hand-off
STEPS: Final[dict[str, list[tuple[str, str, str]]]] = {
    "fencelock": [
        ("release() call, A (t1-t0)", "t0", "t1"),
        ("release called -> B's listener has data (tcr-t0)", "t0", "tcr"),
        ("redis-py read+parse -> _deliver (t2-tcr)", "tcr", "t2"),
        ("= wake-up dispatched (t2-t0)", "t0", "t2"),
        ("_deliver body, listener side (t2x-t2)", "t2", "t2x"),
        ("_deliver + thread hop -> wait() returns (tw-t2)", "t2", "tw"),
        ("wait() returned -> re-try sent (ts-tw)", "tw", "ts"),
        ("re-try round trip, acquire script (tr-ts)", "ts", "tr"),
        ("grant -> acquire() returns (t3-tr)", "tr", "t3"),
        ("  of which UNSUBSCRIBE sent (tu1-tu0)", "tu0", "tu1"),
        ("= after dispatch (t3-t2)", "t2", "t3"),
        ("hand-off (t3-t0)", "t0", "t3"),
    ],
    "fencelock, fewer stamps": [
        ("release() call, A (t1-t0)", "t0", "t1"),
        ("release called -> wait() returns (tw-t0)", "t0", "tw"),
        ("wait() returned -> re-try sent (ts-tw)", "tw", "ts"),
        ("re-try round trip, acquire script (tr-ts)", "ts", "tr"),
        ("grant -> acquire() returns (t3-tr)", "tr", "t3"),
        ("hand-off (t3-t0)", "t0", "t3"),
    ],
    "python-redis-lock": [
        ("release() call, A (t1-t0)", "t0", "t1"),
        ("release called -> BLPOP returns in B (tb-t0)", "t0", "tb"),
        ("BLPOP returned -> re-try sent (ts-tb)", "tb", "ts"),
        ("re-try round trip, SET NX (tr-ts)", "ts", "tr"),
        ("grant -> acquire() returns (t3-tr)", "tr", "t3"),
        ("hand-off (t3-t0)", "t0", "t3"),
    ],
    "pubsub, same thread": [
        ("PUBLISH call, A (t1-t0)", "t0", "t1"),
        ("PUBLISH called -> B has data (tcr-t0)", "t0", "tcr"),
        ("redis-py read+parse+handle (tg-tcr)", "tcr", "tg"),
        ("PUBLISH called -> get_message returns (tg-t0)", "t0", "tg"),
    ],
    "pubsub + thread hop": [
        ("PUBLISH call, A (t1-t0)", "t0", "t1"),
        ("PUBLISH called -> B's reader has data (tcr-t0)", "t0", "tcr"),
        ("redis-py read+parse+handle (tg-tcr)", "tcr", "tg"),
        ("Event.set + thread hop -> wait() returns (tw-tg)", "tg", "t3"),
        ("PUBLISH called -> main thread runs (tw-t0)", "t0", "t3"),
    ],
    "LPUSH -> BLPOP": [
        ("LPUSH call, A (t1-t0)", "t0", "t1"),
        ("LPUSH called -> BLPOP returns (tb-t0)", "t0", "tb"),
    ],
}
SCENARIOS: Final = [*STEPS, "round trips"]

# the stamps in the order a hand-off passes them: the steps between two neighbours add up to it
PATHS: Final[dict[str, list[str]]] = {
    "fencelock": ["t0", "tcr", "t2", "tw", "ts", "tr", "t3"],
    "fencelock, fewer stamps": ["t0", "tw", "ts", "tr", "t3"],
    "python-redis-lock": ["t0", "tb", "ts", "tr", "t3"],
    "pubsub, same thread": ["t0", "tcr", "tg"],
    "pubsub + thread hop": ["t0", "tcr", "tg", "t3"],
    "LPUSH -> BLPOP": ["t0", "tb"],
}


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return NAN
    k = (len(ordered) - 1) * p / 100
    low = math.floor(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def kept(scenario: str, handoff: Stamps) -> bool:
    """The stamps are in order along the path, and the waiter was woken by the message."""
    times = [handoff.get(k, NAN) for k in PATHS[scenario]]
    if any(math.isnan(t) for t in times) or not handoff.get("woken"):
        return False
    return all(a <= b for a, b in itertools.pairwise(times)) and times[0] < times[1]


@dataclass
class RunFigures:
    """One run: per step, p50/p99/mean in seconds and the step's share of the mean hand-off
    (NaN for a step that is not one link of the path); how many hand-offs were kept."""

    steps: dict[str, tuple[float, float, float, float]]
    kept: int
    dropped: int
    retakes: int
    total_p50: float  # t3-t0 over every hand-off, dropped ones included


def figures(scenario: str, handoffs: list[Stamps], retakes: int) -> RunFigures:
    good = [h for h in handoffs if kept(scenario, h)]
    path = PATHS[scenario]
    links = set(itertools.pairwise(path))
    whole = statistics.fmean(h[path[-1]] - h[path[0]] for h in good) if good else NAN
    steps = {}
    for label, start, end in STEPS[scenario]:
        values = [h[end] - h[start] for h in good if not math.isnan(h.get(end, NAN) - h[start])]
        mean = statistics.fmean(values) if values else NAN
        share = mean / whole if (start, end) in links else NAN
        steps[label] = (percentile(values, 50), percentile(values, 99), mean, share)
    every = [h["t3"] - h["t0"] for h in handoffs]
    return RunFigures(steps, len(good), len(handoffs) - len(good), retakes, percentile(every, 50))


@dataclass
class Result:
    scenario: str
    runs: list[RunFigures] = field(default_factory=list)
    pings: list[dict[str, tuple[float, float, float]]] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)  # 1-minute load average after each run


def order_for(repetition: int, items: Sequence[str]) -> list[str]:
    """Rotated by the repetition, reversed on every other one."""
    k = repetition % len(items)
    rotated = [*items[k:], *items[:k]]
    return rotated[::-1] if repetition % 2 else rotated


def measure(
    url: str, scenarios: Sequence[str], settings: Settings, warmup: int, repeat: int
) -> dict[str, Result]:
    results = {s: Result(s) for s in scenarios}
    for repetition in range(repeat):
        for scenario in order_for(repetition, scenarios):
            began = mono()
            result = results[scenario]
            if scenario == "round trips":
                samples = round_trip_run(url, settings.rounds + 1 - warmup, settings.gap)
                result.pings.append(
                    {k: (percentile(v, 50), percentile(v, 99), statistics.fmean(v))
                     for k, v in samples.items()}
                )  # fmt: skip
                note = ", ".join(f"{k}: p50 {ms(v[0])}" for k, v in result.pings[-1].items())
            else:
                handoffs, retakes = pair_run(scenario, url, repetition, settings)
                handoffs.sort(key=lambda h: h["t0"])
                run = figures(scenario, handoffs[warmup:], retakes)
                result.runs.append(run)
                whole = list(run.steps.values())[-1]
                note = (
                    f"hand-off p50 {ms(whole[0])} p99 {ms(whole[1])} ms, kept {run.kept},"
                    f" dropped {run.dropped}, re-takes {run.retakes}"
                )
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else NAN
            result.loads.append(load)
            print(
                f"  run {repetition + 1}/{repeat} {scenario}: {note} ({mono() - began:.1f} s,"
                f" load average {load:.2f})",
                file=sys.stderr,
                flush=True,
            )
    return results


# -- counts: what each stage costs, without a clock (--count) --------------------------------

# The calls of each stage, counted by a profile function: Python function calls, and calls of C
# functions (builtins, methods of C types). Nothing reads a clock, so the load of the machine
# does not change them; a change to the path shows as a change of its counts.
LISTENER: Final = "fencelock-waiter"  # the listener's thread (sync) or task (asyncio)
IGNORED: Final = ""  # the harness's own waiting and signalling: not counted
LISTENING: Final = "listening"  # the listener since its last dispatch (see Counting.dispatched)
A_RELEASE: Final = "A: release() (grants the lock to B, publishes)"
READ_MESSAGE: Final = "listener: read -> the message reaches _deliver"
DISPATCH_MESSAGE: Final = "listener: _deliver(message)"
IN_WAIT: Final = "B: in wait() (both sides of the block)"
WOKEN: Final = "B: wait() returns -> acquire() returns"
READ_OTHER: Final = "listener: read -> the other replies (subscribe, pong, unsubscribe)"
DISPATCH_OTHER: Final = "listener: _dispatch(the other replies)"
B_BEFORE: Final = "B: acquire() until its wait (busy try, subscribe, queued try)"
B_RELEASE: Final = "B: release()"
A_ACQUIRE: Final = "A: acquire(), uncontended"
LOOP: Final = "asyncio loop, between tasks"
OTHER: Final = "other threads (the watchdog)"
# the wake path after the message reaches B's socket, in the order it passes
PATH: Final = [READ_MESSAGE, DISPATCH_MESSAGE, IN_WAIT, WOKEN]
COUNT_ROWS: Final = [A_RELEASE, *PATH, READ_OTHER, DISPATCH_OTHER, B_BEFORE, B_RELEASE,
                     A_ACQUIRE, LOOP, OTHER]  # fmt: skip
COUNT_WARMUP: Final = 20
Counts = dict[tuple[str, str], float]  # (stage, "py" or "c") -> calls


class Counting:
    """The calls of each stage, per thread (sync) or task (asyncio). The harness names the
    stages of A and B; the listener's calls go to the read of the reply it dispatches next."""

    def __init__(self, asyncio_api: bool) -> None:
        self.asyncio_api = asyncio_api
        self.counts: dict[tuple[str, str], int] = {}
        self.stages: dict[object, str] = {}
        self.pending = {"py": 0, "c": 0}  # the listener's, since its last dispatch
        self.retried = False  # B re-tried after its wake-up: not the hand-off by the message
        self.muted = False

    def whose(self) -> object:
        if not self.asyncio_api:
            return threading.get_ident()  # (a C function the harness calls: not counted)
        self.muted = True  # (current_task() is a Python function: its call is not counted)
        try:
            return asyncio.current_task()
        except RuntimeError:  # (no loop running)
            return None
        finally:
            self.muted = False

    def profile(self, frame: Any, event: str, arg: object) -> None:
        kind = "py" if event == "call" else "c" if event == "c_call" else None
        if kind is None or self.muted or frame.f_code.co_filename == __file__:
            return  # (the harness's own calls)
        key = self.whose()
        stage = self.stages.get(key)
        if stage is None:  # a thread or task the harness did not name
            if isinstance(key, asyncio.Task):
                listener = key.get_name() == LISTENER
            else:
                listener = threading.current_thread().name == LISTENER
            stage = LISTENING if listener else LOOP if self.asyncio_api else OTHER
            self.stages[key] = stage
        if stage == LISTENING:
            self.pending[kind] += 1
        elif stage:
            self.counts[stage, kind] = self.counts.get((stage, kind), 0) + 1

    def set(self, stage: str) -> None:
        self.stages[self.whose()] = stage

    def forget(self) -> None:
        """This task ends: its stage goes (each hand-off's B is a new task: kept, they would
        grow the heap, and with it what the garbage collector does per hand-off)."""
        del self.stages[self.whose()]

    def dispatched(self, ours: bool) -> str:
        """The listener hands a reply on (``ours``: a message, to ``_deliver``; else to
        ``_dispatch``): what it did since it last did was the read of it. Returns the stage
        of handing it on."""
        read = READ_MESSAGE if ours else READ_OTHER
        for kind, calls in self.pending.items():
            self.counts[read, kind] = self.counts.get((read, kind), 0) + calls
        self.pending = {"py": 0, "c": 0}
        return DISPATCH_MESSAGE if ours else DISPATCH_OTHER

    def wrap(self, client: Any, parked: Callable[[], object]) -> None:
        """Wrap B's client: its listener's ``_deliver`` and ``_dispatch``, its waits
        (``parked`` is called before each) and its tries."""
        waiter = client._wiring.topology.route.waiters[0]
        deliver, dispatch = waiter._deliver, waiter._dispatch
        wait, grants = client._wiring.topology.wait, client._wiring.grants
        try_acquire = grants.try_acquire

        def counted_deliver(channel: bytes, data: bytes) -> None:
            self.set(self.dispatched(ours=True))
            try:
                deliver(channel, data)
            finally:
                self.set(LISTENING)

        def counted_dispatch(message: dict[str, object]) -> None:
            self.set(self.dispatched(ours=False))
            try:
                dispatch(message)
            finally:
                self.set(LISTENING)

        def before_wait() -> None:
            self.set(IGNORED)
            parked()
            self.set(IN_WAIT)

        def before_try() -> None:
            self.retried = self.retried or self.stages.get(self.whose()) == WOKEN

        if self.asyncio_api:

            async def counted_wait(watch: Any, timeout: float) -> bool:
                before_wait()
                woken: bool = await wait(watch, timeout)
                self.set(WOKEN)
                return woken

            async def counted_try(*args: Any, **kwargs: Any) -> Any:
                before_try()
                return await try_acquire(*args, **kwargs)

            _wrap(client._wiring.topology, "wait", lambda _: counted_wait)
            _wrap(grants, "try_acquire", lambda _: counted_try)
        else:

            def counted_sync_wait(watch: Any, timeout: float) -> bool:
                before_wait()
                woken: bool = wait(watch, timeout)
                self.set(WOKEN)
                return woken

            def counted_sync_try(*args: Any, **kwargs: Any) -> Any:
                before_try()
                return try_acquire(*args, **kwargs)

            _wrap(client._wiring.topology, "wait", lambda _: counted_sync_wait)
            _wrap(grants, "try_acquire", lambda _: counted_sync_try)
        _wrap(waiter, "_deliver", lambda _: counted_deliver)
        _wrap(waiter, "_dispatch", lambda _: counted_dispatch)

    def handoff_done(self, snapshots: list[tuple[dict[tuple[str, str], int], bool]]) -> None:
        """A hand-off ended: its counts (after B's re-take by A), and whether it was kept."""
        snapshots.append((dict(self.counts), not self.retried))
        self.retried = False


def per_handoff(snapshots: Sequence[tuple[dict[tuple[str, str], int], bool]]) -> tuple[Counts, int]:
    """Each stage's median over the hand-offs kept (B woken by the message that granted it the
    lock: no try after the wake-up), with the path's and every stage's ("path", "all"); and how
    many were kept."""
    deltas = [
        {k: after[k] - before.get(k, 0) for k in after}
        for (before, _), (after, kept) in itertools.pairwise(snapshots)
        if kept
    ]
    if not deltas:
        raise BenchError("no hand-off by the message was counted")
    rows = {"path": PATH, "all": COUNT_ROWS, **{row: [row] for row in COUNT_ROWS}}
    counts = {
        (row, kind): float(statistics.median(sum(d.get((s, kind), 0) for s in stages)
                                             for d in deltas))
        for row, stages in rows.items()
        for kind in ("py", "c")
    }  # fmt: skip
    return counts, len(deltas)


def count_sync(url: str, handoffs: int, profile: bool = True) -> tuple[Counts, int]:
    """A (main thread) holds; B (a thread, its own client) waits; A releases once B waits: the
    release grants B the lock; B releases, A takes it again. Each side's calls are counted in
    its thread; threads switch only where they block (a long switch interval)."""
    counting = Counting(asyncio_api=False)
    name = f"{PREFIX}:count:{secrets.token_hex(4)}"
    go, parked, done = threading.Event(), threading.Event(), threading.Event()
    failed: list[BaseException] = []
    snapshots: list[tuple[dict[tuple[str, str], int], bool]] = []
    with ExitStack() as stack:
        a_client, b_client = (
            stack.enter_context(fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT))
            for _ in "ab"
        )
        a, b = a_client.lock(name, ttl=TTL), b_client.lock(name, ttl=TTL)
        counting.wrap(b_client, parked.set)

        def b_side() -> None:
            try:
                for _ in range(handoffs + COUNT_WARMUP):
                    counting.set(IGNORED)
                    go.wait(WAIT_LIMIT)
                    go.clear()
                    counting.set(B_BEFORE)
                    if not b.acquire(timeout=WAIT_LIMIT):
                        raise BenchError(f"B: not acquired in {WAIT_LIMIT:g} s")
                    counting.set(B_RELEASE)
                    b.release()
                    counting.set(IGNORED)
                    done.set()
            except BaseException as exc:
                failed.append(exc)
                done.set()

        switch = sys.getswitchinterval()
        stack.callback(sys.setswitchinterval, switch)
        sys.setswitchinterval(1.0)
        if profile:  # (else: no counts, for --instructions)
            threading.setprofile(counting.profile)
            stack.callback(threading.setprofile, None)
            sys.setprofile(counting.profile)
            stack.callback(sys.setprofile, None)
        counting.set(IGNORED)
        b_thread = threading.Thread(target=b_side, name="wake-path-B", daemon=True)
        b_thread.start()
        stack.callback(b_thread.join, WAIT_LIMIT)
        if not a.acquire(timeout=0):
            raise BenchError("A: the lock was busy at the start")
        for i in range(handoffs + COUNT_WARMUP):
            parked.clear()
            go.set()
            if not parked.wait(WAIT_LIMIT):
                raise BenchError(f"B did not wait: {failed}")
            counting.set(A_RELEASE)
            a.release()
            counting.set(IGNORED)
            if not done.wait(WAIT_LIMIT) or failed:
                raise BenchError(f"B: {failed[0] if failed else 'no hand-off'}")
            done.clear()
            counting.set(A_ACQUIRE)
            if not a.acquire(timeout=0):
                raise BenchError("A: the lock was busy after B released it")
            counting.set(IGNORED)
            if i >= COUNT_WARMUP - 1:
                counting.handoff_done(snapshots)
        a.release()
    return per_handoff(snapshots) if profile else ({}, 0)


def count_asyncio(url: str, handoffs: int, profile: bool = True) -> tuple[Counts, int]:
    """``count_sync`` on one event loop: A and B are tasks, each with its own client."""
    counting = Counting(asyncio_api=True)
    name = f"{PREFIX}:count:{secrets.token_hex(4)}"

    async def run() -> list[tuple[dict[tuple[str, str], int], bool]]:
        snapshots: list[tuple[dict[tuple[str, str], int], bool]] = []
        async with (
            fencelock.asyncio.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT) as a_client,
            fencelock.asyncio.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT) as b_client,
        ):
            a, b = a_client.lock(name, ttl=TTL), b_client.lock(name, ttl=TTL)
            parked = asyncio.Event()
            counting.wrap(b_client, parked.set)

            async def b_side() -> None:
                counting.set(B_BEFORE)
                if not await b.acquire(timeout=WAIT_LIMIT):
                    raise BenchError(f"B: not acquired in {WAIT_LIMIT:g} s")
                counting.set(B_RELEASE)
                await b.release()
                counting.forget()

            counting.set(IGNORED)
            if not await a.acquire(timeout=0):
                raise BenchError("A: the lock was busy at the start")
            for i in range(handoffs + COUNT_WARMUP):
                parked.clear()
                b_task = asyncio.create_task(b_side())
                await asyncio.wait_for(parked.wait(), WAIT_LIMIT)
                counting.set(A_RELEASE)
                await a.release()
                counting.set(IGNORED)
                await asyncio.wait_for(b_task, WAIT_LIMIT)
                counting.set(A_ACQUIRE)
                if not await a.acquire(timeout=0):
                    raise BenchError("A: the lock was busy after B released it")
                counting.set(IGNORED)
                if i >= COUNT_WARMUP - 1:
                    counting.handoff_done(snapshots)
            await a.release()
        return snapshots

    sys.setprofile(counting.profile if profile else None)
    try:
        snapshots = asyncio.run(run())
    finally:
        sys.setprofile(None)
    return per_handoff(snapshots) if profile else ({}, 0)


# the threads of count_sync in the order they start, as callgrind numbers them
THREADS: Final = {
    "sync": ["A (main thread), and the harness", "B", "B's listener"],
    "asyncio": ["the loop: A, B, B's listener, and the harness"],
}


def instructions(url: str, handoffs: int) -> None:
    """The instructions each thread runs per hand-off: valgrind's callgrind runs the hand-offs
    of ``count_sync`` and ``count_asyncio`` (no profile function) twice, ``handoffs`` apart;
    the difference of each thread's total, per hand-off. No clock is read either."""
    print(
        f"\nInstructions per hand-off, by thread (callgrind: runs of {COUNT_WARMUP} and"
        f" {COUNT_WARMUP + handoffs} hand-offs, the difference divided by {handoffs})."
    )
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        for api in THREADS:
            totals = []
            for n in (0, handoffs):
                out = Path(tmp, f"{api}-{n}")
                call = f"from bench import wake_path as w; w.count_{api}({url!r}, {n}, False)"
                command = [
                    "valgrind",
                    "--tool=callgrind",
                    "--separate-threads=yes",
                    f"--callgrind-out-file={out}.%p",
                    sys.executable,
                    "-c",
                    call,
                ]
                subprocess.run(command, cwd=root, check=True, capture_output=True)
                # one file per thread, numbered in the order the threads started
                files = sorted(Path(tmp).glob(f"{out.name}.*-*"))
                totals.append([callgrind_total(f) for f in files])
            print(f"\n### {api}\n\n| thread | instructions |\n|---|---|")
            for i, name in enumerate(THREADS[api]):
                per = (totals[1][i] - totals[0][i]) / handoffs
                print(f"| {name} | {per:,.0f} |")


def count_report(url: str, handoffs: int) -> None:
    print(
        f"\nCalls per hand-off, by stage: the median over {handoffs} hand-offs (after"
        f" {COUNT_WARMUP} of warm-up) of Python function calls and of calls of C functions, each"
        " side in its own thread (sync) or task (asyncio). No clock is read: the load of the"
        " machine does not change them."
    )
    for api, count in (("sync", count_sync), ("asyncio", count_asyncio)):
        counts, kept_ = count(url, handoffs)
        print(f"\n### {api} ({kept_} hand-offs by the message kept)\n")
        print("| stage | Python calls | C calls |")
        print("|---|---|---|")
        for row in [*COUNT_ROWS[:5], "path", *COUNT_ROWS[5:], "all"]:
            label = {"path": "**= the wake path**", "all": "= every stage"}.get(row, row)
            label = f"**{label}**" if row in PATH else label
            print(f"| {label} | {counts[row, 'py']:g} | {counts[row, 'c']:g} |")


# -- report ----------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.3f}"


def spread(values: Sequence[float]) -> str:
    """Median over the runs, with min-max."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    if len(values) == 1:
        return ms(values[0])
    return f"{ms(statistics.median(values))} ({ms(min(values))}-{ms(max(values))})"


def percent(values: Sequence[float]) -> str:
    """Median over the runs, with min-max, in percent."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return ""
    low, mid, high = (100 * x for x in (min(values), statistics.median(values), max(values)))
    return f"{mid:.0f}% ({low:.0f}-{high:.0f})" if len(values) > 1 else f"{mid:.0f}%"


def table(result: Result) -> Iterator[str]:
    if result.scenario == "round trips":
        yield "| round trip | p50 ms | p99 ms | mean ms |"
        yield "|---|---|---|---|"
        for label in result.pings[0] if result.pings else ():
            cells = [spread([p[label][i] for p in result.pings]) for i in range(3)]
            yield f"| {label} | {' | '.join(cells)} |"
        return
    yield "| step | p50 ms | p99 ms | mean ms | share of the mean hand-off |"
    yield "|---|---|---|---|---|"
    for label, *_ in STEPS[result.scenario]:
        cells = [spread([r.steps[label][i] for r in result.runs]) for i in range(3)]
        cells.append(percent([r.steps[label][3] for r in result.runs]))
        strong = "**" if label.startswith(("hand-off", "=")) else ""
        yield f"| {strong}{label}{strong} | {' | '.join(cells)} |"


def report(results: dict[str, Result], settings: Settings, warmup: int, repeat: int) -> None:
    print(
        f"\n{repeat} runs per scenario; per run {settings.rounds + 1 - warmup} hand-offs after"
        f" {warmup} of warm-up, the holder releasing {settings.gap * 1000:g} ms after the waiter"
        f" parked; releaser: {'reacquire' if settings.reacquire else 'idle'}."
        " Cells: median over the runs (min-max over the runs)."
    )
    for scenario, result in results.items():
        print(f"\n### {scenario}\n")
        loads = ", ".join(f"{x:.1f}" for x in result.loads)
        print(f"1-minute load average after each run: {loads}\n")
        if result.runs:
            kept_ = [r.kept for r in result.runs]
            dropped = [r.dropped for r in result.runs]
            retakes = [r.retakes for r in result.runs]
            every = spread([r.total_p50 for r in result.runs])
            print(
                f"kept hand-offs per run {kept_}, dropped {dropped}, re-taken by the releaser"
                f" {retakes}; hand-off p50 over every hand-off (dropped included): {every} ms\n"
            )
        for line in table(result):
            print(line)


def server_description(url: str) -> str:
    client = _redis(url)
    try:
        info: dict[str, Any] = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']} ({info.get('executable') or '?'})"
    name, version = info.get("server_name", "redis"), info.get("redis_version", "?")
    return f"{name} {version} ({info.get('executable') or '?'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.wake_path",
        description="Where the time of a cross-process hand-off goes (fencelock's wake path).",
    )
    parser.add_argument(
        "--handoffs", type=int, help="measured per run (3000; with --count: counted, 200)"
    )
    parser.add_argument("--warmup", type=int, default=200, help="hand-offs dropped first (200)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario (3)")
    parser.add_argument(
        "--gap", type=float, default=1.0, help="ms between the waiter parking and the release (1)"
    )
    parser.add_argument(
        "--releaser", choices=("idle", "reacquire"), default="idle",
        help="after a release: wait idle for the hand-off (default), or ask again at once",
    )  # fmt: skip
    names = ", ".join(repr(s) for s in SCENARIOS)
    parser.add_argument(
        "--only", nargs="+", choices=SCENARIOS, metavar="NAME", help=f"run only these: {names}"
    )
    parser.add_argument("--url", help="an existing server (default: start one)")
    parser.add_argument(
        "--count", action="store_true",
        help="count the calls of each stage of a hand-off in one process, sync and asyncio",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="with --count: the instructions of each thread instead (valgrind's callgrind)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.handoffs is None:
        args.handoffs = 200 if args.count else 3000
    if args.handoffs < 1 or args.warmup < 0 or args.repeat < 1 or args.gap < 0:
        parser.error("--handoffs and --repeat must be >= 1, --warmup and --gap >= 0")
    # the run ends with one more release than ``rounds``, handed over too
    rounds = args.handoffs + args.warmup - 1
    settings = Settings(rounds, args.gap / 1000, args.releaser == "reacquire")
    scenarios = list(args.only or SCENARIOS)
    if "python-redis-lock" in scenarios:
        try:
            importlib.import_module("redis_lock")
        except ImportError:
            print("python-redis-lock is not installed: skipped", file=sys.stderr)
            scenarios.remove("python-redis-lock")
    if not scenarios:
        parser.error("nothing to run")

    with ExitStack() as stack:
        if args.url:
            url: str = args.url
        else:
            url = stack.enter_context(EmbeddedServer()).url
        load = os.getloadavg() if hasattr(os, "getloadavg") else (NAN,) * 3
        print(f"date:    {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
        print(f"server:  {server_description(url)} at {url}")
        print(
            f"client:  Python {platform.python_version()}, redis-py {redis.__version__},"
            f" hiredis {'yes' if redis.utils.HIREDIS_AVAILABLE else 'no'},"
            f" fencelock {fencelock.__version__}, {os.cpu_count()} CPUs,"
            f" load average {load[0]:.2f} at the start"
        )
        print(f"command: python -m bench.wake_path {' '.join(argv or sys.argv[1:])}".rstrip())
        if args.count:
            (instructions if args.instructions else count_report)(url, args.handoffs)
            return 0
        results = measure(url, scenarios, settings, args.warmup, args.repeat)
        report(results, settings, args.warmup, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
