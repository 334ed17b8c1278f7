"""Keys and memory a lock leaves in Redis once its name is idle (issue 12, item 7).

    python -m bench.garbage [--names 100000] [--ttl 1] [--server redis|valkey] [--reentrant]

Starts a server of its own, locks and releases ``--names`` distinct names once each (per-entity
names, ``order:<i>``), and reports the keys and ``used_memory`` right after, and again once the
lease time has passed and the server's active expiry has removed what expired (waiting at most a
minute for the key count to reach 0). The fencing counter of a name is kept until the server's
clock has passed its last token and for the lease (_scripts/prelude.lua), so the count reaches 0
about a ttl after the last release.
"""

from __future__ import annotations

import argparse
import time

from fencelock import LockClient
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

WAIT_FOR_EXPIRY = 60.0


def used_memory(client: object) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names", type=int, default=100_000)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--server", choices=["redis", "valkey"], default=None)
    parser.add_argument("--reentrant", action="store_true")
    args = parser.parse_args()
    with EmbeddedServer(find_server(args.server)) as server, server.client() as probe:
        version = probe.info("server")
        kind = "valkey" if "valkey_version" in version else "redis"
        print(f"server: {kind} {version.get('valkey_version') or version['redis_version']}")
        base_keys, base_memory = probe.dbsize(), used_memory(probe)
        started = time.monotonic()
        with LockClient.from_url(server.url) as client:
            for i in range(args.names):
                lock = client.lock(f"order:{i}", ttl=args.ttl, reentrant=args.reentrant)
                if not lock.acquire(timeout=0):
                    raise SystemExit(f"order:{i} was not granted")
                lock.release()
        took = time.monotonic() - started
        after_keys, after_memory = probe.dbsize(), used_memory(probe)
        print(
            f"{args.names:,} names locked and released in {took:.1f} s "
            f"({'reentrant' if args.reentrant else 'simple'} locks, ttl {args.ttl} s)"
        )
        print(
            f"right after: {after_keys - base_keys:,} keys, "
            f"+{(after_memory - base_memory) / 1e6:.2f} MB used_memory"
        )
        last_release = time.monotonic()
        deadline = last_release + WAIT_FOR_EXPIRY
        while probe.dbsize() > base_keys and time.monotonic() < deadline:
            time.sleep(0.05)
        idle_keys, idle_memory = probe.dbsize(), used_memory(probe)
        print(
            f"{time.monotonic() - last_release:.1f} s after the last release: "
            f"{idle_keys - base_keys:,} keys, "
            f"{(idle_memory - base_memory) / 1e6:+.2f} MB used_memory"
        )


if __name__ == "__main__":
    main()
