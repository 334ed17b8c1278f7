"""The server's CPU per uncontended cycle, fencelock against the hand-written floor (issue 23).

    python -m bench.server_cpu                    # 5 x 20,000 cycles per row, about a minute
    python -m bench.server_cpu --cycles 5000 --repeat 3 --server /usr/bin/valkey-server

Throughput on a small machine is the client's CPU plus the server's per request-reply cycle;
``bench.regress`` measures the first, this the second: the server's ``used_cpu_sys +
used_cpu_user`` over the cycles, and the commands it ran per cycle (``commandstats``: each
script and every command inside it), both from ``INFO`` snapshots
(``fencelock_tools.benchmark.server_delta``), the median of ``--repeat`` runs
that alternate fencelock and the floor (min-max beside it). The rows are those of
``bench.regress``: P1's lock (``bench.uncontended``) and the primitives, a new object per cycle
(``bench.semaphore --fresh``), each against its floor, on a server started for the run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from statistics import median

import redis

import fencelock
from bench import semaphore, uncontended
from bench._common import MINIMAL_RELEASE
from fencelock_tools.benchmark import server_delta, server_info
from fencelock_tools.servers.embedded import EmbeddedServer

WARM_UP = 300


def per_cycle(probe: redis.Redis, cycle: Callable[[], None], cycles: int) -> tuple[float, float]:
    """The server's CPU (us) and the commands it ran, per cycle of ``cycle``."""
    for _ in range(WARM_UP):
        cycle()
    before = server_info(probe)
    for _ in range(cycles):
        cycle()
    ran = server_delta(before, server_info(probe))
    return 1e6 * ran.cpu / cycles, ran.total / cycles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_cpu", description=__doc__)
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--server", help="a redis-server or valkey-server binary")
    args = parser.parse_args(argv)
    server = EmbeddedServer(args.server).start()
    try:
        plain = redis.Redis.from_url(server.url)
        client = fencelock.LockClient.from_url(server.url)
        release_sha = plain.script_load(MINIMAL_RELEASE)
        rows = {
            "P1 lock": (
                uncontended.fencelock_sync_cycle(client),
                uncontended.minimal_sync_cycle(plain, release_sha),
            )
        }
        floors = semaphore.minimal_cycles(plain)
        for row, make in semaphore.primitives(client).items():
            rows[row] = (semaphore.fencelock_cycle(make, fresh=True), floors[row])
        print(f"{server.binary}, {args.repeat} x {args.cycles} cycles per row")
        print("| path | server CPU us/cycle, fencelock / floor (min-max) | commands per cycle |")
        print("|---|---:|---:|")
        for row, (lib, floor) in rows.items():
            runs = [
                (
                    per_cycle(plain, lib, args.cycles),
                    per_cycle(plain, floor, args.cycles),
                )
                for _ in range(args.repeat)
            ]
            lib_us = [lib_run[0] for lib_run, _ in runs]
            floor_us = [floor_run[0] for _, floor_run in runs]
            ratios = sorted(a / b for a, b in zip(lib_us, floor_us, strict=True))
            spread = f"{median(ratios):.1f}x, {ratios[0]:.1f}-{ratios[-1]:.1f}"
            (_, lib_commands), (_, floor_commands) = runs[0]
            print(
                f"| {row} | {median(lib_us):.0f} / {median(floor_us):.0f} "
                f"({spread}) "
                f"| {lib_commands:.0f} / {floor_commands:.0f} |"
            )
        client.close()
        plain.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
