"""Fencing for HTTP services you own (docs/fencing.md, "HTTP").

Clients send their lock's token in a ``Fencing-Token`` header (``FencingAuth``, for httpx and
requests, sends ``fencelock.current_token()`` or a token given); a middleware in front of the
service (``FencingMiddleware`` for ASGI, ``WSGIFencingMiddleware`` for WSGI) refuses with 409,
and a JSON body that says why, a request whose token is older than the highest seen for the
resource it names (by default its path), and lets every other through. The highest token per
resource is kept in a store: fenced Redis keys (``RedisFence``, through a fencelock client), or
the SQL fence table (``SqlFence``, through a SQLAlchemy engine). A request is checked when it
arrives: one overtaken while the service handles it is not refused (docs/fencing.md).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from .._async.client import AsyncLockClient
from .._context import current_token
from .._fencing import MAX_TOKEN, fencing_token, resource_name
from .._sync.client import LockClient
from ..errors import StaleToken
from . import sql

__all__ = [
    "HEADER",
    "AsyncRedisFence",
    "AsyncSqlFence",
    "FencingAuth",
    "FencingMiddleware",
    "RedisFence",
    "SqlFence",
    "WSGIFencingMiddleware",
]

HEADER = "Fencing-Token"
KEY_PREFIX = "fencelock:http:"  # RedisFence: the resource's key (only its fence is written)


class Store(Protocol):
    def check(self, resource: str, token: int) -> None: ...


class AsyncStore(Protocol):
    def check(self, resource: str, token: int) -> Awaitable[None]: ...


class RedisFence:
    """The highest token per resource in Redis: ``client.fenced_get`` on the key
    ``KEY_PREFIX + resource``, which refuses an older token and raises the fence in one script.
    ``redis=``: the server (the client's own by default; required in Redlock mode)."""

    def __init__(self, client: LockClient, *, redis: Any = None) -> None:
        if not isinstance(client, LockClient):
            raise TypeError(f"client must be a fencelock.LockClient, not {type(client).__name__}")
        self.client = client
        self.redis = redis

    def check(self, resource: str, token: int) -> None:
        self.client.fenced_get(KEY_PREFIX + resource, token, redis=self.redis)


class AsyncRedisFence:
    """``RedisFence`` with a ``fencelock.asyncio.LockClient``."""

    def __init__(self, client: AsyncLockClient, *, redis: Any = None) -> None:
        if not isinstance(client, AsyncLockClient):
            raise TypeError(
                f"client must be a fencelock.asyncio.LockClient, not {type(client).__name__}"
            )
        self.client = client
        self.redis = redis

    async def check(self, resource: str, token: int) -> None:
        await self.client.fenced_get(KEY_PREFIX + resource, token, redis=self.redis)


class SqlFence:
    """The highest token per resource in the SQL fence table (``fences.sql``), each check a
    transaction of its own on a connection of ``engine`` (a SQLAlchemy ``Engine``)."""

    def __init__(self, engine: Any, *, table: str = sql.TABLE) -> None:
        self.engine = engine
        self.table = table

    def check(self, resource: str, token: int) -> None:
        with self.engine.begin() as conn, sql.fenced(conn, resource, token, table=self.table):
            pass


class AsyncSqlFence:
    """``SqlFence`` with a SQLAlchemy ``AsyncEngine``."""

    def __init__(self, engine: Any, *, table: str = sql.TABLE) -> None:
        self.engine = engine
        self.table = table

    async def check(self, resource: str, token: int) -> None:
        async with (
            self.engine.begin() as conn,
            sql.fenced(conn, resource, token, table=self.table),
        ):
            pass


def _token(raw: str) -> int:
    """The header's token; ``ValueError`` saying why it is not one."""
    text = raw.strip()
    if not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_TOKEN:
        raise ValueError(f"{HEADER} must be a fencing token (1 to 2**63 - 1), got {raw[:40]!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class _Refusal:
    status: int
    body: dict[str, object]

    def payload(self) -> tuple[str, bytes]:
        reasons = {400: "Bad Request", 409: "Conflict", 428: "Precondition Required"}
        return f"{self.status} {reasons[self.status]}", json.dumps(self.body).encode()


@dataclass(frozen=True, slots=True)
class _Check:
    resource: str
    token: int


def _verdict(raw: str | None, resource: str | None, required: bool) -> _Refusal | _Check | None:
    """What to do with a request: let it through unchecked (None), refuse it at once, or check
    its token."""
    if resource is None:
        return None
    if raw is None:
        if not required:
            return None
        return _Refusal(428, {"error": f"a {HEADER} header is required", "resource": resource})
    try:
        token = _token(raw)
    except ValueError as exc:
        return _Refusal(400, {"error": str(exc), "resource": resource})
    return _Check(resource_name(resource), token)


def _stale(stale: StaleToken, resource: str) -> _Refusal:
    body: dict[str, object] = {
        "error": "stale fencing token: a newer holder has written this resource",
        "resource": resource,
        "token": stale.token,
        "seen": stale.seen,
    }
    return _Refusal(409, body)


def _options(resource: object, required: object) -> None:
    if not callable(resource):
        raise TypeError(f"resource must be callable, not {type(resource).__name__}")
    if not isinstance(required, bool):
        raise TypeError(f"required must be a bool, not {type(required).__name__}")


class FencingMiddleware:
    """ASGI middleware: ``app = FencingMiddleware(app, store=AsyncRedisFence(client))``.

    ``resource(scope)``: the resource a request names (default: its path; None: not fenced).
    ``required``: refuse (428) a request without the header, instead of letting it through."""

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        *,
        store: AsyncStore,
        resource: Callable[[MutableMapping[str, Any]], str | None] = lambda scope: scope["path"],
        required: bool = False,
    ) -> None:
        _options(resource, required)
        self.app = app
        self.store = store
        self.resource = resource
        self.required = required

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        wanted = HEADER.lower().encode()
        raw = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == wanted), None)
        verdict = _verdict(raw, self.resource(scope), self.required)
        if isinstance(verdict, _Check):
            try:
                await self.store.check(verdict.resource, verdict.token)
            except StaleToken as stale:
                verdict = _stale(stale, verdict.resource)
        if isinstance(verdict, _Refusal):
            return await _asgi_refuse(send, verdict)
        await self.app(scope, receive, send)


