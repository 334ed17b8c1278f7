"""Leader election failover: how long after the leader dies does a standby lead (issue 16)?

    python -m bench.election [--ttls 1,2,5] [--repeat 5] [--url redis://...]

Per run: a leader process campaigns (``client.election(name, ttl=T)``) and leads; a standby in
this process campaigns and waits; after a random pause (up to one renewal interval, T/3, so the
lease left at the kill is anywhere between 2/3 T and T) the leader is killed with SIGKILL. The
failover time is from the kill to the standby's ``campaign()`` returning its term. For
comparison, a *resignation*: the leader resigns instead of dying (from the line it reads on
stdin to the standby's term).

Expected: a dead leader's lease runs out on the server between 2/3 T and T after the kill
(nothing tells anyone it died), and the standby re-tries when the lease it saw would end; a
resignation hands over at once (the release grants to the queued standby).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import ExitStack
from typing import Final

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer

from ._common import client_description, server_description

NAME: Final = "bench-election"
LEADER: Final = textwrap.dedent(
    """
    import sys, fencelock
    client = fencelock.LockClient.from_url(sys.argv[1])
    el = client.election(sys.argv[2], ttl=float(sys.argv[3]))
    print(el.campaign(), flush=True)
    sys.stdin.readline()
    el.resign()
    """
)


def one_failover(url: str, ttl: float, kill: bool, client: fencelock.LockClient) -> float:
    """Seconds from the leader's death (``kill``) or resignation to the standby's term."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, url, NAME, str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert leader.stdout is not None and leader.stdin is not None
        old_term = int(leader.stdout.readline())
        standby = client.election(NAME, ttl=ttl)
        elected: list[float] = []

        def campaign() -> None:
            term = standby.campaign(timeout=10 * ttl + 10)
            elected.append(time.monotonic())
            assert term > old_term

        thread = threading.Thread(target=campaign, daemon=True)
        waiting = client.statistics().waiting
        thread.start()
        while client.statistics().waiting == waiting:  # the standby waits in Redis now
            time.sleep(0.001)
        time.sleep(random.uniform(0, ttl / 3))  # anywhere in the leader's renewal cycle
        ended = time.monotonic()
        if kill:
            os.kill(leader.pid, signal.SIGKILL)
        else:
            leader.stdin.write("resign\n")
            leader.stdin.flush()
        thread.join(10 * ttl + 20)
        if not elected:
            raise RuntimeError("the standby was not elected")
        standby.resign()
        return elected[0] - ended
    finally:
        if leader.poll() is None:
            leader.kill()
        leader.communicate()


def report(label: str, ttl: float, times: list[float]) -> None:
    median, low, high = (1e3 * x for x in (statistics.median(times), min(times), max(times)))
    print(f"  ttl {ttl:g} s  {label:<8} {median:8.1f} ms  ({low:.1f}-{high:.1f})  "
          f"= {median / 1e3 / ttl:.2f} ttl")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.election",
        description="Leader election failover time after SIGKILL of the leader, per ttl.",
    )
    parser.add_argument("--ttls", default="1,2,5", help="leases to try, s (default 1,2,5)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per ttl (default 5)")
    parser.add_argument("--url", help="an existing server (default: start one with EmbeddedServer)")
    args = parser.parse_args(argv)
    try:
        ttls = [float(t) for t in args.ttls.split(",")]
    except ValueError:
        parser.error(f"--ttls must be numbers separated by commas, got {args.ttls!r}")
    if args.repeat < 1 or not all(t >= 0.1 for t in ttls):
        parser.error("--repeat must be >= 1 and every ttl >= 0.1")
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer()).url
        print(f"server:  {server_description(url)} at {url}")
        print(f"client:  {client_description()}")
        client = stack.enter_context(fencelock.LockClient.from_url(url))
        print(f"from the leader's end to the standby's term: median (min-max) of {args.repeat}")
        for ttl in ttls:
            report(
                "SIGKILL", ttl, [one_failover(url, ttl, True, client) for _ in range(args.repeat)]
            )
            report(
                "resign", ttl, [one_failover(url, ttl, False, client) for _ in range(args.repeat)]
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
