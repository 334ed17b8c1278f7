"""What a fence at the sink costs (docs/benchmarks.md, "Fences at the sink").

    python -m bench.fences               # 400 writes per variant: about a minute
    python -m bench.fences --writes 50   # a smoke run

For each sink of ``fencelock.fences``, the same write with and without its fence, one writer,
on servers started here: a row updated in a PostgreSQL transaction (psycopg) and in SQLite,
with and without ``fences.sql.fenced``; a file replaced atomically (temporary file, fsync,
rename) by hand and by ``fences.files.write``; an S3 object put on moto's server with and
without ``fences.s3.put_object``; a PUT to a WSGI service (wsgiref) without and behind
``WSGIFencingMiddleware`` (its store fenced Redis keys); and, for reference, a Redis ``SET``
against ``fenced_set``. The two sides of each pair alternate write by write, so that the
machine's load falls on both alike. Reported: the median and 90th percentile time per write,
and the round trips (requests to the sink's server) per write, counted where the server can
count them (S3: boto3's requests; the service's Redis: its command statistics) and otherwise
by construction (SQL: the statements sent). Each fenced write carries a new, larger token,
the common case (a holder's first write of a resource). No figure is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import redis

import fencelock
from bench._common import client_description
from bench.chaos.sinks import counter_service, s3_client
from fencelock import fences
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.postgres import PostgresServer
from fencelock_tools.servers.s3 import S3Server

MEASURED = 100  # tokens: 1 and 2 count round trips, 10 to 29 warm up, then from 101
Write = Callable[[int], None]  # one write, given a fencing token (unfenced: ignored)


@dataclass(frozen=True)
class Pair:
    sink: str
    plain: Write
    fenced: Write
    trips: tuple[str, str]  # round trips per write: plain, fenced


def void(_: object) -> None:
    """(a write's reply is not what is measured)"""


def timed(write: Write, token: int) -> float:
    start = time.perf_counter()
    write(token)
    return time.perf_counter() - start


def measure(pair: Pair, writes: int) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    fenced: list[float] = []
    for i in range(1, writes + 1):  # alternating, the first of each pair too
        first, second = (pair.plain, pair.fenced) if i % 2 else (pair.fenced, pair.plain)
        a, b = timed(first, MEASURED + i), timed(second, MEASURED + i)
        plain.append(a if first is pair.plain else b)
        fenced.append(b if first is pair.plain else a)
    return plain, fenced


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


@contextlib.contextmanager
def postgres_pair() -> Iterator[Pair]:
    import psycopg

    with PostgresServer() as server, psycopg.connect(server.dsn) as conn:
        conn.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)")
        conn.execute("INSERT INTO counters VALUES ('plain', 0), ('fenced', 0)")
        fences.sql.install(conn)
        conn.commit()
        update = "UPDATE counters SET value = %s WHERE name = %s"

        def plain(token: int) -> None:
            conn.execute(update, (token, "plain"))
            conn.commit()

        def fenced(token: int) -> None:
            with fences.sql.fenced(conn, "fenced", token):
                conn.execute(update, (token, "fenced"))
            conn.commit()

        # psycopg: BEGIN, the UPDATE, COMMIT; the fence adds its upsert
        yield Pair("PostgreSQL 15 row (psycopg, a transaction)", plain, fenced, ("3", "4"))


@contextlib.contextmanager
def sqlite_pair(directory: Path) -> Iterator[Pair]:
    conn = sqlite3.connect(directory / "bench.sqlite3")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        conn.execute("INSERT INTO counters VALUES ('plain', 0), ('fenced', 0)")
        fences.sql.install(conn)
        conn.commit()
        update = "UPDATE counters SET value = ? WHERE name = ?"

        def plain(token: int) -> None:
            conn.execute(update, (token, "plain"))
            conn.commit()

        def fenced(token: int) -> None:
            with fences.sql.fenced(conn, "fenced", token):
                conn.execute(update, (token, "fenced"))
            conn.commit()

        yield Pair("SQLite row (sqlite3, WAL, a transaction)", plain, fenced, ("0", "0"))
    finally:
        conn.close()


