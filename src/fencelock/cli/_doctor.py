"""``fencelock doctor``: a preflight of a deployment. It connects as the application would, reads
what threatens fencelock's promises (the rules are ``fencelock._core.hazards``, shared with the
client's own warning before its first grant), and runs every primitive once on a name of its
own, so that a permission the application lacks shows here rather than in production.

Exit statuses: 0 nothing threatens a promise (notes allowed), 1 a hazard was found, 64 bad usage,
69 the server cannot be reached (Redlock: no majority of the nodes; Sentinel: no master).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.sentinel import Sentinel

from .. import LockClient, LockConnectionError, LockError, ScriptsRequired
from .._core import hazards, natives
from ._common import (
    EX_UNAVAILABLE,
    EX_USAGE,
    Commands,
    add_prefix_option,
    default_url,
    positive_float,
    redact,
)

STATUSES: Final = (
    "exit statuses: 0 nothing threatens a promise (notes allowed), 1 a hazard was found, "
    "64 bad usage, 69 the server cannot be reached (Redlock: no majority of the nodes)"
)


def add_commands(commands: Commands) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check a deployment for what threatens the locks' promises",
        description=(
            "Connect as the application would and report every hazard to fencelock's promises "
            "(eviction, memory, persistence, replicas, scripts, clocks, Cluster slots, ACL "
            "permissions, the server version), each with what breaks, when, and the fix; then "
            "take each primitive once on a name of its own (prefix + 'fencelock-doctor')."
        ),
        epilog=STATUSES,
    )
    parser.add_argument(
        "url",
        nargs="*",
        metavar="URL",
        help="the server, redis://host:port/db (default: $FENCELOCK_URL, then $REDIS_URL); "
        "several: Redlock nodes",
    )
    topology = parser.add_mutually_exclusive_group()
    topology.add_argument("--cluster", action="store_true", help="URL is a node of a Cluster")
    topology.add_argument(
        "--sentinel",
        action="append",
        metavar="HOST:PORT",
        help="a Sentinel (repeatable), with --service: check the master it names",
    )
    parser.add_argument("--service", metavar="NAME", help="the Sentinel service (master name)")
    parser.add_argument(
        "--min-replicas",
        type=int,
        default=0,
        metavar="N",
        help="the application's min_replicas (grants wait for N replicas)",
    )
    add_prefix_option(parser)
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="each request's bound in seconds (default 5)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=doctor)


class Unreachable(Exception):
    pass


@dataclass
class Examination:
    """What was found, and of which servers."""

    target: str
    servers: list[str] = field(default_factory=list)  # "host:port (valkey 9.0.0)"
    findings: list[hazards.Finding] = field(default_factory=list)


def doctor(args: argparse.Namespace) -> int:
    if bool(args.service) != bool(args.sentinel):
        args.parser.error("--sentinel and --service go together")
    if args.min_replicas < 0:
        args.parser.error("--min-replicas must be >= 0")
    urls: list[str] = args.url or [default_url()]
    if (args.cluster or args.sentinel) and len(args.url) > 1:
        args.parser.error("one URL with --cluster; none with --sentinel")
    try:
        if args.sentinel:
            found = _sentinel(args)
        elif args.cluster:
            found = _cluster(urls[0], args)
        elif len(urls) > 1:
            found = _redlock(urls, args)
        else:
            found = _one(urls[0], args)
    except ValueError as exc:
        print(f"fencelock doctor: bad URL: {exc}", file=sys.stderr)
        return EX_USAGE
    except Unreachable as exc:
        print(f"fencelock doctor: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    status = hazards.exit_status(found.findings)
    if args.json:
        report = {**asdict(found), "status": status}
        print(json.dumps(report, indent=2))
    else:
        _print(found, status)
    return status


# -- gathering: thin shells around the rules -------------------------------------------------


def _address(r: redis.Redis) -> str:
    kwargs = r.connection_pool.connection_kwargs
    return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")


def _config(r: redis.Redis, name: str) -> str | None:
    """A setting, or None when CONFIG GET is refused (managed servers, an ACL)."""
    try:
        value = r.config_get(name)
    except RedisError:
        return None
    found = value.get(name)
    return None if found is None else str(found)


def examine(
    r: redis.Redis, where: str, min_replicas: int, *, cluster: bool = False
) -> tuple[str, list[hazards.Finding]]:
    """One server: what it is, and what its settings threaten. Unreachable if it does not
    answer at all."""
    try:
        hello = r.execute_command("HELLO")
    except ResponseError:  # a server or proxy without HELLO: its version is not known
        hello = None
    except RedisError as exc:
        raise Unreachable(f"{where}: {exc}") from None
    commands = (
        natives.ServerCommands().detected(hello) if hello is not None else natives.ServerCommands()
    )
    found: list[hazards.Finding] = []

    def read(gather: Callable[[], Any]) -> Any:
        try:
            return gather()
        except ResponseError:  # refused: that rule has nothing to read
            return None

    found += hazards.memory(read(lambda: r.info("memory")), where)
    persistence = read(lambda: r.info("persistence"))
    if persistence is not None:
        save, fsync = _config(r, "save"), _config(r, "appendfsync")
        found += hazards.persistence(persistence, save, fsync, where)
    replication = read(lambda: r.info("replication"))
    if replication is not None:
        found += hazards.replication(replication, min_replicas, where)
    sent = time.time()
    now = read(r.time)
    if now is not None:
        found += hazards.clock(now[0] + now[1] / 1e6, sent, time.time(), where)
    refusal = None
    try:
        r.eval("return 1", 0)
    except ResponseError as exc:
        if not natives.scripts_refused(exc):
            raise
        refusal = str(exc)
    found += hazards.scripting(refusal, commands, where)
    found += hazards.version(commands, cluster, refusal is None, where)
    return f"{where} ({commands.server or 'version unknown'})", found


# One name for every run: a semaphore and a read-write lock keep their limit after use, so a
# name per run would leave two keys per run.
PROBE_NAME: Final = "fencelock-doctor"


def probe(
    make: Callable[[], LockClient], where: str, *, redlock: bool = False
) -> list[hazards.Finding]:
    """Each primitive once, on names of its own, as the application's calls would go: what the
    server refuses (an ACL without a command, a key or a channel) is a hazard. A second client
    waits on the held lock, so that its subscription is tried too. (Redlock: the lock and the
    election, the primitives it has.)"""
    name = PROBE_NAME
    refused: dict[str, str] = {}
    warned = _Warnings()

    @contextlib.contextmanager
    def trying(operation: str) -> Iterator[None]:
        try:
            yield
        except ScriptsRequired:  # already said by the scripting rule
            pass
        except LockConnectionError as exc:
            refused[operation] = f"no answer: {exc}"
        except (LockError, RedisError) as exc:
            refused[operation] = str(exc)

    waiters = logging.getLogger("fencelock.waiter")
    waiters.addHandler(warned)
    try:
        with make() as client, make() as other:
            lock = client.lock(name, 5.0)
            with trying("a lock's acquire"):
                if lock.acquire(timeout=0):
                    with trying("a waiter (SUBSCRIBE, PING, UNSUBSCRIBE)"):
                        other.lock(name, 5.0).acquire(timeout=0.05)
                    with trying("an extension (the watchdog's renewal)"):
                        lock.extend()
                    with trying("a lock's release"):
                        lock.release()
            with trying("an election"):
                election = client.election(name, 5.0)
                if election.campaign(timeout=0):
                    election.resign()
            if redlock:
                return _refusals(refused, warned, where)
            with trying("a semaphore"):
                sem = client.semaphore(name, 2, 5.0)
                if sem.acquire(timeout=0):
                    sem.release()
            with trying("a read-write lock"):
                writer = client.rw_lock(name, 5.0).write()
                if writer.acquire(timeout=0):
                    writer.release()
            with trying("a latch"):
                client.latch(name, 1, 5.0, keep=5.0).count_down()
    finally:
        waiters.removeHandler(warned)
    return _refusals(refused, warned, where)


def _refusals(refused: dict[str, str], warned: _Warnings, where: str) -> list[hazards.Finding]:
    for message in warned.messages:  # (a refused subscription is a fallback, not an error)
        refused["a waiter's wake-up"] = message
    return hazards.permissions(refused, where)


class _Warnings(logging.Handler):
    """The library's warnings while the probe runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The application's client options that the probe's clients take too."""
    options: dict[str, Any] = {"prefix": args.prefix, "socket_timeout": args.timeout}
    if args.min_replicas:
        options["min_replicas"] = args.min_replicas
    return options


