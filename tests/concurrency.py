"""Running a call concurrently in the tests: a task in the asyncio tests, a thread in the sync
ones (the sync tests are generated from the asyncio ones: Async*/async_* become Sync*/sync_*)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio.sentinel
import redis.sentinel

TIMEOUT = 30.0

# the ttl of a lease the tests keep renewed: its renewals (every ttl/3) must come in time on a
# machine loaded well past two CPU burners; 0.3-0.6 s leases were lost there, rightly
RENEWED_TTL = 1.5

# how the docs name the API's classes, in messages and reprs: fencelock.asyncio.Lock, and Lock
ASYNC_API = "fencelock.asyncio."
SYNC_API = ""

# where the sentinel tests get their masters from (the generated sync twin uses SyncSentinel)
AsyncSentinel = redis.asyncio.sentinel.Sentinel
SyncSentinel = redis.sentinel.Sentinel


async def async_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Wait for a condition set by another task, thread or process that offers no event."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def evalsha_calls(raw: redis.Redis) -> int:
    """Scripts the server has run so far (to count a call's round trips)."""
    return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def sync_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


class AsyncCall:
    def __init__(self, fn: Callable[[], Awaitable[Any]]) -> None:
        self._task = asyncio.ensure_future(fn())

    async def result(self, timeout: float = TIMEOUT) -> Any:
        return await asyncio.wait_for(self._task, timeout)


class SyncCall:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._outcome.append((True, fn()))
        except BaseException as exc:
            self._outcome.append((False, exc))

    def result(self, timeout: float = TIMEOUT) -> Any:
        self._thread.join(timeout)
        assert self._outcome, "call did not finish"
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value


def in_forked_child(check: Callable[[], int]) -> int:
    """Run ``check`` in a forked child and return its result (0-255): the child reports through
    a pipe and leaves with ``os._exit``, without running the parent's clean-ups. An exception in
    the child is reported as 255."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            code = check()
        except BaseException:
            code = 255
        os.write(write, bytes([code]))
        os._exit(0)
    os.close(write)
    report = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert report, "the child died without reporting"
    return report[0]


def async_workers() -> int:
    """How many tasks are alive (the sync twin counts threads): a dropped client must leave no
    background worker behind."""
    return len(asyncio.all_tasks())


def sync_workers() -> int:
    return threading.active_count()


def async_running(name: str) -> int:
    """How many background workers called ``name`` run: tasks (the sync twin: threads)."""
    return sum(1 for task in asyncio.all_tasks() if task.get_name() == name and not task.done())


def sync_running(name: str) -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == name)


async def async_together(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run every call at once (tasks), and return their results in order."""
    return list(await asyncio.wait_for(asyncio.gather(*(call() for call in calls)), TIMEOUT))


def sync_together(calls: list[Callable[[], Any]]) -> list[Any]:
    """The same with a thread per call, all let go at once."""
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        start.wait(TIMEOUT)
        return call()

    threads = [SyncCall(lambda call=call: run(call)) for call in calls]  # type: ignore[misc]
    return [thread.result() for thread in threads]
