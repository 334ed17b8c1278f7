"""A cache stampede: many callers across processes ask for one missing result at once
(docs/compute_once.md). ``compute_once`` against the least any cross-process "one builds, the
others are told" needs, a hand-written lock-then-poll loop and no coordination at all.

    python -m bench.compute_once             # 64 callers in 4 processes, compute 0.2 s, 10 rounds
    python -m bench.compute_once --quick     # a smoke run of a few seconds (noisy figures)
    python -m bench.compute_once --processes 8 --callers 8 --rounds 20 --json compute.json

N spawned processes, one ``LockClient`` and one ``redis.Redis`` each, run ``callers`` threads
each; every round, all of them (let go by a barrier across the processes, then one in each
process) ask for the same missing key, whose ``compute`` sleeps ``compute`` seconds. Strategies:

* ``compute_once``: ``client.compute_once(key, compute, fresh_for=60)``: one caller builds under
  a lease, the others are woken by pub/sub when the result is stored;
* ``compute_once, stamped``: the same on a second ``LockClient`` of each process whose wake path
  is stamped (below), to see where its time goes; the stamps are wrappers around a few of that
  client's own methods, which cost microseconds: compare its row with ``compute_once``'s;
* ``floor``: the least a cross-process "one builds, the others are told" needs, written by hand
  on redis-py: one pub/sub connection per process, subscribed (``PSUBSCRIBE``) from the start,
  read by one listener thread that hands each message to the threads waiting for its key (a
  ``threading.Event``); the first caller of a process ``GET``s (the others wait for what it
  finds or for the message, as compute_once's callers of one client follow the first); on a
  miss, ``SET NX PX`` a lock; its winner looks again, computes, and sends, in one pipeline,
  ``SET`` of the result, ``PUBLISH`` of the result itself on the key's channel and the lock's
  compare-and-delete; everyone else waits for the message and decodes the result it carries
  (no read, no lease, no fence, no takeover);
* ``lock-then-poll``: what teams write by hand: GET; on a miss, ``SET NX PX`` a lock; its winner
  looks again, computes, SETs the result and deletes the lock (compare-and-delete); everyone
  else GETs the result every ``poll`` seconds (10 ms by default) until it is there;
* ``none``: GET; on a miss, compute and SET: every caller that missed builds.

Every caller gets its own copy of the result, decoded from what was stored or sent.

Reported per strategy, over every call of every round: the builds per round, and the callers'
time to their result beyond ``compute`` itself (p50, p99, max), and after the build's end (the
first build's ``compute`` returned: from then on the result is the network's and the waiters'
business; p50, p99, max). After a warm-up round of each (not reported), the rounds alternate
the strategies, each on a fresh key. No figure
is asserted; the exit status is 1 when a call failed or returned another value than the build's.
The output is Markdown (``--json`` also writes every round's figures).

The wake path, stage by stage (``time.monotonic()``: CLOCK_MONOTONIC, shared by the
processes), for ``compute_once, stamped`` and ``floor``. Before the build: from the first
call's start (in any process) to the build's, and from the start of the call that builds (its
looks and lease, without the callers' spread at the start). From the end of
the round's build (its ``compute`` returned), for ``compute_once, stamped``: the builder's store
came back (its process); in each other process, the listener thread hands the store's message
to fencelock (the waiter's ``_dispatch``), the waiting caller's wait returns (the topology's
``wait``), its look comes back with the result (``_look``), the call lands
(``_Flights.land``: the callers of the process that followed it are let go), and each caller
returns. For ``floor``: the pipeline came back (the builder's process); the listener thread
reads the message; each waiting caller has its result. Each stage is reported from the stamp
before it in the same process (the first one it has, of those named: the builder's process has
no message to wait for), p50, p99 and max over the processes (or the calls) of every round; a
stage the code measured does not have shows as ``-``.

Keys: ``fencelock-bench-compute:*`` (and compute_once's under fencelock's prefix), deleted
before and after each round.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import secrets
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import redis

import fencelock
from bench._common import client_description, server_description
from fencelock_tools.benchmark import percentile
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

PREFIX: Final = "fencelock-bench-compute:"
BARRIER_TIMEOUT: Final = 120.0  # spawning interpreters on a loaded machine
STAMPED: Final = "compute_once, stamped"
STRATEGIES: Final = ("compute_once", STAMPED, "floor", "lock-then-poll", "none")
VALUE: Final = {"report": "the value every caller must get", "rows": list(range(10))}
# compare-and-delete: the hand-written loops' release
RELEASE: Final = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
DONE: Final = ":done"  # the floor's channel of a key: the key, and this
NAN: Final = math.nan
mono = time.monotonic


@dataclass(frozen=True)
class Settings:
    processes: int = 4
    callers: int = 16  # threads per process
    compute: float = 0.2
    rounds: int = 10  # per strategy
    poll: float = 0.01

    @classmethod
    def quick(cls) -> Settings:
        return cls(processes=2, callers=4, compute=0.05, rounds=2)


Compute = Callable[[], Any]
Stamps = dict[str, list[float]]


class Stamper:
    """Stamps of one process's ``compute_once`` wake path, on a client of its own: wrappers
    (instance attributes shadowing the methods) around the store, the waiter's ``_dispatch``,
    the topology's ``wait``, the look and the flight's landing. A method the code measured does
    not have is not stamped."""

    def __init__(self, client: fencelock.LockClient) -> None:
        self.client = client
        self.stamps: Stamps = {}
        self.waiter: object = None
        results = client._results
        self._wrap(results, "_store", "store")
        self._wrap(results, "_look", "look")
        self._wrap(results._flights, "land", "land")
        self._wrap(client._wiring.topology, "wait", "woken")

    def reset(self) -> None:
        self.stamps = {}
        # the waiter is made at the first watch (the warm-up round's)
        waiter = self.client._wiring.topology.route.waiters.get(0)
        if waiter is not None and waiter is not self.waiter:
            self.waiter = waiter
            self._wrap(waiter, "_dispatch", "heard", before=True)

    def _wrap(self, obj: object, name: str, stamp: str, *, before: bool = False) -> None:
        original = getattr(obj, name, None)
        if original is None:
            return

        def stamped(*args: Any, **kwargs: Any) -> Any:
            if before:  # (the waiting thread may run before the call returns)
                self.stamps.setdefault(stamp, []).append(mono())
            result = original(*args, **kwargs)
            if not before:
                self.stamps.setdefault(stamp, []).append(mono())
            return result

        setattr(obj, name, stamped)


class Floor:
    """One process's side of the floor (see the module): its pub/sub connection, its listener
    thread, and the callers waiting for each key."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.pubsub = r.pubsub()  # type: ignore[no-untyped-call]
        self.pubsub.psubscribe(f"{PREFIX}*{DONE}")
        confirmed = None
        while confirmed is None or confirmed["type"] != "psubscribe":
            confirmed = self.pubsub.get_message(timeout=BARRIER_TIMEOUT)
        self.guard = threading.Lock()
        self.keys: dict[str, Slot] = {}
        self.closing = False
        self.listener = threading.Thread(target=self.listen, daemon=True)
        self.listener.start()

    def slot(self, key: str) -> Slot:
        with self.guard:
            return self.keys.setdefault(key, Slot())

    def join(self, key: str) -> tuple[Slot, bool]:
        """The slot of ``key``, and whether this caller is the first of its process to ask."""
        with self.guard:
            slot = self.keys.setdefault(key, Slot())
            first, slot.asked = not slot.asked, True
            return slot, first

    def listen(self) -> None:
        while not self.closing:
            message = self.pubsub.get_message(timeout=0.5)
            if message is not None and message["type"] == "pmessage":
                slot = self.slot(message["channel"].decode()[: -len(DONE)])
                slot.heard = mono()
                slot.data = message["data"]
                slot.event.set()

    def call(self, key: str, compute: Compute, stamps: Stamps) -> Any:
        slot, first = self.join(key)  # before the look: a message after it finds the slot
        found = self.r.get(key) if first else None  # (the others of the process wait)
        if found is not None:
            slot.data = found
            slot.event.set()
            return json.loads(found)
        token, lock = secrets.token_hex(16), f"{key}:lock"
        if first and self.r.set(lock, token, nx=True, px=30_000):
            found = self.r.get(key)  # built while this caller took the lock?
            if found is not None:
                self.r.eval(RELEASE, 1, lock, token)
                slot.data = found
                slot.event.set()
                return json.loads(found)
            data = json.dumps(compute())
            with self.r.pipeline(transaction=False) as pipe:
                pipe.set(key, data, ex=60)
                pipe.publish(f"{key}{DONE}", data)
                pipe.eval(RELEASE, 1, lock, token)
                pipe.execute()
            stamps.setdefault("published", []).append(mono())
            return json.loads(data)
        if not slot.event.wait(BARRIER_TIMEOUT):
            raise TimeoutError(f"floor: no message for {key}")
        value = json.loads(slot.data)
        stamps.setdefault("told", []).append(mono())
        return value

    def end_round(self, stamps: Stamps) -> None:
        with self.guard:
            slots, self.keys = self.keys, {}
        stamps["heard"] = [s.heard for s in slots.values() if not math.isnan(s.heard)]

    def close(self) -> None:
        self.closing = True
        self.listener.join(2.0)
        self.pubsub.close()