def _one(url: str, args: argparse.Namespace) -> Examination:
    r = redis.Redis.from_url(url, socket_timeout=args.timeout, socket_connect_timeout=args.timeout)
    found = Examination(redact(url))
    with contextlib.closing(r):
        where = _address(r)
        server, findings = examine(r, where, args.min_replicas)
        found.servers.append(server)
        found.findings += findings
        found.findings += probe(lambda: LockClient(r, **_options(args)), where)
    return found


def _redlock(urls: Sequence[str], args: argparse.Namespace) -> Examination:
    found = Examination(", ".join(redact(u) for u in urls))
    nodes = [
        redis.Redis.from_url(u, socket_timeout=args.timeout, socket_connect_timeout=args.timeout)
        for u in urls
    ]
    unreachable = []
    try:
        for node in nodes:
            where = _address(node)
            try:
                server, findings = examine(node, where, 0)
            except Unreachable:
                unreachable.append(where)
                continue
            found.servers.append(server)
            found.findings += findings
        if len(nodes) - len(unreachable) < len(nodes) // 2 + 1:
            raise Unreachable(f"no majority of the Redlock nodes answers: {unreachable} do not")
        found.findings += hazards.redlock(len(nodes), unreachable)
        found.findings += probe(
            lambda: LockClient(nodes, **_options(args)), "Redlock", redlock=True
        )
    finally:
        for node in nodes:
            node.close()
    return found


