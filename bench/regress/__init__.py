"""The working tree against a git ref, on the hot paths and in memory, in one run (issues 23, 34).

    python -m bench.regress REF                  # about 4 minutes on 2 shared CPUs
    python -m bench.regress HEAD~3 --quick       # about a minute: a smoke run (noisy figures)
    python -m bench.regress main --only P1,P4 --rounds 7 --json regress.json

Run it before resolving anything that touches a hot path, and paste its table into the note.

**Sides.** ``old`` is REF's ``src/fencelock`` (``git archive``), ``new`` the working tree's (what
``git ls-files`` sees there, uncommitted changes and new files included); each is unpacked into a
directory of its own under a temporary directory that is removed at the end. Nothing is built or
installed with pip: fencelock is pure Python, its package directory is its install, and the
third-party packages are the current environment's. Each side runs in a worker process of its own
whose ``PYTHONPATH`` starts with that directory; the worker checks that ``fencelock`` came from it
(and P2's spawned processes check again), and the table says where each side's came from. The
measuring code (``bench/``, ``fencelock_tools``) is the working tree's for both sides, so only the
library differs; a workload the ref cannot run (a primitive it does not have yet) fails on that
side, and is reported as such.

**Workloads** (the code of ``bench.uncontended``, ``bench.redlock``, ``bench.semaphore`` and
``fencelock_tools.benchmark``), each fencelock row against a floor measured by the same worker
just before or after it:

* P1: one lock, acquire + release, sync and asyncio (``LockClient.from_url(url)``), against
  ``SET NX PX`` + an ``EVALSHA`` compare-and-delete on a default ``redis.Redis`` (and
  ``redis.asyncio.Redis``), as a careful user writes it by hand; and, in rows of their own,
  against redis-py's own ``Lock`` on the same client (``client.lock(name, timeout=10)``: the
  lease fencelock's lock has, its other options redis-py's defaults).
* P2: 4 spawned processes contend for one name, holding it 1 ms per grant
  (``fencelock_tools.benchmark.handoff_run``): throughput, the lowest worker's share of a fair
  share, the share of grants re-taken by their releaser, lost updates and overlaps (both must be
  0), the hand-off latency p50 and p99; against python-redis-lock, run the same way (when it is
  installed: the ``bench`` extra). A P2 row's ``options`` are its fencelock locks' options, so
  that another mode of the lock is one more row: the barging lock (``fair=False``), whose goal
  is python-redis-lock's throughput (issue 34).
* P3: 8 threads (and 8 asyncio tasks) of one client take turns on one name
  (``fencelock_tools.benchmark.threads_run``/``tasks_run``): acquisitions/s, the local queue's
  hand-ons; its "floor" is redis-py's ``Lock`` with its defaults, which has no local queue (a
  reference: fencelock is expected above it). No round trips are counted.
* P4: Redlock over 5 masters, sync and asyncio, against ``bench.redlock``'s plain fan-out (the
  same ``SET NX PX`` / compare-and-delete sent to the 5 at once, 3 needed).
* Primitives: a new object per cycle in a ``with`` block (``bench.semaphore --fresh``): a
  multi-lock of 3 names, ``semaphore(name, 10)``, and both sides of a read-write lock, each
  against ``bench.semaphore``'s hand-written scripts.
* Memory: ``bench.footprint`` with 10,000 locks held at once (``--memory-locks``), each side's
  fencelock and redis-py's ``Lock`` (the floor): ``used_memory`` and keys per held lock, and per
  name right after every lock was released. Counts, not rates: measured once per side, after
  the rounds.

Every call uses keyword arguments (``acquire(timeout=0)``) or ``with``, so the same code runs on
both the positional ``acquire(timeout)`` of old refs and the keyword-only one.

**Method.** Both workers connect, warm every variant up and count their round trips first. Then
each of ``--rounds`` rounds runs every workload, in an order rotated by the round, on the same
servers (each side in a database of its own, so that key layouts that changed cannot collide):
old's and new's fencelock runs back to back, then new's and old's floors (or the floors first);
which side goes first alternates from round to round, which pair every two rounds. Each pair
compared is thus measured side by side, and drift of the machine meets both alike. Reported per
row: the medians over the rounds of cycles/s (P2: grants/s and the rest), the ratio new/old as
the median of the per-round ratios with their min-max, each side's ratio to its floor (the
median of the per-round ratios), the client's CPU time per cycle (``time.process_time`` of the
worker; in P2, of its 4 processes, per grant) and its ratio new/old (per round too: on a shared
machine the steadier figure, as waiting for the CPU does not count in it), the servers' CPU
time and commands per cycle (``bench.trips.ServerWatch``: ``INFO`` before and after each run,
``used_cpu_sys + used_cpu_user`` and the ``commandstats`` calls, a script's own commands
included; P4: the 5 servers' summed), and round trips per cycle: the requests redis-py's
connections wrote (``bench.trips.RequestCounter``: one per command, one per pipeline; the
commands a script runs inside the server are not requests), on the busiest server, so that a
Redlock round, written to all 5 at once, counts 1. In P2 the counter's GET and SET (2 per
grant) are left out of the commands and the requests. The floor's own figures are shown beside
each side's, in parentheses. Both workers measure the same floors: their ratio is an A/A
comparison, the noise of this run, printed above the table.

The output is a Markdown table; ``--json`` writes every figure too. The exit status is 1 when a
workload failed on a side or P2 lost an update, 2 when the run could not start (a bad ref, no
server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

WORKLOADS: Final = ("P1", "P2", "P3", "P4", "primitives", "memory")
SIDES: Final = ("old", "new")
# each side's database on the shared servers
DATABASES: Final = {"old": 1, "new": 2}


@dataclass(frozen=True)
class Row:
    key: str  # how the parent and the workers name it
    workload: str
    title: str  # in the table
    # P2: the options of fencelock's locks (``client.lock(name, ttl=..., **options)``)
    options: Mapping[str, Any] = field(default_factory=dict)


ROWS: Final = (
    Row("P1 sync", "P1", "P1 uncontended, sync"),
    Row("P1 sync, redis-py", "P1", "P1 uncontended, sync (floor: redis-py's Lock)"),
    Row("P1 asyncio", "P1", "P1 uncontended, asyncio"),
    Row("P1 asyncio, redis-py", "P1", "P1 uncontended, asyncio (floor: redis-py's asyncio Lock)"),
    Row("P2", "P2", "P2 4 processes, 1 name, 1 ms hold (floor: python-redis-lock)"),
    Row(
        "P2 barging",
        "P2",
        "P2 the same, barging (fair=False; floor: python-redis-lock)",
        {"fair": False},
    ),
    Row("P3 threads", "P3", "P3 8 threads, 1 name (floor: redis-py's Lock)"),
    Row("P3 tasks", "P3", "P3 8 asyncio tasks, 1 name (floor: redis-py's Lock)"),
    Row("P4 sync", "P4", "P4 Redlock, 5 masters, sync"),
    Row("P4 asyncio", "P4", "P4 Redlock, 5 masters, asyncio"),
    Row("multi (3)", "primitives", "multi-lock of 3 names"),
    Row("semaphore", "primitives", "semaphore(10)"),
    Row("read", "primitives", "read-write lock, read"),
    Row("write", "primitives", "read-write lock, write"),
    Row("memory", "memory", "memory (floor: redis-py's Lock)"),
)