def replace(path: Path, data: bytes) -> None:
    """The unfenced atomic replace: what ``fences.files.write`` does around its fence."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def files_pair(directory: Path) -> Iterator[Pair]:
    yield Pair(
        "file, atomic replace (local disk)",
        lambda token: replace(directory / "plain", str(token).encode()),
        lambda token: fences.files.write(directory / "fenced", str(token).encode(), token=token),
        ("0", "0"),
    )


@contextlib.contextmanager
def s3_pair() -> Iterator[Pair]:
    with S3Server() as server:
        client = s3_client(server.endpoint)
        client.create_bucket(Bucket="bench")
        sent = [0]

        def count(**_: Any) -> None:
            sent[0] += 1

        client.meta.events.register("before-send.s3", count)
        try:

            def plain(token: int) -> None:
                client.put_object(Bucket="bench", Key="plain", Body=str(token).encode())

            def fenced(token: int) -> None:
                fences.s3.put_object(client, "bench", "fenced", str(token).encode(), token=token)

            plain(1)
            fenced(1)  # (connects; no object yet: HEAD finds none)
            before = sent[0]
            plain(2)
            one = sent[0] - before
            before = sent[0]
            fenced(2)
            two = sent[0] - before
            yield Pair("S3 object (boto3, moto's server)", plain, fenced, (str(one), str(two)))
        finally:
            client.close()


def scripts_run(raw: redis.Redis) -> int:
    stats = raw.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def http_pair(redis_server: EmbeddedServer) -> Iterator[Pair]:
    import requests

    client = fencelock.LockClient.from_url(redis_server.url)
    service = counter_service({})
    fenced_app = fences.http.WSGIFencingMiddleware(service, store=fences.http.RedisFence(client))
    servers = [
        make_server("127.0.0.1", 0, app, handler_class=_Quiet) for app in (service, fenced_app)
    ]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    session = requests.Session()
    plain_url, fenced_url = (f"http://127.0.0.1:{s.server_port}/counter/c" for s in servers)
    raw = redis_server.client()
    try:

        def plain(token: int) -> None:
            session.put(plain_url, data=str(token), timeout=10).raise_for_status()

        def fenced(token: int) -> None:
            auth = fences.http.FencingAuth(token)
            session.put(fenced_url, data=str(token), auth=auth, timeout=10).raise_for_status()

        fenced(1)  # (connects)
        before = scripts_run(raw)
        fenced(2)
        extra = scripts_run(raw) - before  # (the commands a script runs count apart)
        trips = ("1", f"1 + {extra} Redis")
        yield Pair("HTTP PUT (requests, a WSGI service on wsgiref)", plain, fenced, trips)
    finally:
        session.close()
        raw.close()
        for s in servers:
            s.shutdown()
            s.server_close()
        client.close()


@contextlib.contextmanager
def redis_pair(redis_server: EmbeddedServer) -> Iterator[Pair]:
    client = fencelock.LockClient.from_url(redis_server.url)
    raw: redis.Redis = redis_server.client()
    try:
        yield Pair(
            "Redis key (SET / fenced_set), for reference",
            lambda token: void(raw.set("plain", token)),
            lambda token: client.fenced_set("fenced", token, token, redis=raw),
            ("1", "1"),
        )
    finally:
        raw.close()
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fences", description=__doc__)
    parser.add_argument("--writes", type=int, default=400, help="writes per variant")
    args = parser.parse_args(argv)
    rows = [
        "| sink | round trips per write: plain / fenced | plain: median (p90) ms "
        "| fenced: median (p90) ms | fenced / plain (medians) |",
        "|---|---|---|---|---|",
    ]
    with EmbeddedServer() as redis_server, tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for make in (
            postgres_pair,
            lambda: sqlite_pair(directory),
            lambda: files_pair(directory),
            s3_pair,
            lambda: http_pair(redis_server),
            lambda: redis_pair(redis_server),
        ):
            with make() as pair:
                for token in range(10, 30):  # warm-up
                    pair.plain(token)
                    pair.fenced(token)
                plain, fenced = measure(pair, args.writes)
            ratio = statistics.median(fenced) / statistics.median(plain)
            rows.append(
                f"| {pair.sink} | {pair.trips[0]} / {pair.trips[1]} | {ms(plain, 0.5)} "
                f"({ms(plain, 0.9)}) | {ms(fenced, 0.5)} ({ms(fenced, 0.9)}) | {ratio:.2f} |"
            )
            print(rows[-1], flush=True)
    print(f"\n{args.writes} writes per variant; {client_description()}\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
