"""10,000 auto-renewed locks held by one client: what the single watchdog costs (issue 3).

    python -m bench.renewal [--locks 10000] [--ttl 3] [--seconds 10] [--url redis://...]

Reports renewal script calls per renewal period (ttl/3), locks renewed, leases lost (misses:
must be 0), and the client's threads. Nothing is asserted; the figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import threading
import time

import fencelock
from fencelock._embedded import EmbeddedServer


def run(url: str, locks: int, ttl: float, seconds: float) -> None:
    client = fencelock.LockClient.from_url(url)
    threads_before = threading.active_count()
    held = [client.lock(f"bench-renew-{i}", ttl=ttl, auto_renew=True) for i in range(locks)]
    started = time.monotonic()
    for lock in held:
        assert lock.acquire(0)
    acquired_in = time.monotonic() - started
    stats = client._watchdog.stats
    calls0, renewed0 = stats.calls, stats.renewed
    time.sleep(seconds)  # the measurement window: the watchdog works on its own meanwhile
    periods = seconds / (ttl / 3)
    calls, renewed = stats.calls - calls0, stats.renewed - renewed0
    print(f"locks held:                {locks} (acquired in {acquired_in:.2f} s)")
    print(f"ttl / renewal period:      {ttl} s / {ttl / 3:.2f} s, window {seconds} s")
    print(f"renew script calls:        {calls} ({calls / periods:.1f} per period)")
    print(f"calls per 100 locks/period: {100 * calls / periods / locks:.2f}")
    per_lock = renewed / periods / locks
    print(f"locks renewed:             {renewed} ({per_lock:.2f} per lock per period)")
    print(f"leases lost (misses):      {stats.lost}")
    print(f"extra threads:             {threading.active_count() - threads_before}")
    for lock in held:
        lock.release()
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--locks", type=int, default=10_000)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--url")
    args = parser.parse_args()
    if args.url:
        run(args.url, args.locks, args.ttl, args.seconds)
    else:
        with EmbeddedServer() as server:
            run(server.url, args.locks, args.ttl, args.seconds)


if __name__ == "__main__":
    main()
