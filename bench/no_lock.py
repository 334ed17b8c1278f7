"""Writes that need no lock, against the mutex, under contention (docs/no-lock.md).

    python -m bench.no_lock                  # 4 processes, 1 s per variant: about 15 s
    python -m bench.no_lock --quick          # 2 processes, 0.3 s per variant: a smoke run
    python -m bench.no_lock --processes 8 --seconds 3 --keys 16 --json no_lock.json

N spawned processes (one ``LockClient`` and one ``redis.Redis`` each) do read-modify-writes as
fast as they can, for ``seconds`` per variant, all variants in one set of processes (started
together by a barrier). Two workloads:

* ``hot``: every process increments ONE counter;
* ``spread``: every process increments one of ``keys`` counters, chosen at random per write.

Strategies:

* ``mutex``: fencelock lock on the counter's name, GET + SET inside, release;
* ``versioned``: ``client.versioned(key).update(increment)`` (compare-and-set, re-tried on
  conflict with jittered backoff);
* ``atomic``: ``INCR``: the whole read-modify-write in one command (a script would be the same);
* ``partitioned`` (hot only): each process its own counter, a plain GET + SET: one writer per
  key needs no coordination; the counter is the sum of the parts.

Reported per variant: writes/s summed over the processes, the re-tries per write (versioned: how
many more times ``fn`` ran than writes landed), and lost updates (the counters' sum against the
writes counted: must be 0). No figure is asserted; the exit status is 1 when an update was lost
or a worker failed. The output is Markdown (``--json`` also writes the figures).

Keys: ``fencelock-bench-no-lock:*`` (and the locks' keys under fencelock's prefix), deleted
before and after each variant.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import random
import shlex
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import redis

import fencelock
from bench._common import client_description, server_description
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

PREFIX: Final = "fencelock-bench-no-lock:"
LOCK_TTL: Final = 10.0
BARRIER_TIMEOUT: Final = 120.0  # spawning interpreters on a loaded machine
# a versioned update under heavy contention must not give up: the benchmark measures its cost
RETRIES: Final = 100_000

VARIANTS: Final = [
    ("hot", "mutex"),
    ("hot", "versioned"),
    ("hot", "atomic"),
    ("hot", "partitioned"),
    ("spread", "mutex"),
    ("spread", "versioned"),
    ("spread", "atomic"),
]


@dataclass(frozen=True)
class Settings:
    processes: int = 4
    seconds: float = 1.0
    keys: int = 16

    @classmethod
    def quick(cls) -> Settings:
        return cls(processes=2, seconds=0.3, keys=4)


@dataclass
class Result:
    workload: str
    strategy: str
    writes: int
    seconds: float
    fn_calls: int  # versioned: how many times fn ran (writes + re-tries)
    lost_updates: int
    error: str | None = None

    @property
    def per_second(self) -> float:
        return self.writes / self.seconds

    @property
    def retries_per_write(self) -> float | None:
        if self.strategy != "versioned" or not self.writes:
            return None
        return (self.fn_calls - self.writes) / self.writes


def counter_keys(workload: str, strategy: str, settings: Settings) -> list[str]:
    if workload == "hot" and strategy == "partitioned":
        return [f"{PREFIX}part-{i}" for i in range(settings.processes)]
    if workload == "hot":
        return [f"{PREFIX}counter"]
    return [f"{PREFIX}key-{i}" for i in range(settings.keys)]


def clean(r: redis.Redis) -> None:
    keys = list(r.scan_iter(match=f"*{PREFIX}*", count=1000))
    if keys:
        r.delete(*keys)


def one_write(
    strategy: str,
    key: str,
    client: fencelock.LockClient,
    r: redis.Redis,
    locks: dict[str, fencelock.Lock],
    calls: list[int],
) -> None:
    def increment(value: bytes | None) -> int:
        calls[0] += 1
        return int(value or 0) + 1

    if strategy == "mutex":
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = client.lock(key, ttl=LOCK_TTL, timeout=None)
        with lock:
            r.set(key, int(r.get(key) or 0) + 1)
    elif strategy == "versioned":
        client.versioned(key).update(increment, retries=RETRIES)
    elif strategy == "atomic":
        r.incr(key)
    else:  # partitioned: this process is the key's only writer
        r.set(key, int(r.get(key) or 0) + 1)


def worker(
    url: str, index: int, settings: Settings, barrier: Any, results: Any
) -> None:  # pragma: no cover (runs in the spawned processes)
    r = redis.Redis.from_url(url, socket_timeout=5)
    client = fencelock.LockClient.from_url(url)
    locks: dict[str, fencelock.Lock] = {}
    pick = random.Random(index)
    try:
        for workload, strategy in VARIANTS:
            keys = counter_keys(workload, strategy, settings)
            own = keys[index] if strategy == "partitioned" else None
            calls = [0]
            writes, error = 0, None
            barrier.wait(BARRIER_TIMEOUT)  # the parent has cleaned up: go
            deadline = time.monotonic() + settings.seconds
            try:
                while time.monotonic() < deadline:
                    key = own or (keys[0] if len(keys) == 1 else pick.choice(keys))
                    one_write(strategy, key, client, r, locks, calls)
                    writes += 1
            except Exception as exc:  # reported, and the run goes on with the next variant
                error = f"{type(exc).__name__}: {exc}"
            results.put((workload, strategy, writes, calls[0], error))
            barrier.wait(BARRIER_TIMEOUT)  # every result is in
    finally:
        client.close()
        r.close()


def run(url: str, settings: Settings) -> list[Result]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(settings.processes + 1)
    queue = ctx.Queue()
    r = redis.Redis.from_url(url, socket_timeout=5)
    clean(r)
    workers = [
        ctx.Process(target=worker, args=(url, i, settings, barrier, queue), daemon=True)
        for i in range(settings.processes)
    ]
    for process in workers:
        process.start()
    out = []
    try:
        for workload, strategy in VARIANTS:
            barrier.wait(BARRIER_TIMEOUT)
            rows = [queue.get(timeout=BARRIER_TIMEOUT) for _ in workers]
            barrier.wait(BARRIER_TIMEOUT)
            writes = sum(row[2] for row in rows)
            counted = sum(int(r.get(k) or 0) for k in counter_keys(workload, strategy, settings))
            errors = [row[4] for row in rows if row[4]]
            out.append(
                Result(
                    workload,
                    strategy,
                    writes,
                    settings.seconds,
                    sum(row[3] for row in rows),
                    writes - counted,
                    "; ".join(errors) or None,
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


def markdown(results: list[Result], header: list[str]) -> str:
    mutex = {x.workload: x.per_second for x in results if x.strategy == "mutex"}
    lines = [*header, "", "| workload | strategy | writes/s | vs mutex | re-tries/write | lost |"]
    lines.append("|---|---|---:|---:|---:|---:|")
    for x in results:
        retries = x.retries_per_write
        ratio = x.per_second / mutex[x.workload] if mutex.get(x.workload) else float("nan")
        lines.append(
            f"| {x.workload} | {x.strategy} | {x.per_second:,.0f} | {ratio:.1f}x | "
            f"{'' if retries is None else f'{retries:.2f}'} | {x.lost_updates} |"
            + (f" error: {x.error}" if x.error else "")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.no_lock",
        description="Read-modify-writes under contention: the mutex against writes without one.",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--processes", type=int, help="writing processes (4)")
    parser.add_argument("--seconds", type=float, help="window of one variant (1)")
    parser.add_argument("--keys", type=int, help="counters of the spread workload (16)")
    parser.add_argument("--url", help="an existing server (default: start one here, empty)")
    parser.add_argument("--server", choices=("redis", "valkey"), default=None)
    parser.add_argument("--json", type=Path, help="also write the figures there")
    args = parser.parse_args(argv)
    base = Settings.quick() if args.quick else Settings()
    chosen = {"processes": args.processes, "seconds": args.seconds, "keys": args.keys}
    s = Settings(**{**asdict(base), **{k: v for k, v in chosen.items() if v is not None}})
    if s.processes < 1 or s.seconds <= 0 or s.keys < 1:
        parser.error("--processes and --keys must be >= 1, --seconds > 0")
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer(find_server(args.server))).url
        server = server_description(url)
        results = run(url, s)
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    command = shlex.join(["python", "-m", "bench.no_lock", *argv])
    header = [
        f"- date: {now}",
        f"- server: {server}" + ("" if args.url else " (embedded, started empty)"),
        f"- client: {client_description()}",
        f"- command: `{command}`: {s.processes} processes, {s.seconds:g} s per variant, "
        f"{s.keys} keys in the spread workload",
    ]
    print(markdown(results, header), end="")
    if args.json is not None:
        rows = [
            {**asdict(x), "per_second": x.per_second, "retries_per_write": x.retries_per_write}
            for x in results
        ]
        info = {"date": now, "server": server, "client": client_description(), "command": command}
        args.json.write_text(json.dumps({**info, "results": rows}, indent=2) + "\n")
    return 1 if any(x.lost_updates or x.error for x in results) else 0


if __name__ == "__main__":
    sys.exit(main())