@dataclass(eq=False)
class Slot:
    event: threading.Event = field(default_factory=threading.Event)
    data: bytes | str = b""
    heard: float = NAN
    asked: bool = False  # one caller of the process asked the server


@dataclass
class Process:
    """What one process's callers use."""

    client: fencelock.LockClient
    stamper: Stamper
    r: redis.Redis
    floor: Floor

    def close(self) -> None:
        self.floor.close()
        self.stamper.client.close()
        self.client.close()
        self.r.close()


def with_compute_once(p: Process, key: str, compute: Compute, s: Settings, stamps: Stamps) -> Any:
    return p.client.compute_once(key, compute, fresh_for=60)


def with_compute_once_stamped(
    p: Process, key: str, compute: Compute, s: Settings, stamps: Stamps
) -> Any:
    return p.stamper.client.compute_once(key, compute, fresh_for=60)


def with_floor(p: Process, key: str, compute: Compute, s: Settings, stamps: Stamps) -> Any:
    return p.floor.call(key, compute, stamps)


def with_lock_then_poll(p: Process, key: str, compute: Compute, s: Settings, stamps: Stamps) -> Any:
    r = p.r
    found = r.get(key)
    if found is not None:
        return json.loads(found)
    token, lock = secrets.token_hex(16), f"{key}:lock"
    if r.set(lock, token, nx=True, px=30_000):
        try:
            found = r.get(key)  # built while this caller took the lock?
            if found is not None:
                return json.loads(found)
            value = compute()
            r.set(key, json.dumps(value), ex=60)
            return value
        finally:
            r.eval(RELEASE, 1, lock, token)
    while True:  # (a builder that died would leave this loop waiting: not in this run)
        time.sleep(s.poll)
        found = r.get(key)
        if found is not None:
            return json.loads(found)


