"""The resource a worker's counter lives in (its *sink*): a Redis key written with
``fenced_set`` (every scenario but the sinks'), or one of ``fencelock.fences``' sinks, one
scenario each: a row in PostgreSQL (``fences.sql.fenced`` around an upsert, in one
transaction), a file (``fences.files.write``), an S3 object (``fences.s3.put_object``, moto's
server) and an HTTP service (a WSGI app behind ``fences.http.WSGIFencingMiddleware``, its store
fenced Redis keys on the resource server, sent ``FencingAuth``).

A ``SinkSpec`` names the sink (picklable, for the worker processes); ``open_sink`` gives one
lock name's counter in it: ``read()`` (None: never written) and ``write(value, token)``, which
raises ``StaleToken`` when the sink refuses the token. ``Sinks`` starts the servers the sinks
need, once per lab, when a scenario first asks for one.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis

import fencelock
from fencelock import fences

from .topologies import Unavailable

REDIS: Final = "redis"
SQL: Final = "sql"
FILES: Final = "files"
S3: Final = "s3"
HTTP: Final = "http"
FENCE_SINKS: Final = (SQL, FILES, S3, HTTP)
BUCKET: Final = "chaos"
COUNTERS: Final = "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)"
TIMEOUT: Final = 5.0  # seconds, every request of a sink


@dataclass(frozen=True)
class SinkSpec:
    kind: str
    address: str  # redis: the port; sql: a DSN; files: a directory; s3, http: a base URL


class Sink(Protocol):
    def read(self) -> int | None: ...
    def write(self, value: int, token: int) -> None: ...
    def close(self) -> None: ...


class RedisSink:
    def __init__(self, spec: SinkSpec, name: str, client: fencelock.LockClient | None) -> None:
        self.redis = redis.Redis(
            port=int(spec.address), socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
        )
        self.key = f"counter:{name}"
        self.client = client

    def read(self) -> int | None:
        raw = self.redis.get(self.key)
        return None if raw is None else int(raw)

    def write(self, value: int, token: int) -> None:
        assert self.client is not None, "a reader only"
        self.client.fenced_set(self.key, value, token, redis=self.redis)

    def close(self) -> None:
        self.redis.close()


class SqlSink:
    def __init__(self, spec: SinkSpec, name: str) -> None:
        import psycopg

        self.conn = psycopg.connect(spec.address, prepare_threshold=None)
        self.name = name

    def read(self) -> int | None:
        row = self.conn.execute("SELECT value FROM counters WHERE name = %s", (self.name,))
        found = row.fetchone()
        self.conn.rollback()
        return None if found is None else int(found[0])

    def write(self, value: int, token: int) -> None:
        try:
            with fences.sql.fenced(self.conn, self.name, token):
                self.conn.execute(
                    "INSERT INTO counters (name, value) VALUES (%s, %s) ON CONFLICT (name) "
                    "DO UPDATE SET value = excluded.value",
                    (self.name, value),
                )
            self.conn.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                self.conn.rollback()
            raise

    def close(self) -> None:
        self.conn.close()


class FileSink:
    def __init__(self, spec: SinkSpec, name: str) -> None:
        self.path = Path(spec.address) / name

    def read(self) -> int | None:
        try:
            return int(self.path.read_bytes())
        except FileNotFoundError:
            return None

    def write(self, value: int, token: int) -> None:
        fences.files.write(self.path, str(value).encode(), token=token, timeout=TIMEOUT)

    def close(self) -> None:
        pass


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    from fencelock_tools.servers.s3 import CREDENTIALS, REGION

    config = Config(connect_timeout=TIMEOUT, read_timeout=TIMEOUT, retries={"max_attempts": 1})
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, config=config, **CREDENTIALS
    )


class S3Sink:
    def __init__(self, spec: SinkSpec, name: str) -> None:
        self.client = s3_client(spec.address)
        self.key = name

    def read(self) -> int | None:
        try:
            body = self.client.get_object(Bucket=BUCKET, Key=self.key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return int(body)

    def write(self, value: int, token: int) -> None:
        fences.s3.put_object(self.client, BUCKET, self.key, str(value).encode(), token=token)

    def close(self) -> None:
        self.client.close()


class HttpSink:
    def __init__(self, spec: SinkSpec, name: str) -> None:
        import requests

        self.session = requests.Session()
        self.url = f"{spec.address}/counter/{name}"

    def read(self) -> int | None:
        response = self.session.get(self.url, timeout=TIMEOUT)
        response.raise_for_status()
        return int(response.text) if response.text else None

    def write(self, value: int, token: int) -> None:
        response = self.session.put(
            self.url, data=str(value), auth=fences.http.FencingAuth(token), timeout=TIMEOUT
        )
        if response.status_code == 409:
            refused = response.json()
            raise fencelock.StaleToken(refused["resource"], refused["token"], refused["seen"])
        response.raise_for_status()

    def close(self) -> None:
        self.session.close()


def open_sink(spec: SinkSpec, name: str, client: fencelock.LockClient | None = None) -> Sink:
    """Lock ``name``'s counter in the sink ``spec`` (``client``: the worker's, for the Redis
    sink's fenced writes; None for a reader)."""
    if spec.kind == REDIS:
        return RedisSink(spec, name, client)
    sinks: dict[str, Callable[[SinkSpec, str], Sink]] = {
        SQL: SqlSink,
        FILES: FileSink,
        S3: S3Sink,
        HTTP: HttpSink,
    }
    return sinks[spec.kind](spec, name)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def counter_service(counters: dict[str, bytes]) -> Callable[..., Iterable[bytes]]:
    """The HTTP sink's service: GET and PUT ``/counter/NAME``. wsgiref's server handles one
    request at a time, so a request's check (the middleware) and its write are not
    interleaved with another's."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        name = environ["PATH_INFO"].removeprefix("/counter/")
        if environ["REQUEST_METHOD"] == "PUT":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            counters[name] = environ["wsgi.input"].read(size)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [counters.get(name, b"")]

    return app


class Sinks:
    """The servers of the fence sinks, started on first use and stopped by ``close``."""

    def __init__(self, resource_url: str) -> None:
        self.resource_url = resource_url
        self.specs: dict[str, SinkSpec] = {}
        self._stops: list[Callable[[], object]] = []

    def spec(self, kind: str, resource_port: int) -> SinkSpec:
        """The sink ``kind``, emptied (``Unavailable`` where its server cannot run here)."""
        if kind == REDIS:
            return SinkSpec(REDIS, str(resource_port))
        if kind not in self.specs:
            self.specs[kind] = getattr(self, f"_start_{kind}")()
        spec = self.specs[kind]
        getattr(self, f"_empty_{kind}")(spec)
        return spec

    def _start_sql(self) -> SinkSpec:
        from fencelock_tools.servers.postgres import PostgresNotFound, PostgresServer

        try:
            server = PostgresServer().start()
        except (PostgresNotFound, ImportError) as exc:
            raise Unavailable(str(exc)) from exc
        self._stops.append(server.stop)
        return SinkSpec(SQL, server.dsn)

    def _empty_sql(self, spec: SinkSpec) -> None:
        import psycopg

        with psycopg.connect(spec.address, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS counters, fencelock_fences")
            admin.execute(COUNTERS)
            fences.sql.install(admin)

    def _start_files(self) -> SinkSpec:
        directory = tempfile.mkdtemp(prefix="chaos-files-")
        self._stops.append(lambda: shutil.rmtree(directory, ignore_errors=True))
        return SinkSpec(FILES, directory)

    def _empty_files(self, spec: SinkSpec) -> None:
        for path in Path(spec.address).iterdir():
            path.unlink()

    def _start_s3(self) -> SinkSpec:
        from fencelock_tools.servers.s3 import S3Server, moto_available

        if not moto_available():
            raise Unavailable("moto is not installed (pip install 'moto[server]')")
        server = S3Server().start()
        self._stops.append(server.stop)
        return SinkSpec(S3, server.endpoint)

    def _empty_s3(self, spec: SinkSpec) -> None:
        client = s3_client(spec.address)
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=BUCKET)
            for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
                client.delete_object(Bucket=BUCKET, Key=item["Key"])
        finally:
            client.close()

    def _start_http(self) -> SinkSpec:
        counters: dict[str, bytes] = {}
        client = fencelock.LockClient.from_url(self.resource_url)
        app = fences.http.WSGIFencingMiddleware(
            counter_service(counters),
            store=fences.http.RedisFence(client),
            resource=lambda environ: environ["PATH_INFO"].removeprefix("/counter/"),
        )
        server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, name="chaos-http", daemon=True)
        thread.start()

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(10)
            client.close()

        self._stops.append(stop)
        self._counters = counters
        return SinkSpec(HTTP, f"http://127.0.0.1:{server.server_port}")

    def _empty_http(self, spec: SinkSpec) -> None:
        self._counters.clear()  # (its fences live on the resource server, flushed per run)

    def close(self) -> None:
        for stop in reversed(self._stops):
            with contextlib.suppress(Exception):
                stop()
        self._stops.clear()
        self.specs.clear()
