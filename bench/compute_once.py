"""A cache stampede: many callers across processes ask for one missing result at once
(docs/compute_once.md). ``compute_once`` against a hand-written lock-then-poll loop and against
no coordination at all.

    python -m bench.compute_once             # 64 callers in 4 processes, compute 0.2 s, 10 rounds
    python -m bench.compute_once --quick     # a smoke run of a few seconds (noisy figures)
    python -m bench.compute_once --processes 8 --callers 8 --rounds 20 --json compute.json

N spawned processes, one ``LockClient`` and one ``redis.Redis`` each, run ``callers`` threads
each; every round, all of them (let go by a barrier across the processes, then one in each
process) ask for the same missing key, whose ``compute`` sleeps ``compute`` seconds. Strategies:

* ``compute_once``: ``client.compute_once(key, compute, fresh_for=60)``: one caller builds under
  a lease, the others are woken by pub/sub when the result is stored;
* ``lock-then-poll``: what teams write by hand: GET; on a miss, ``SET NX PX`` a lock; its winner
  looks again, computes, SETs the result and deletes the lock (compare-and-delete); everyone
  else GETs the result every ``poll`` seconds (10 ms by default) until it is there;
* ``none``: GET; on a miss, compute and SET: every caller that missed builds.

Reported per strategy, over every call of every round: the builds per round, and the callers'
time to their result beyond ``compute`` itself (p50, p99, max), and after the build's end (the
first build's ``compute`` returned: from then on the result is the network's and the waiters'
business; p50, p99, max). After a warm-up round of each (not reported), the rounds alternate
the strategies, each on a fresh key. No figure
is asserted; the exit status is 1 when a call failed or returned another value than the build's.
The output is Markdown (``--json`` also writes every round's figures).

Keys: ``fencelock-bench-compute:*`` (and compute_once's under fencelock's prefix), deleted
before and after each round.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
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
STRATEGIES: Final = ("compute_once", "lock-then-poll", "none")
VALUE: Final = {"report": "the value every caller must get", "rows": list(range(10))}
# compare-and-delete: the hand-written loop's release
RELEASE: Final = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


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


def with_compute_once(
    client: fencelock.LockClient, r: redis.Redis, key: str, compute: Compute, s: Settings
) -> Any:
    return client.compute_once(key, compute, fresh_for=60)


def with_lock_then_poll(
    client: fencelock.LockClient, r: redis.Redis, key: str, compute: Compute, s: Settings
) -> Any:
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
    client: fencelock.LockClient, r: redis.Redis, key: str, compute: Compute, s: Settings
) -> Any:
    found = r.get(key)
    if found is not None:
        return json.loads(found)
    value = compute()
    r.set(key, json.dumps(value), ex=60)
    return value


CALLS: Final = {
    "compute_once": with_compute_once,
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


def one_round(
    strategy: str, key: str, client: fencelock.LockClient, r: redis.Redis, s: Settings
) -> tuple[list[tuple[float, float]], list[float], list[str]]:
    """This process's callers of one round: (start, end) of each call, the end of each build,
    and the calls' errors (or wrong values)."""
    calls: list[tuple[float, float]] = []
    builds: list[float] = []
    errors: list[str] = []
    start = threading.Barrier(s.callers)

    def compute() -> Any:
        time.sleep(s.compute)
        builds.append(time.monotonic())
        return VALUE

    def call() -> None:
        start.wait(BARRIER_TIMEOUT)
        began = time.monotonic()
        try:
            value = CALLS[strategy](client, r, key, compute, s)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            return
        calls.append((began, time.monotonic()))
        if value != VALUE:
            errors.append(f"returned {value!r}")

    threads = [threading.Thread(target=call) for _ in range(s.callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BARRIER_TIMEOUT)
    return calls, builds, errors


def worker(
    url: str, s: Settings, barrier: Any, results: Any
) -> None:  # pragma: no cover (runs in the spawned processes)
    r = redis.Redis.from_url(url, socket_timeout=5)
    client = fencelock.LockClient.from_url(url)
    try:
        for index, strategy in schedule(s):
            barrier.wait(BARRIER_TIMEOUT)  # the parent has cleaned up: go
            key = f"{PREFIX}{index}-{strategy}"
            results.put(one_round(strategy, key, client, r, s))
            barrier.wait(BARRIER_TIMEOUT)  # every result is in
    finally:
        client.close()
        r.close()


@dataclass
class Round:
    strategy: str
    builds: int
    over_compute: list[float]  # each call's time to its result, beyond compute (s)
    after_build: list[float]  # each call's return after the first build ended (s)
    errors: list[str] = field(default_factory=list)


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
            parts = [queue.get(timeout=BARRIER_TIMEOUT) for _ in workers]
            barrier.wait(BARRIER_TIMEOUT)
            if index < 0:  # the warm-up
                clean(r)
                continue
            calls = [c for part in parts for c in part[0]]
            builds = sorted(b for part in parts for b in part[1])
            first = builds[0] if builds else float("nan")
            out.append(
                Round(
                    strategy,
                    len(builds),
                    [end - began - s.compute for began, end in calls],
                    [end - first for _, end in calls],
                    [e for part in parts for e in part[2]],
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


def summary(rounds: list[Round], strategy: str) -> dict[str, Any]:
    mine = [x for x in rounds if x.strategy == strategy]
    over = [v for x in mine for v in x.over_compute]
    after = [v for x in mine for v in x.after_build]
    return {
        "strategy": strategy,
        "rounds": len(mine),
        "calls": len(over),
        "builds_per_round": statistics.mean(x.builds for x in mine) if mine else float("nan"),
        "builds_max": max((x.builds for x in mine), default=0),
        "over_compute_ms": [1000 * percentile(over, q) for q in (50, 99, 100)],
        "after_build_ms": [1000 * percentile(after, q) for q in (50, 99, 100)],
        "errors": [e for x in mine for e in x.errors],
    }


def markdown(rows: list[dict[str, Any]], header: list[str]) -> str:
    lines = [
        *header,
        "",
        "| strategy | builds per round (max) | beyond compute: p50 / p99 / max | after the build "
        "ended: p50 / p99 / max | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        over = " / ".join(f"{ms:.1f}" for ms in row["over_compute_ms"])
        after = " / ".join(f"{ms:.1f}" for ms in row["after_build_ms"])
        lines.append(
            f"| {row['strategy']} | {row['builds_per_round']:g} ({row['builds_max']}) | "
            f"{over} ms | {after} ms | {len(row['errors'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.compute_once",
        description="One missing result, many callers: compute_once against the hand-written "
        "loop and no coordination.",
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
        f"- date: {now}",
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