def without_coordination(
    p: Process, key: str, compute: Compute, s: Settings, stamps: Stamps
) -> Any:
    found = p.r.get(key)
    if found is not None:
        return json.loads(found)
    value = compute()
    p.r.set(key, json.dumps(value), ex=60)
    return value


CALLS: Final = {
    "compute_once": with_compute_once,
    STAMPED: with_compute_once_stamped,
    "floor": with_floor,
    "lock-then-poll": with_lock_then_poll,
    "none": without_coordination,
}


def schedule(s: Settings) -> list[tuple[int, str]]:
    """(round, strategy): a warm-up round of each (round -1: connections made, scripts
    loaded; not reported), then the strategies alternate, in an order rotated by the round."""
    return [
        (i, STRATEGIES[(i + j) % len(STRATEGIES)])
        for i in range(-1, s.rounds)
        for j in range(len(STRATEGIES))
    ]


def clean(r: redis.Redis) -> None:
    keys = list(r.scan_iter(match=f"*{PREFIX}*", count=1000))
    if keys:
        r.delete(*keys)


@dataclass
class Part:
    """One process's part of a round."""

    calls: list[tuple[float, float]]  # (start, end) of each call
    builds: list[float]  # the end of each build
    errors: list[str]  # the calls' errors (or wrong values)
    stamps: Stamps  # the wake path's (see the module)


