"""10,000 auto-renewed locks held by one client: what the single watchdog costs (issue 3).

    python -m bench.renewal [--locks 10000] [--ttl 3] [--seconds 10] [--url redis://...]

Reports renewal script calls per renewal period (ttl/3), counted by the server (``EVAL``/
``EVALSHA`` calls in ``INFO commandstats``) and by the watchdog itself, locks renewed, leases lost
(misses: must be 0), and the client's threads. Nothing is asserted; the figures go to
docs/benchmarks.md. The measurement is workload P5 of ``fencelock_tools.benchmark`` (issue 5), which
``fencelock bench`` and ``python -m bench.compare`` run too.
"""

from __future__ import annotations

import argparse

from fencelock_tools.benchmark import FENCELOCK_RENEWING, renewal
from fencelock_tools.servers.embedded import EmbeddedServer


def run(url: str, locks: int, ttl: float, seconds: float) -> None:
    r = renewal(url, FENCELOCK_RENEWING, locks=locks, ttl=ttl, seconds=seconds, progress=None)
    if r.error:
        raise SystemExit(f"failed: {r.error}")
    print(f"locks held:                {locks} (acquired in {r.acquired_in:.2f} s)")
    print(f"ttl / renewal period:      {ttl} s / {r.period:.2f} s, window {r.window:.1f} s")
    print(f"renew script calls:        {r.requests} ({r.per_period:.1f} per period, server count)")
    print(f"calls per 100 locks/period: {r.per_100_locks:.2f}")
    if r.internal is not None:
        calls, renewed, lost = r.internal
        per_lock = renewed / r.periods / locks
        print(f"watchdog's own count:      {calls} calls, {lost} leases lost")
        print(f"locks renewed:             {renewed} ({per_lock:.2f} per lock per period)")
    print(f"leases lost (misses):      {r.missed}")
    print(f"extra threads:             {r.threads}")


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
