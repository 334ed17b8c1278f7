"""What the throughput benchmarks share: timing loops, the run schedule, CPU pinning, the report.

Method (see ``bench.uncontended``): every variant warms up, then each of ``repeat`` repetitions
runs every variant for ``seconds``, in an order rotated by the repetition and reversed on every
other one. Reported: median and min/max of cycles/s, the client's CPU time per cycle, and ratios
both as a ratio of medians and as the median of the per-repetition ratios.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import redis
import redis.asyncio

import fencelock

# The timing loops and the run schedule live in the library, which ``fencelock bench`` and
# ``bench.compare`` use too; re-exported here for the benchmarks of issues 2 and 4.
from fencelock_tools.benchmark import (
    BATCH,
    SOCKET_TIMEOUT,
    TTL,
    AsyncCycle,
    BenchError,
    Sample,
    SyncCycle,
    Variant,
    measure,
    order_for,
    time_async,
    time_sync,
)
from fencelock_tools.servers.embedded import EmbeddedServer

# re-exported (the rest of this module's names are its own)
__all__ = [
    "BATCH",
    "SOCKET_TIMEOUT",
    "TTL",
    "AsyncCycle",
    "BenchError",
    "Sample",
    "SyncCycle",
    "Variant",
    "measure",
    "order_for",
    "time_async",
    "time_sync",
]

TTL_MS: Final = 10_000
TOKEN_BYTES: Final = 20
GOAL: Final = 0.9

# Compare-and-delete: delete the key only if it still holds our token.
MINIMAL_RELEASE: Final = """\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

AnyRedis = redis.Redis | redis.asyncio.Redis


# -- clients ---------------------------------------------------------------------------------

# Connection settings that must be the same for every client (the rest are per-pool objects).
_COMPARED_SETTINGS: Final = ("host", "port", "db", "socket_timeout", "socket_connect_timeout",
                             "parser_class", "username", "password", "ssl")  # fmt: skip


def connection_settings(client: AnyRedis) -> dict[str, Any]:
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    settings = {key: kwargs.get(key) for key in _COMPARED_SETTINGS}
    settings["connection_class"] = pool.connection_class.__name__
    return settings


def check_same_settings(reference: AnyRedis, others: Sequence[AnyRedis]) -> None:
    """Raise ``BenchError`` unless every client connects like ``reference`` (the connection
    class may differ between sync and asyncio)."""
    expected = connection_settings(reference)
    for client in others:
        settings = connection_settings(client)
        settings["connection_class"] = expected["connection_class"]
        if settings != expected:
            raise BenchError(f"connection settings differ: {settings} != {expected}")


def server_description(url: str) -> str:
    client = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT)
    try:
        info: dict[str, Any] = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info:
        name, version = "valkey", info["valkey_version"]
    else:
        name, version = info.get("server_name", "redis"), info.get("redis_version", "?")
    executable = info.get("executable") or "?"
    return f"{name} {version} ({executable})"


def client_description() -> str:
    return (
        f"Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"hiredis {'yes' if redis.utils.HIREDIS_AVAILABLE else 'no'}, "
        f"fencelock {fencelock.__version__}, {os.cpu_count()} CPUs"
    )


def callgrind_total(path: Path) -> int:
    """The instructions counted in callgrind's output file ``path``."""
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise BenchError(f"no total in {path}")


# -- running ---------------------------------------------------------------------------------


def pin(mode: str, servers: Sequence[EmbeddedServer]) -> str:
    """Set CPU affinities for ``--pin`` (``same``: the client and every server on one CPU,
    ``split``: the servers on one, the client on another); describe what was done."""
    if mode == "none":
        return "none"
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin needs os.sched_setaffinity (Linux)")
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "split" and len(cpus) < 2:
        raise SystemExit("--pin split needs two CPUs")
    server_cpu, client_cpu = cpus[0], cpus[0] if mode == "same" else cpus[1]
    os.sched_setaffinity(0, {client_cpu})
    if not servers:
        return f"{mode}: client on CPU {client_cpu}, server not pinned (not started here)"
    for server in servers:
        for task in os.listdir(f"/proc/{server.pid}/task"):  # every thread of the server
            os.sched_setaffinity(int(task), {server_cpu})
    which = "server" if len(servers) == 1 else f"all {len(servers)} servers"
    return f"{mode}: client on CPU {client_cpu}, {which} on CPU {server_cpu}"


# -- reporting -------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    noise = 100 * (high - low) / statistics.median(values)
    return f"{low:>9,.0f} {high:>9,.0f} {noise:>7.1f}%"


def print_table(all_variants: list[Variant], seconds: float, repeat: int) -> None:
    """Per variant: median, min, max and spread of cycles/s, us per cycle, client CPU."""
    width = max(16, *(len(v.name) for v in all_variants))
    trips = any(v.round_trips is not None for v in all_variants)
    print(f"\n{repeat} runs of {seconds:g} s each; cycles/s (one cycle = acquire + release)\n")
    print(
        f"{'variant':<{width}}{'  RTT' if trips else ''} {'median':>9} {'min':>9} {'max':>9}"
        f" {'spread':>8} {'us/cycle':>9} {'client CPU us/cycle':>20}"
    )
    for v in all_variants:
        median = statistics.median(v.rates)
        cpu = statistics.median(v.cpu)
        cpu_range = f"{cpu:.1f} ({min(v.cpu):.1f}-{max(v.cpu):.1f})"
        rates = f"{median:>9,.0f} {spread(v.rates)} {1e6 / median:>9.1f}"
        rtt = f"{v.round_trips if v.round_trips is not None else '?':>5}" if trips else ""
        print(f"{v.name:<{width}}{rtt} {rates} {cpu_range:>20}")


def print_ratios(pairs: Sequence[tuple[Variant, Variant]]) -> list[float]:
    """One line per (ours, baseline) pair; returns the ratios of the medians."""
    labels = [f"{ours.name} / {base.name}" for ours, base in pairs]
    width = max(32, *(len(label) for label in labels))
    print(
        f"\n{'ratio (cycles/s)':<{width}} {'of medians':>10} {'per-run median':>15}"
        f" {'min':>6} {'max':>6}   {'client CPU ratio':>16}"
    )
    ratios = []
    for label, (ours, base) in zip(labels, pairs, strict=True):
        of_medians = statistics.median(ours.rates) / statistics.median(base.rates)
        paired = [a / b for a, b in zip(ours.rates, base.rates, strict=True)]
        cpu_ratio = statistics.median(ours.cpu) / statistics.median(base.cpu)
        print(
            f"{label:<{width}} {of_medians:>10.3f} {statistics.median(paired):>15.3f}"
            f" {min(paired):>6.3f} {max(paired):>6.3f}   {cpu_ratio:>16.2f}"
        )
        ratios.append(of_medians)
    return ratios