def one_round(strategy: str, key: str, p: Process, s: Settings) -> Part:
    """This process's callers of one round."""
    part = Part([], [], [], {})
    start = threading.Barrier(s.callers)
    if strategy == STAMPED:
        p.stamper.reset()

    mine = threading.local()  # (the start of the call a build runs in)

    def compute() -> Any:
        now = mono()
        part.stamps.setdefault("began", []).append(now)
        part.stamps.setdefault("its call began", []).append(mine.began)
        time.sleep(s.compute)
        part.builds.append(mono())
        return VALUE

    def call() -> None:
        start.wait(BARRIER_TIMEOUT)
        began = mine.began = mono()
        try:
            value = CALLS[strategy](p, key, compute, s, part.stamps)
        except Exception as exc:
            part.errors.append(f"{type(exc).__name__}: {exc}")
            return
        part.calls.append((began, mono()))
        if value != VALUE:
            part.errors.append(f"returned {value!r}")

    threads = [threading.Thread(target=call) for _ in range(s.callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BARRIER_TIMEOUT)
    if strategy == STAMPED:
        part.stamps.update(p.stamper.stamps)
    elif strategy == "floor":
        p.floor.end_round(part.stamps)
    return part


def worker(
    url: str, s: Settings, barrier: Any, results: Any
) -> None:  # pragma: no cover (runs in the spawned processes)
    r = redis.Redis.from_url(url, socket_timeout=5)
    stamped = fencelock.LockClient.from_url(url)
    p = Process(fencelock.LockClient.from_url(url), Stamper(stamped), r, Floor(r))
    try:
        for index, strategy in schedule(s):
            barrier.wait(BARRIER_TIMEOUT)  # the parent has cleaned up: go
            key = f"{PREFIX}{index}-{strategy.replace(', ', '-')}"
            results.put(one_round(strategy, key, p, s))
            barrier.wait(BARRIER_TIMEOUT)  # every result is in
    finally:
        p.close()


# The wake path's stages (see the module): (label, the stamp it ends at, the stamps it may
# begin at: the first one this process has). Each is one per process, but the calls' returns
# ("returned") and the floor's waiting callers ("told"), one per call.
LANDS_AFTER: Final = ("look", "woken", "store")  # (the builder's process: the store)
STAGES: Final = {
    STAMPED: (
        ("build ended -> the store's reply (builder's process)", "store", ("built",)),
        ("build ended -> the message dispatched (listener)", "heard", ("built",)),
        ("dispatched -> the waiting caller's wait returns", "woken", ("heard",)),
        ("wait returned -> its look's reply", "look", ("woken",)),
        ("look's reply (or the wait's, the store's) -> the call lands", "land", LANDS_AFTER),
        ("landed -> each caller returns", "returned", ("land",)),
    ),
    "floor": (
        ("build ended -> the pipeline's reply (builder's process)", "published", ("built",)),
        ("build ended -> the message read (listener)", "heard", ("built",)),
        ("read -> each waiting caller returns", "told", ("heard",)),
    ),
}
PER_CALL: Final = ("returned", "told")
BEFORE: Final = "the first call began -> the build began (once per round)"
BUILDER_BEFORE: Final = "the builder's call began -> the build began (once per round)"


def stages(strategy: str, parts: list[Part], built: float) -> dict[str, list[float]]:
    """Each stage's delays in one round (s)."""
    out: dict[str, list[float]] = {label: [] for label, _, _ in STAGES.get(strategy, ())}
    if strategy in STAGES:  # (the first build's start, its call's, and the first call's)
        starts = sorted(
            pair
            for part in parts
            for pair in zip(
                part.stamps.get("began", ()), part.stamps.get("its call began", ()), strict=True
            )
        )
        began, its_call = starts[0] if starts else (NAN, NAN)
        first = min((c for part in parts for c, _ in part.calls), default=NAN)
        out = {BEFORE: [began - first], BUILDER_BEFORE: [began - its_call], **out}
    for part in parts:
        stamps = {**part.stamps, "returned": [end for _, end in part.calls]}
        at = {"built": built}
        for label, stamp, after in STAGES.get(strategy, ()):
            begin = next((at[a] for a in after if not math.isnan(at.get(a, NAN))), NAN)
            ends = sorted(v for v in stamps.get(stamp, ()) if v >= built)
            at[stamp] = min(ends, default=NAN)
            if not math.isnan(begin):
                out[label] += [end - begin for end in (ends if stamp in PER_CALL else ends[:1])]
    return out


@dataclass
class Round:
    strategy: str
    builds: int
    over_compute: list[float]  # each call's time to its result, beyond compute (s)
    after_build: list[float]  # each call's return after the first build ended (s)
    errors: list[str] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)  # (s)


def run(url: str, s: Settings) -> list[Round]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(s.processes + 1)
    queue = ctx.Queue()
    r = redis.Redis.from_url(url, socket_timeout=5)
    clean(r)
    workers = [
        ctx.Process(target=worker, args=(url, s, barrier, queue), daemon=True)
        for _ in range(s.processes)
    ]
    for process in workers:
        process.start()
    out = []
    try:
        for index, strategy in schedule(s):
            barrier.wait(BARRIER_TIMEOUT)
            parts: list[Part] = [queue.get(timeout=BARRIER_TIMEOUT) for _ in workers]
            barrier.wait(BARRIER_TIMEOUT)
            if index < 0:  # the warm-up
                clean(r)
                continue
            calls = [c for part in parts for c in part.calls]
            builds = sorted(b for part in parts for b in part.builds)
            first = builds[0] if builds else NAN
            out.append(
                Round(
                    strategy,
                    len(builds),
                    [end - began - s.compute for began, end in calls],
                    [end - first for _, end in calls],
                    [e for part in parts for e in part.errors],
                    stages(strategy, parts, first),
                )
            )
            clean(r)
    finally:
        for process in workers:
            process.join(BARRIER_TIMEOUT)
            if process.is_alive():
                process.kill()
        clean(r)
        r.close()
    return out


