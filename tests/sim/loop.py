"""Virtual time for the real asyncio code: one event loop per simulated process, all on one clock
that only the scheduler moves (``world.py``).

A ``SimLoop`` is asyncio's own ``BaseEventLoop`` (its ready queue, timers, tasks and futures, run
by its own ``_run_once``) with two things taken away: the wait for I/O (there is none: every
reply and message is delivered by the scheduler) and the passing of time (``time()`` is the
world's clock). ``run_ready()`` runs the loop until it has nothing to do at the current instant;
what happens next, and when, is the scheduler's choice. The library reads ``time.monotonic()``
directly in its modules: ``virtual_monotonic`` makes every ``fencelock`` module read the same
clock for the length of a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Final

# pytest's filters for what a run dropped at its horizon (``SimLoop.discard``): coroutines
# of processes left mid-call, which Python reports when they are collected (a give-back never
# started, a wait whose loop is gone). Nothing of the library is left running: each run's loops
# are its own.
DROPPED_AT_HORIZON: Final = (
    "ignore:coroutine .* was never awaited:RuntimeWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)


# the wall clock (the servers' and the processes') when the world's clock reads 0
T0_US: Final = 1_700_000_000_000_000


class Clock:
    """The world's monotonic clock, in seconds (it starts well away from 0: a real monotonic
    clock is never at 0.0, and 0.0 is falsy)."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def time_ns(self) -> int:
        """The processes' wall clock: the servers' (a Redlock acquire proposes its token from
        it), as long as no fault jumps a server's."""
        return (T0_US + round(self.now * 1_000_000)) * 1000


class _NoIO:
    """The selector of a loop that has no I/O: it never waits."""

    def select(self, timeout: float | None) -> list[Any]:
        return []

    def close(self) -> None:
        return None


class Spinning(RuntimeError):
    """A process that never stops running at one instant: a busy loop."""


class SimLoop(asyncio.BaseEventLoop):
    """One simulated process's event loop on the world's clock."""

    def __init__(self, clock: Clock, on_error: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self._clock = clock
        self._selector = _NoIO()  # type: ignore[assignment]
        self._tasks: list[asyncio.Task[Any]] = []  # (all_tasks() would scan every loop's)
        self.set_exception_handler(lambda _loop, context: on_error(context))

    def time(self) -> float:
        return self._clock.now

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = super().create_task(coro, **kwargs)
        self._tasks.append(task)
        return task

    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:
        return None  # (call_soon_threadsafe: nothing to wake, the scheduler runs us)

    def next_timer(self) -> float | None:
        """When the first live timer of this loop fires (None: none)."""
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0].cancelled():
            heapq.heappop(scheduled)._scheduled = False  # type: ignore[attr-defined]
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
        return scheduled[0].when() if scheduled else None

    def timers(self) -> list[float]:
        """The live timers, as times from now (for a state's digest)."""
        now = self._clock.now
        return sorted(round(h.when() - now, 6) for h in self._scheduled if not h.cancelled())  # type: ignore[attr-defined]

    def busy(self) -> bool:
        """Whether something can run at the current instant."""
        if self._ready:  # type: ignore[attr-defined]
            return True
        when = self.next_timer()
        return when is not None and when <= self._clock.now

    def run_ready(self, limit: int = 10_000) -> None:
        """Run until nothing is left to run at the current instant (as ``run_forever`` would
        between two polls), with this loop as the running loop."""
        self._thread_id = None  # type: ignore[attr-defined]
        old_hooks = sys.get_asyncgen_hooks()
        asyncio.events._set_running_loop(self)
        sys.set_asyncgen_hooks(
            firstiter=self._asyncgen_firstiter_hook,  # type: ignore[attr-defined]
            finalizer=self._asyncgen_finalizer_hook,  # type: ignore[attr-defined]
        )
        try:
            for _ in range(limit):
                if not self.busy():
                    return
                self._run_once()  # type: ignore[attr-defined]
            raise Spinning(f"{limit} loop iterations without time passing (a busy loop)")
        finally:
            asyncio.events._set_running_loop(None)
            sys.set_asyncgen_hooks(*old_hooks)

    def discard(self) -> None:
        """Forget every task and callback without running them (the run is over). Each task's
        coroutine is closed now, while the loop can still take the callbacks its ``finally``
        clauses schedule; the loop is left open (and dropped): a coroutine that awaits while
        closing is closed again when collected, and must find it so too."""
        self.set_exception_handler(lambda _loop, _context: None)
        for task in self._tasks:
            if task.done():
                continue
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            with contextlib.suppress(BaseException):
                task.get_coro().close()  # type: ignore[union-attr]
        self._ready.clear()  # type: ignore[attr-defined]
        self._scheduled.clear()  # type: ignore[attr-defined]
        self._tasks.clear()


@contextlib.contextmanager
def virtual_monotonic(clock: Clock) -> Iterator[None]:
    """Every loaded ``fencelock`` module reads ``clock`` as ``time.monotonic()`` (and as
    ``time.time_ns()``, the wall clock) meanwhile."""
    fake = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if k[:2] != "__"})
    fake.monotonic = clock.monotonic
    fake.time_ns = clock.time_ns
    patched = []
    for name, module in list(sys.modules.items()):
        if (name == "fencelock" or name.startswith("fencelock.")) and getattr(
            module, "time", None
        ) is time:
            module.time = fake  # type: ignore[attr-defined]
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            module.time = time  # type: ignore[attr-defined]


class _Tokens:
    """``secrets`` for the library while a run lasts: holder tokens and waiter ids counted from
    1, so that a run (the order of queued waiters too) is the same every time."""

    def __init__(self) -> None:
        self.count = 0

    def token_urlsafe(self, nbytes: int) -> str:
        self.count += 1
        return f"h{self.count:05d}"

    def token_hex(self, nbytes: int) -> str:
        self.count += 1
        return f"{self.count:0{2 * nbytes}x}"


@contextlib.contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """The library's randomness (holder tokens, waiter ids, Redlock's re-try jitter) drawn from
    ``seed`` meanwhile."""
    import random

    from fencelock._core import quorum, replies

    saved = replies.secrets, quorum.random
    replies.secrets, quorum.random = _Tokens(), random.Random(seed)  # type: ignore[assignment]
    try:
        yield
    finally:
        replies.secrets, quorum.random = saved
