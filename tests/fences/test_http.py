"""``fencelock.fences.http``: the WSGI middleware in front of a real HTTP server (wsgiref, in a
thread) and the ASGI one (an ASGI app called by httpx), each over both stores (fenced Redis keys
on the real servers, the SQL fence table on PostgreSQL), with the httpx and requests helpers."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
import requests
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import fencelock
import fencelock.asyncio
from fencelock import fences
from fencelock._context import running
from fencelock_tools.servers.postgres import PostgresServer
from tests.fences.sqlkit import pg_reset

Written = list[tuple[str, str]]  # (path, token header) of the requests the service handled


def wsgi_service(written: Written) -> Callable[..., Any]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        written.append((environ["PATH_INFO"], environ.get("HTTP_FENCING_TOKEN", "")))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"written"]

    return app


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(params=["redis", "sql"])
def wsgi_store(
    request: pytest.FixtureRequest, sync_client: fencelock.LockClient
) -> Iterator[fences.http.Store]:
    if request.param == "redis":
        yield fences.http.RedisFence(sync_client)
        return
    postgres: PostgresServer = request.getfixturevalue("postgres")
    pg_reset(postgres)
    engine = sa.create_engine(postgres.url())
    with engine.begin() as conn:
        fences.sql.install(conn)
    yield fences.http.SqlFence(engine)
    engine.dispose()


def serve(app: Callable[..., Any]) -> Iterator[str]:
    server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    # (shutdown() waits for the loop's next look: 0.5 s by default, per test)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


@pytest.fixture
def written() -> Written:
    return []


@pytest.fixture
def url(wsgi_store: fences.http.Store, written: Written) -> Iterator[str]:
    yield from serve(fences.http.WSGIFencingMiddleware(wsgi_service(written), store=wsgi_store))


def test_wsgi_refuses_an_older_token_with_409_and_a_body_that_says_why(
    url: str, written: Written
) -> None:
    with requests.Session() as session:
        assert session.put(f"{url}/accounts/1", auth=fences.http.FencingAuth(5)).status_code == 200
        refused = session.put(f"{url}/accounts/1", auth=fences.http.FencingAuth(4))
        assert refused.status_code == 409
        assert refused.json() == {
            "error": "stale fencing token: a newer holder has written this resource",
            "resource": "/accounts/1",
            "token": 4,
            "seen": 5,
        }
        assert session.put(f"{url}/accounts/2", auth=fences.http.FencingAuth(4)).status_code == 200
        assert session.put(f"{url}/accounts/1").status_code == 200  # no header: not fenced
    with httpx.Client(auth=fences.http.FencingAuth()) as client, running(6):
        assert client.put(f"{url}/accounts/1").status_code == 200  # current_token()
    assert written == [
        ("/accounts/1", "5"),
        ("/accounts/2", "4"),
        ("/accounts/1", ""),
        ("/accounts/1", "6"),
    ]


@pytest.mark.parametrize("wsgi_store", ["redis"], indirect=True)  # (refused before the store)
@pytest.mark.parametrize("header", ["abc", "0", "-1", "9223372036854775808", "1e3", ""])
def test_wsgi_refuses_a_header_that_is_no_token_with_400(
    url: str, written: Written, header: str
) -> None:
    response = requests.put(f"{url}/a", headers={"Fencing-Token": header}, timeout=30)
    assert response.status_code == 400
    assert "Fencing-Token must be a fencing token" in response.json()["error"]
    assert written == []


def test_wsgi_requires_the_header_when_told_to(
    sync_client: fencelock.LockClient, written: Written
) -> None:
    app = fences.http.WSGIFencingMiddleware(
        wsgi_service(written), store=fences.http.RedisFence(sync_client), required=True,
        resource=lambda environ: None if environ["PATH_INFO"] == "/health" else "accounts",
    )  # fmt: skip
    for url in serve(app):
        assert requests.get(f"{url}/a", timeout=30).status_code == 428
        assert requests.get(f"{url}/health", timeout=30).status_code == 200
        assert requests.get(f"{url}/b", auth=fences.http.FencingAuth(3), timeout=30).ok
        refused = requests.get(f"{url}/c", auth=fences.http.FencingAuth(2), timeout=30)
        assert (refused.status_code, refused.json()["resource"]) == (409, "accounts")
    assert written == [("/health", ""), ("/b", "3")]


def test_the_client_helper_needs_a_token() -> None:
    with pytest.raises(ValueError):
        fences.http.FencingAuth(0)
    with pytest.raises(fencelock.LockError, match="no fencelock run"):
        requests.Request("GET", "http://127.0.0.1/", auth=fences.http.FencingAuth()).prepare()
    with pytest.raises(TypeError):
        fences.http.RedisFence("redis://")  # type: ignore[arg-type]


# -- ASGI ----------------------------------------------------------------------------------------


def asgi_service(written: Written) -> Callable[..., Any]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        written.append((scope["path"], headers.get(b"fencing-token", b"").decode()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"written"})

    return app


@pytest.fixture(params=["redis", "sql"])
async def asgi_store(
    request: pytest.FixtureRequest, async_client: fencelock.asyncio.LockClient
) -> AsyncIterator[fences.http.AsyncStore]:
    if request.param == "redis":
        yield fences.http.AsyncRedisFence(async_client)
        return
    postgres: PostgresServer = request.getfixturevalue("postgres")
    pg_reset(postgres)
    engine = sa.create_engine(postgres.url())
    with engine.begin() as conn:
        fences.sql.install(conn)
    engine.dispose()
    async_engine = create_async_engine(postgres.url())
    yield fences.http.AsyncSqlFence(async_engine)
    await async_engine.dispose()


async def test_asgi_refuses_an_older_token_with_409_and_a_body_that_says_why(
    asgi_store: fences.http.AsyncStore,
) -> None:
    written: Written = []
    app = fences.http.FencingMiddleware(asgi_service(written), store=asgi_store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
        assert (await client.post("/jobs/7", auth=fences.http.FencingAuth(9))).status_code == 200
        refused = await client.post("/jobs/7", auth=fences.http.FencingAuth(8))
        assert refused.status_code == 409
        assert json.loads(refused.content) == {
            "error": "stale fencing token: a newer holder has written this resource",
            "resource": "/jobs/7",
            "token": 8,
            "seen": 9,
        }
        bad = await client.post("/jobs/7", headers={"Fencing-Token": "x"})
        assert bad.status_code == 400
        with running(10):
            ok = await client.post("/jobs/7", auth=fences.http.FencingAuth())
        assert ok.status_code == 200
    assert written == [("/jobs/7", "9"), ("/jobs/7", "10")]