def _ms(values: list[float]) -> list[float]:
    return [1000 * percentile(values, q) for q in (50, 99, 100)]


def summary(rounds: list[Round], strategy: str) -> dict[str, Any]:
    mine = [x for x in rounds if x.strategy == strategy]
    over = [v for x in mine for v in x.over_compute]
    after = [v for x in mine for v in x.after_build]
    labels = [label for label, _, _ in STAGES.get(strategy, ())]
    labels = [BEFORE, BUILDER_BEFORE, *labels] if labels else []
    return {
        "strategy": strategy,
        "rounds": len(mine),
        "calls": len(over),
        "builds_per_round": statistics.mean(x.builds for x in mine) if mine else NAN,
        "builds_max": max((x.builds for x in mine), default=0),
        "over_compute_ms": _ms(over),
        "after_build_ms": _ms(after),
        "stages_ms": {  # p50, p99, max, and how many
            label: [*_ms(values), len(values)]
            for label in labels
            for values in [[v for x in mine for v in x.stages.get(label, ())]]
        },
        "errors": [e for x in mine for e in x.errors],
    }


def _shown(values: list[float]) -> str:
    return " / ".join("-" if math.isnan(ms) else f"{ms:.1f}" for ms in values)


def markdown(rows: list[dict[str, Any]], header: list[str]) -> str:
    lines = [
        *header,
        "",
        "| strategy | builds per round (max) | beyond compute: p50 / p99 / max | after the build "
        "ended: p50 / p99 / max | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['strategy']} | {row['builds_per_round']:g} ({row['builds_max']}) | "
            f"{_shown(row['over_compute_ms'])} ms | {_shown(row['after_build_ms'])} ms | "
            f"{len(row['errors'])} |"
        )
    for row in rows:
        if row["stages_ms"]:
            lines += ["", f"| {row['strategy']}: the wake path | p50 / p99 / max |", "|---|---:|"]
            for label, figures in row["stages_ms"].items():
                lines.append(f"| {label} | {_shown(figures[:3])} ms |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.compute_once",
        description="One missing result, many callers: compute_once against the floor, the "
        "hand-written loop and no coordination.",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--processes", type=int, help="calling processes (4)")
    parser.add_argument("--callers", type=int, help="threads per process (16)")
    parser.add_argument("--compute", type=float, help="seconds a build takes (0.2)")
    parser.add_argument("--rounds", type=int, help="rounds per strategy (10)")
    parser.add_argument("--poll", type=float, help="the hand-written loop's poll (0.01)")
    parser.add_argument("--url", help="an existing server (default: start one here, empty)")
    parser.add_argument("--server", choices=("redis", "valkey"), default=None)
    parser.add_argument("--json", type=Path, help="also write the figures there")
    args = parser.parse_args(argv)
    base = Settings.quick() if args.quick else Settings()
    chosen = {
        "processes": args.processes,
        "callers": args.callers,
        "compute": args.compute,
        "rounds": args.rounds,
        "poll": args.poll,
    }
    s = Settings(**{**asdict(base), **{k: v for k, v in chosen.items() if v is not None}})
    if min(s.processes, s.callers, s.rounds) < 1 or s.compute <= 0 or s.poll <= 0:
        parser.error("--processes, --callers and --rounds must be >= 1, the times > 0")
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer(find_server(args.server))).url
        server = server_description(url)
        rounds = run(url, s)
    rows = [summary(rounds, strategy) for strategy in STRATEGIES]
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    command = shlex.join(["python", "-m", "bench.compute_once", *argv])
    header = [
        f"- date: {now}, load average {os.getloadavg()[0]:.2f} at the end",
        f"- server: {server}" + ("" if args.url else " (embedded, started empty)"),
        f"- client: {client_description()}",
        f"- command: `{command}`: {s.processes * s.callers} callers ({s.processes} processes "
        f"x {s.callers} threads), compute {s.compute:g} s, {s.rounds} rounds per strategy, "
        f"poll {s.poll:g} s",
    ]
    print(markdown(rows, header), end="")
    if args.json is not None:
        info = {"date": now, "server": server, "client": client_description(), "command": command}
        rounds_out = [asdict(x) for x in rounds]
        args.json.write_text(
            json.dumps({**info, "results": rows, "rounds": rounds_out}, indent=2) + "\n"
        )
    return 1 if any(row["errors"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
