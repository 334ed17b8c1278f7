"""The history of a run: one event per step of a worker, the nemesis or the harness.

Every event carries ``time.monotonic()``. On Linux that is CLOCK_MONOTONIC, one clock for the
whole machine, so the events of different processes can be merged and compared. Each process
appends to a JSONL file of its own (one event per line, flushed at once: a SIGKILLed worker loses
nothing it recorded); ``read_dir`` merges them in time order.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any, Final

# -- lock kinds (the detail of CONFIG) -----------------------------------------------------------
DEFAULT: Final = "default"  # sync LockClient, no renewal
AUTO_RENEW: Final = "auto_renew"  # sync LockClient, auto_renew=True, on_lost_policy="ignore"
REENTRANT: Final = "reentrant"  # sync LockClient, reentrant=True (each grant entered twice)
# asyncio LockClient, ``async with lock:`` with auto_renew=True, on_lost_policy="cancel"
ASYNC_CANCEL: Final = "async_cancel"
# the other primitives, each held as a mutex, so that every promise of the lock applies:
SEMAPHORE: Final = "semaphore"  # sync, a semaphore of 1 permit, auto_renew=True
RW_WRITE: Final = "rw_write"  # sync, the write side of a read-write lock, no renewal
MULTI: Final = "multi_lock"  # sync, a multi-lock of the name and a second one, no renewal
# no lock at all: the counter updated by compare-and-set (client.versioned), each read-modify-
# write recorded as a grant whose token is the version read (docs/no-lock.md)
VERSIONED: Final = "versioned"
# auto_renew=True: every loss is signalled
RENEWED_KINDS: Final = (AUTO_RENEW, ASYNC_CANCEL, SEMAPHORE)
CANCELLING_KINDS: Final = (ASYNC_CANCEL,)  # a loss cancels the block, which ends with LockLost
# the asyncio API: an event loop that a sync call can block (holder-loop-block)
ASYNC_KINDS: Final = (ASYNC_CANCEL,)

# -- event kinds ---------------------------------------------------------------------------------
# Recorded by the harness before the workers start: one per lock name.
CONFIG: Final = "config"  # name; value = ttl in ms; detail = lock kind
# A worker's steps ("worker" is its id, "name" the lock name).
ACQUIRE: Final = "acquire"  # acquire returned True; token; t0 = when acquire was called;
#   until = when its lease ends by the holder's own clock (time.monotonic() + lock.remaining())
ACQUIRE_FAILED: Final = "acquire_failed"  # False or an error; t0; detail = why
REENTER: Final = "reenter"  # a reentrant lock acquired again (same token); until, as acquire's
#   (the re-entry restarted the lease)
READ: Final = "read"  # the counter's value read from the resource; value
CHECK_PASSED: Final = "check_passed"  # lock.check() returned
CHECK_FAILED: Final = "check_failed"  # lock.check() raised LockLost
LOST: Final = "lost"  # on_lost(lock) was called; detail = the thread (or asyncio task) it ran on
# on_lost_policy="cancel": the library's cancellation landed in the ``async with`` block (a
# CancelledError at one of its awaits); detail = the step it landed in
CANCELLED: Final = "cancelled"
WRITE_ATTEMPT: Final = "write_attempt"  # fenced_set sent; value = what it writes
WRITE_ACCEPTED: Final = "write_accepted"  # fenced_set returned; t0 = when it was sent
WRITE_REFUSED: Final = "write_refused"  # StaleToken; t0; detail = the token already seen
WRITE_ERROR: Final = "write_error"  # any other error of the write; detail
RELEASE: Final = "release"  # release() called: the worker's belief ends here at the latest
RELEASED: Final = "released"  # release() returned
RELEASE_FAILED: Final = "release_failed"  # release() raised; detail = the exception's class
#   (ASYNC_CANCEL: RELEASE is the end of the block's body, RELEASED/RELEASE_FAILED how the
#   ``async with`` then ended: normally, or with the exception it raised, LockLost after a loss)
# The asyncio worker's event loop blocked by a sync call (time.sleep, on the nemesis's signal)
# while it held its lock, as a sync database call inside ``async with lock:`` would block it.
LOOP_BLOCKED: Final = "loop_blocked"  # value = ms it blocks for; detail = the step it landed in
LOOP_RESUMED: Final = "loop_resumed"  # the sync call returned: the loop runs again
EXIT: Final = "exit"  # the worker left its loop and closed its client
LIBRARY_LOG: Final = "library_log"  # a line fencelock logged in this worker; detail
THREAD_DIED: Final = "thread_died"  # a thread (or asyncio task) of the worker ended on an
#   exception; detail
# The nemesis ("worker" is "nemesis", except for the events about one worker).
FAULT_START: Final = "fault_start"  # value = fault id; name = the lock it aims at ("" = all);
#   detail = what was done; scope = "holder" (a worker was hit) or "server" (servers/network)
FAULT_END: Final = "fault_end"  # value = fault id: the fault was healed (may equal its start)
KILLED: Final = "killed"  # worker = the SIGKILLed worker; detail = why
PAUSED: Final = "paused"  # worker = the SIGSTOPped worker
BLOCKED: Final = "blocked"  # worker = the worker whose event loop the fault blocks
RESUMED: Final = "resumed"  # worker = the SIGCONTed worker
# The harness, after every worker has stopped and every fault was healed.
FINAL_VALUE: Final = "final_value"  # name; value = the counter on the resource
FINAL_KEY: Final = "final_key"  # name; value = PTTL in ms of the lock key on a node; detail = node
FINAL_ACQUIRE: Final = "final_acquire"  # name; value = ms a fresh client waited for the lock;
#   -1: not within the bound (held); -2: the acquire failed (detail), so nothing was verified

HOLDER: Final = "holder"
SERVER: Final = "server"
NEMESIS: Final = "nemesis"
HARNESS: Final = "harness"


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # time.monotonic() when the step ended (or happened)
    worker: str
    kind: str
    name: str = ""
    token: int | None = None
    value: int | None = None
    t0: float | None = None  # when the operation began (acquire called, write sent)
    detail: str = ""
    scope: str = ""  # faults only: HOLDER or SERVER
    until: float | None = None  # when a grant's lease ends by its holder's clock, as known then

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v not in (None, "")}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_jsonl(path: str | os.PathLike[str], events: Iterable[Event]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for event in events:
            out.write(event.to_json() + "\n")


def read_jsonl(path: str | os.PathLike[str]) -> list[Event]:
    """The events of one file. A last line cut short (its writer was killed mid-write) is
    skipped; a bad line anywhere else is an error."""
    events: list[Event] = []
    with open(path, encoding="utf-8") as source:
        lines = source.read().split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(Event.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            if number == len(lines):  # no newline after it: it was never finished
                break
            raise ValueError(f"{path}:{number}: not an event: {line!r}") from None
    return events


def merge(histories: Iterable[Iterable[Event]]) -> list[Event]:
    """One history in time order (stable: events of one process keep their order)."""
    return sorted((e for history in histories for e in history), key=lambda e: e.t)


def read_dir(directory: str | os.PathLike[str]) -> list[Event]:
    return merge(read_jsonl(path) for path in sorted(Path(directory).glob("*.jsonl")))


class Recorder:
    """Appends the events of one process (any thread) to its own JSONL file."""

    def __init__(self, path: str | os.PathLike[str], worker: str) -> None:
        self.path = Path(path)
        self.worker = worker
        self._lock = threading.Lock()
        # line-buffered text: every event is one write() of a whole line
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def record(self, kind: str, *, worker: str | None = None, **fields: Any) -> Event:
        event = Event(time.monotonic(), self.worker if worker is None else worker, kind, **fields)
        self.write(event)
        return event

    def write(self, event: Event) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write(event.to_json() + "\n")

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __iter__(self) -> Iterator[Event]:
        return iter(read_jsonl(self.path))