def _cluster(url: str, args: argparse.Namespace) -> Examination:
    found = Examination(redact(url))
    try:
        cluster = RedisCluster.from_url(
            url, socket_timeout=args.timeout, socket_connect_timeout=args.timeout
        )
    except RedisClusterException as exc:  # (redis-py refuses a Cluster that misses slots)
        return _broken_cluster(url, args, found, exc)
    except RedisError as exc:
        raise Unreachable(f"no Cluster at {redact(url)}: {exc}") from None
    with contextlib.closing(cluster):
        unreachable, info = [], None
        for node in cluster.get_nodes():
            where = f"{node.host}:{node.port}"
            assert node.redis_connection is not None
            try:
                server, findings = examine(node.redis_connection, where, 0, cluster=True)
                if info is None:
                    info = node.redis_connection.execute_command("CLUSTER INFO")
            except (Unreachable, RedisError):
                unreachable.append(where)
                continue
            found.servers.append(f"{server} {node.server_type}")
            found.findings += findings
        if info is None:
            raise Unreachable(f"no node of the Cluster at {redact(url)} answers")
        found.findings += hazards.cluster(info, unreachable, "Cluster")
        found.findings += probe(lambda: LockClient(cluster, **_options(args)), "Cluster")
    return found


def _broken_cluster(
    url: str, args: argparse.Namespace, found: Examination, refused: Exception
) -> Examination:
    """The node of ``url`` alone, when a Cluster client cannot be made: what it says of the
    Cluster (no probe: no client of the application would get further)."""
    node = redis.Redis.from_url(
        url, socket_timeout=args.timeout, socket_connect_timeout=args.timeout
    )
    with contextlib.closing(node):
        where = _address(node)
        try:
            info = node.execute_command("CLUSTER INFO")
        except RedisError:
            raise Unreachable(f"no Cluster at {redact(url)}: {refused}") from None
        server, findings = examine(node, where, 0, cluster=True)
    found.servers.append(server)
    found.findings += findings + hazards.cluster(info, [], "Cluster")
    return found


def _sentinel(args: argparse.Namespace) -> Examination:
    sentinels = []
    for spec in args.sentinel:
        host, _, port = spec.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--sentinel takes HOST:PORT, not {spec!r}")
        sentinels.append((host, int(port)))
    found = Examination(f"Sentinel {', '.join(args.sentinel)}, service {args.service}")
    sentinel = Sentinel(sentinels, socket_timeout=args.timeout)
    try:
        sentinel.discover_master(args.service)
    except RedisError as exc:
        raise Unreachable(f"no master of {args.service!r} from {args.sentinel}: {exc}") from None
    quorum = None
    for node in sentinel.sentinels:
        try:
            node.execute_command("SENTINEL CKQUORUM", args.service)
            quorum = ""
            break
        except ResponseError as exc:
            quorum = str(exc)
        except RedisError:
            continue
    found.findings += hazards.sentinel(quorum, found.target)
    master = sentinel.master_for(args.service, socket_timeout=args.timeout)
    with contextlib.closing(master):
        server, findings = examine(master, f"master of {args.service}", args.min_replicas)
        found.servers.append(server)
        found.findings += findings
        where = f"master of {args.service}"
        found.findings += probe(lambda: LockClient(master, **_options(args)), where)
    for node in sentinel.sentinels:
        node.close()
    return found


# -- output ------------------------------------------------------------------------------------


def _print(found: Examination, status: int) -> None:
    out = sys.stdout
    print(f"fencelock doctor: {found.target}", file=out)
    for server in found.servers:
        print(f"  server {server}", file=out)
    for f in sorted(found.findings, key=lambda f: not f.hazard):
        print(f"{f.severity.upper():7} {f.code} at {f.where}: {f.summary}", file=out)
        print(f"        breaks: {f.breaks}", file=out)
        print(f"        when:   {f.likelihood}", file=out)
        print(f"        fix:    {f.fix}", file=out)
    count = sum(f.hazard for f in found.findings)
    notes = len(found.findings) - count
    verdict = "a promise is at risk" if status else "nothing threatens a promise"
    print(f"{count} hazard(s), {notes} note(s): {verdict}", file=out)