async def _asgi_refuse(send: Callable[[Any], Awaitable[None]], refusal: _Refusal) -> None:
    _, payload = refusal.payload()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class WSGIFencingMiddleware:
    """WSGI middleware: ``app = WSGIFencingMiddleware(app, store=RedisFence(client))``; the
    options are ``FencingMiddleware``'s, ``resource`` taking the WSGI environ (default: its
    ``PATH_INFO``)."""

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        *,
        store: Store,
        resource: Callable[[dict[str, Any]], str | None] = lambda environ: environ["PATH_INFO"],
        required: bool = False,
    ) -> None:
        _options(resource, required)
        self.app = app
        self.store = store
        self.resource = resource
        self.required = required

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        raw = environ.get("HTTP_" + HEADER.upper().replace("-", "_"))
        verdict = _verdict(raw, self.resource(environ), self.required)
        if isinstance(verdict, _Check):
            try:
                self.store.check(verdict.resource, verdict.token)
            except StaleToken as stale:
                verdict = _stale(stale, verdict.resource)
        if isinstance(verdict, _Refusal):
            return _wsgi_refuse(start_response, verdict)
        return self.app(environ, start_response)


def _wsgi_refuse(start_response: Callable[..., Any], refusal: _Refusal) -> list[bytes]:
    line, payload = refusal.payload()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    start_response(line, headers)
    return [payload]


class FencingAuth:
    """Sends the ``Fencing-Token`` header with every request: ``token``, or else
    ``fencelock.current_token()`` when the request is sent (``LockError`` outside a run).
    Pass it as ``auth=`` to httpx (``Client``, ``AsyncClient``, or one request) or requests
    (a ``Session``, or one request)."""

    def __init__(self, token: int | None = None) -> None:
        self.token = None if token is None else fencing_token(token)

    def __call__(self, request: Any) -> Any:
        token = self.token if self.token is not None else current_token()
        request.headers[HEADER] = str(token)
        return request
