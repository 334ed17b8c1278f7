"""Redlock over 5 local masters: fencelock against a minimal hand-written fan-out (issue 4, item 7).

    python -m bench.redlock [--seconds 1] [--repeat 7] [--warmup 0.5] [--server redis|valkey]
                            [--url redis://... (5 times)] [--pin none|same|split]
                            [--hung] [--hung-cycles 40]

Five variants, each one client doing acquire+release cycles on a lock nobody else wants, on the
same 5 independent masters (started here with ``EmbeddedServer``, or given by ``--url``):

* ``fencelock sync``: ``LockClient.from_url([url1, ..., url5])``, ``lock = client.lock("bench",
  ttl=10)``; ``lock.acquire(timeout=0)``, ``lock.release()``. The sync client fans out without
  threads: it writes the request to one connection of every node, then reads the replies. The
  Redlock fencing token is agreed inside the acquire (a token proposed by the client): when a
  majority grants the same token nothing is written back, so this cycle is 2 round trips, like
  the minimal one. When the nodes' tokens differ, the write-back (raising a majority's counters
  to the largest) is lazy in the sync API: it happens when ``lock.token`` is first read.
* ``fencelock sync + token``: the same, and the cycle also reads ``lock.token``: 2 round trips
  when the majority agreed, 3 when it did not (the cost of fencing then).
* ``fencelock async``: ``fencelock.asyncio.LockClient``, the same cycle with ``await``: 2 round
  trips when the majority agreed; in asyncio a write-back is part of ``acquire`` (a property
  cannot await).
* ``minimal sync``: the least a correct Redlock needs, in redis-py: for each node take a
  connection from its pool and ``send_command("SET", key, token, "NX", "PX", 10000)`` on it, then
  ``read_response()`` from all 5; at least 3 ``OK`` and a positive validity (ttl - elapsed -
  (0.01 * ttl + 0.002)) are required; then the same send-all/read-all for ``EVALSHA`` of a
  compare-and-delete script (loaded once per node), at least 3 of which must answer 1. The token
  is fresh per cycle (``secrets.token_urlsafe(20)``, as in fencelock).
* ``minimal async``: the same with ``redis.asyncio``: ``asyncio.gather`` of the 5 ``SET``, then
  ``gather`` of the 5 ``EVALSHA``.

Every node client is built like fencelock's own node clients: fencelock bounds every socket
operation of a Redlock node by the node timeout (``node_timeout``, or when not given
``NODE_TIMEOUT_MAX`` = 50 ms), so the minimal clients get socket and connect timeouts of 50 ms
too; the script checks that all clients connect with the same settings before measuring. Each
cycle checks its replies, so a variant that silently stopped acquiring cannot look fast.

Method (as in ``bench.uncontended``): every variant first warms up (connections made, scripts
cached, code paths hot), then each of ``--repeat`` repetitions runs every variant for
``--seconds``; the order of the variants is rotated, and reversed on every other repetition, so
slow drift (CPU frequency, a noisy neighbour) does not favour one of them. Reported: the median
rate and the min/max over repetitions, the client's own CPU time per cycle (``time.process_time``:
the library's overhead, much less sensitive to scheduling than the wall-clock rate), and the
fencelock/minimal ratios both as a ratio of medians and as the median of the per-repetition
ratios. The goal of issue 4 is ``fencelock sync / minimal sync`` >= 0.9.

``--pin`` fixes where the processes run (Linux): ``same`` puts the client and all 5 servers on one
CPU, ``split`` the servers on one CPU and the client on another.

``--hung`` then pauses one of the 5 servers (SIGSTOP) and times single acquire+release cycles of
fencelock sync with ``node_timeout=0.05``: a hung node should cost about one node timeout per
request (the acquire, and again the release), not the length of the hang. The server is resumed
afterwards. (Embedded servers only.)

With ``--url`` the benchmark writes ``fencelock:{bench}:lock``, ``fencelock:{bench}:fence`` (the
fencing counter, until it expires) and ``bench:minimal:lock`` on every one of those servers.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Final

import redis
import redis.asyncio
from redis.exceptions import RedisError

import fencelock
import fencelock.asyncio
from fencelock._core.quorum import NODE_TIMEOUT_MAX, node_timeout, quorum
from fencelock_tools._lib import ACQUIRE, RELEASE, LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

from ._common import (
    GOAL,
    MINIMAL_RELEASE,
    TOKEN_BYTES,
    TTL,
    TTL_MS,
    AsyncCycle,
    BenchError,
    SyncCycle,
    Variant,
    check_same_settings,
    client_description,
    measure,
    pin,
    print_ratios,
    print_table,
    server_description,
    time_async,
    time_sync,
)

NODES: Final = 5
LOCK_NAME: Final = "bench"
MINIMAL_KEY: Final = "bench:minimal:lock"
# What bounds every socket of fencelock's node clients when no node_timeout is given.
NODE_SOCKET_TIMEOUT: Final = NODE_TIMEOUT_MAX
HUNG_NODE_TIMEOUT: Final = 0.05
# Redlock's validity: a grant counts only if ttl - elapsed - (0.01 * ttl + 0.002) > 0.
VALIDITY_BUDGET: Final = TTL - (0.01 * TTL + 0.002)
OK_REPLIES: Final = (b"OK", "OK")


# -- the variants ----------------------------------------------------------------------------


def fencelock_sync_cycle(client: fencelock.LockClient) -> SyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL)

    def cycle() -> None:
        if not lock.acquire(timeout=0):
            raise BenchError(f"fencelock sync: {LOCK_NAME!r} was busy")
        lock.release()

    return cycle


def fencelock_token_cycle(client: fencelock.LockClient) -> SyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL)
    last = [0]

    def cycle() -> None:
        if not lock.acquire(timeout=0):
            raise BenchError(f"fencelock sync + token: {LOCK_NAME!r} was busy")
        token = lock.token  # the first read raises a majority's fencing counters to it
        if token <= last[0]:
            raise BenchError(f"fencelock sync + token: token {token} after {last[0]}")
        last[0] = token
        lock.release()

    return cycle


def fencelock_async_cycle(client: fencelock.asyncio.LockClient) -> AsyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL)

    async def cycle() -> None:
        if not await lock.acquire(timeout=0):
            raise BenchError(f"fencelock async: {LOCK_NAME!r} was busy")
        await lock.release()

    return cycle


def minimal_sync_cycle(
    nodes: Sequence[redis.Redis], sha: str, fencelock_scripts: bool = False
) -> SyncCycle:
    """``fencelock_scripts``: acquire and release with fencelock's own Lua (the fencing counter's
    INCR, the wake-up PUBLISH) instead of SET NX PX and a bare compare-and-delete, to separate
    what the scripts cost on the servers from what the library costs in the client."""
    pools = [node.connection_pool for node in nodes]
    need = quorum(len(nodes))

    def fan_out(command: tuple[Any, ...]) -> list[Any]:
        """Write ``command`` to one connection of every node (each as soon as it is taken from
        its pool, so the first node starts working at once), then read every reply (an error
        reply, a timeout, or a connection that cannot be made again in time, after one that
        timed out was dropped, counts as a no; every read is bounded by the socket timeout)."""
        conns: list[tuple[Any, Any]] = []
        replies: list[Any] = []
        try:
            for pool in pools:
                try:
                    conn = pool.get_connection()
                except RedisError as exc:
                    replies.append(exc)
                    continue
                conns.append((pool, conn))
                conn.send_command(*command)  # type: ignore[no-untyped-call]
            for _, conn in conns:
                try:
                    replies.append(conn.read_response())
                except RedisError as exc:
                    replies.append(exc)
        finally:
            for pool, conn in conns:
                pool.release(conn)
        return replies

    keys = LockKeys.for_name("bench-minimal-scripts")

    def acquire_command(token: str) -> tuple[Any, ...]:
        if fencelock_scripts:
            lock_keys = (keys.lock, keys.fence, keys.queue)
            return ("EVALSHA", ACQUIRE.sha, 3, *lock_keys, token, TTL_MS, 1, "")
        return ("SET", MINIMAL_KEY, token, "NX", "PX", TTL_MS)

    def release_command(token: str) -> tuple[Any, ...]:
        if fencelock_scripts:
            return (
                "EVALSHA",
                RELEASE.sha,
                2,
                keys.lock,
                keys.queue,
                token,
                keys.channel,
                "PUBLISH",
            )
        return ("EVALSHA", sha, 1, MINIMAL_KEY, token)

    def granted(reply: Any) -> bool:
        if fencelock_scripts:
            return isinstance(reply, list) and reply[0] == 1
        return reply in OK_REPLIES

    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        sent_at = time.monotonic()
        replies = fan_out(acquire_command(token))
        if sum(1 for reply in replies if granted(reply)) < need or (
            time.monotonic() - sent_at >= VALIDITY_BUDGET
        ):
            raise BenchError(f"minimal sync: no majority for {MINIMAL_KEY!r}: {replies}")
        replies = fan_out(release_command(token))
        if sum(1 for reply in replies if reply == 1) < need:
            raise BenchError(f"minimal sync: {MINIMAL_KEY!r} not ours at release: {replies}")

    return cycle


def minimal_async_cycle(nodes: Sequence[redis.asyncio.Redis], sha: str) -> AsyncCycle:
    need = quorum(len(nodes))

    async def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        sent_at = time.monotonic()
        replies = await asyncio.gather(
            *[node.set(MINIMAL_KEY, token, nx=True, px=TTL_MS) for node in nodes],
            return_exceptions=True,
        )
        granted = sum(1 for reply in replies if reply is True)
        if granted < need or time.monotonic() - sent_at >= VALIDITY_BUDGET:
            raise BenchError(f"minimal async: no majority for {MINIMAL_KEY!r}: {replies}")
        replies = await asyncio.gather(
            *[node.evalsha(sha, 1, MINIMAL_KEY, token) for node in nodes],
            return_exceptions=True,
        )
        if sum(1 for reply in replies if reply == 1) < need:
            raise BenchError(f"minimal async: {MINIMAL_KEY!r} not ours at release: {replies}")

    return cycle


def node_clients(urls: Sequence[str]) -> list[redis.Redis]:
    return [
        redis.Redis.from_url(
            url, socket_timeout=NODE_SOCKET_TIMEOUT, socket_connect_timeout=NODE_SOCKET_TIMEOUT
        )
        for url in urls
    ]


def load_script(nodes: Sequence[redis.Redis]) -> str:
    for node in nodes:  # for the variant that runs fencelock's own scripts
        for script in (ACQUIRE, RELEASE):
            node.script_load(script.source)
    shas = {str(node.script_load(MINIMAL_RELEASE)) for node in nodes}
    if len(shas) != 1:
        raise BenchError(f"the nodes disagree on the script's SHA1: {shas}")
    return shas.pop()


@contextmanager
def variants(urls: list[str], runner: asyncio.Runner) -> Iterator[list[Variant]]:
    """The five variants, connected to ``urls``; all clients are closed on exit."""
    # (imported here: the cycles above also run on other trees' fencelock, in bench.regress)
    from fencelock._async.routes import AsyncQuorumRoute
    from fencelock._sync.routes import SyncQuorumRoute

    with ExitStack() as stack:
        fl_sync = fencelock.LockClient.from_url(urls)
        stack.callback(fl_sync.close)
        min_sync = node_clients(urls)
        for node in min_sync:
            stack.callback(node.close)

        # redis.asyncio clients belong to the loop they first ran on: make them inside it.
        async def make_async() -> tuple[fencelock.asyncio.LockClient, list[redis.asyncio.Redis]]:
            return fencelock.asyncio.LockClient.from_url(urls), [
                redis.asyncio.Redis.from_url(
                    url,
                    socket_timeout=NODE_SOCKET_TIMEOUT,
                    socket_connect_timeout=NODE_SOCKET_TIMEOUT,
                )
                for url in urls
            ]

        fl_async, min_async = runner.run(make_async())
        stack.callback(lambda: runner.run(fl_async.close()))

        def close_async(node: redis.asyncio.Redis) -> None:
            runner.run(node.aclose())

        for anode in min_async:
            stack.callback(close_async, anode)

        sync_nodes, async_nodes = fl_sync._wiring.topology.route, fl_async._wiring.topology.route
        if not isinstance(sync_nodes, SyncQuorumRoute) or not isinstance(
            async_nodes, AsyncQuorumRoute
        ):
            raise BenchError("fencelock is not in Redlock mode")
        if len(sync_nodes.nodes) != len(urls) or len(async_nodes.nodes) != len(urls):
            raise BenchError("fencelock is not in Redlock mode over every URL")
        for i in range(len(urls)):
            check_same_settings(
                sync_nodes.nodes[i], [min_sync[i], async_nodes.nodes[i], min_async[i]]
            )
        if sync_nodes.node_timeout(TTL) != NODE_SOCKET_TIMEOUT:
            raise BenchError("fencelock's per-request node timeout is not the socket timeout")

        sha = load_script(min_sync)
        fl_sync_cycle = fencelock_sync_cycle(fl_sync)
        fl_token_cycle = fencelock_token_cycle(fl_sync)
        fl_async_cycle = fencelock_async_cycle(fl_async)
        min_sync_cycle = minimal_sync_cycle(min_sync, sha)
        min_scripts_cycle = minimal_sync_cycle(min_sync, sha, fencelock_scripts=True)
        min_async_cycle = minimal_async_cycle(min_async, sha)
        yield [
            Variant("fencelock sync", lambda s: time_sync(fl_sync_cycle, s), 2),
            Variant("fencelock sync + token", lambda s: time_sync(fl_token_cycle, s), 3),
            Variant("minimal sync", lambda s: time_sync(min_sync_cycle, s), 2),
            Variant("minimal sync, our Lua", lambda s: time_sync(min_scripts_cycle, s), 2),
            Variant("fencelock async", lambda s: runner.run(time_async(fl_async_cycle, s)), 3),
            Variant("minimal async", lambda s: runner.run(time_async(min_async_cycle, s)), 2),
        ]


# -- reporting -------------------------------------------------------------------------------


def report(all_variants: list[Variant], seconds: float, repeat: int) -> float:
    """Print the table; return the sync ratio of medians (the figure the goal is about)."""
    by_name = {v.name: v for v in all_variants}
    print_table(all_variants, seconds, repeat)
    print(
        "\nRTT: round trips to the 5 nodes per cycle. A token the majority agreed on is not"
        "\nwritten back; one it did not is, by fencelock sync at the first read of lock.token"
        "\n(the '+ token' line) and by fencelock async inside acquire (3 round trips then)."
    )
    pairs = [
        (by_name["fencelock sync"], by_name["minimal sync"]),
        (by_name["fencelock sync + token"], by_name["minimal sync"]),
        (by_name["fencelock sync"], by_name["minimal sync, our Lua"]),
        (by_name["fencelock async"], by_name["minimal async"]),
    ]
    sync_ratio = print_ratios(pairs)[0]
    verdict = "met" if sync_ratio >= GOAL else "NOT met"
    print(
        f"\nfencelock sync / minimal sync fan-out = {sync_ratio:.2f}x"
        f" (ratio of medians {sync_ratio:.3f}; goal >= {GOAL}x: {verdict})"
    )
    return sync_ratio


def ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def hung(server: EmbeddedServer, urls: list[str], cycles: int, healthy: float) -> None:
    """Pause ``server`` and time single acquire+release cycles of fencelock sync (``healthy``:
    its cycle time, s, with every node up)."""
    print(
        f"\nhung node: server on port {server.port} paused (SIGSTOP); fencelock sync,"
        f" node_timeout={HUNG_NODE_TIMEOUT:g} s, {cycles} cycles after 3 warm-up cycles"
    )
    with fencelock.LockClient.from_url(urls, node_timeout=HUNG_NODE_TIMEOUT) as client:
        # A lock of its own: once resumed, the server runs the requests that waited in its
        # sockets, and may hold stale grants of this lock for a ttl.
        name = f"bench-hung-{secrets.token_hex(4)}"
        lock = client.lock(name, ttl=TTL)
        for _ in range(3):  # healthy: connections made, scripts cached
            if not lock.acquire(timeout=0):
                raise BenchError(f"hung: {name!r} was busy before the pause")
            lock.release()
        acquires: list[float] = []
        releases: list[float] = []
        server.pause()
        try:
            for i in range(3 + cycles):
                start = time.perf_counter()
                if not lock.acquire(timeout=0):
                    raise BenchError(f"hung: no majority for {name!r} with 4 of 5 nodes")
                acquired = time.perf_counter()
                lock.release()
                if i >= 3:
                    acquires.append(acquired - start)
                    releases.append(time.perf_counter() - acquired)
        finally:
            server.resume()
    totals = [a + r for a, r in zip(acquires, releases, strict=True)]
    print(f"{'':<8} {'median':>9} {'min':>9} {'max':>9}")
    for label, values in (("acquire", acquires), ("release", releases), ("cycle", totals)):
        print(
            f"{label:<8} {ms(statistics.median(values)):>9} {ms(min(values)):>9}"
            f" {ms(max(values)):>9}"
        )
    cycle = statistics.median(totals)
    print(
        f"one node hung: a cycle takes {ms(cycle)} (healthy: {ms(healthy)}), that is"
        f" {(cycle - healthy) / 2 / HUNG_NODE_TIMEOUT:.2f} node timeouts more per request"
        f" (acquire, release), however long the node stays hung"
    )


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redlock",
        description="Redlock over 5 masters: fencelock vs a minimal hand-written fan-out.",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="one run, s (default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per variant (default 7)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up per variant, s (0.5)")
    parser.add_argument(
        "--server", choices=("redis", "valkey"), default=None,
        help="embedded server binary (default: redis-server if present, else valkey)",
    )  # fmt: skip
    parser.add_argument(
        "--url", action="append", default=[],
        help=f"an existing master; give it {NODES} times (default: start {NODES} servers)",
    )  # fmt: skip
    parser.add_argument(
        "--pin", choices=("none", "same", "split"), default="none",
        help="CPU affinity: the client and the servers on one CPU, on two CPUs, or none (default)",
    )  # fmt: skip
    parser.add_argument(
        "--hung", action="store_true",
        help="afterwards, pause one server and time fencelock sync cycles (node_timeout 0.05 s)",
    )  # fmt: skip
    parser.add_argument("--hung-cycles", type=int, default=40, help="cycles timed with --hung")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0 or args.hung_cycles < 1:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0, --hung-cycles >= 1")
    if args.url and len(args.url) != NODES:
        parser.error(f"give --url {NODES} times (got {len(args.url)})")
    if args.url and (args.server or args.hung):
        parser.error("--server and --hung need the embedded servers (no --url)")

    with ExitStack() as stack:
        servers: list[EmbeddedServer] = []
        if args.url:
            urls: list[str] = args.url
        else:
            binary = find_server(args.server)
            servers = [stack.enter_context(EmbeddedServer(binary)) for _ in range(NODES)]
            urls = [server.url for server in servers]
        descriptions = {server_description(url) for url in urls}
        print(f"servers: {NODES} masters, {'; '.join(sorted(descriptions))}")
        print(f"         {' '.join(urls)}")
        print(f"client:  {client_description()}")
        print(
            f"nodes:   socket/connect timeouts {NODE_SOCKET_TIMEOUT:g} s (fencelock's"
            f" NODE_TIMEOUT_MAX), per-request node timeout {node_timeout(TTL):g} s at ttl {TTL:g}"
        )
        print(f"pinning: {pin(args.pin, servers)}")
        runner = stack.enter_context(asyncio.Runner())
        with variants(urls, runner) as all_variants:
            measure(all_variants, args.seconds, args.repeat, args.warmup)
            report(all_variants, args.seconds, args.repeat)
        if args.hung:
            fl_sync = next(v for v in all_variants if v.name == "fencelock sync")
            healthy = 1 / statistics.median(fl_sync.rates)
            hung(servers[-1], urls, args.hung_cycles, healthy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
