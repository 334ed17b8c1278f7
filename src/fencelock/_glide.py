"""valkey-glide as a client library (``_async/glide_route.py``): what differs between its
asyncio package (``glide``) and its sync one (``glide_sync``), as ``async_*``/``sync_*`` pairs
the generator renames (as ``_transport.py``'s for redis-py), and its replies and errors in the
terms the rest of fencelock reads: redis-py's raw RESP2 replies and exceptions.

Nothing here imports glide until a glide client is given: fencelock works without it installed.

What glide returns (2.6, measured against Redis 7 and Valkey 9 with its default RESP3): bulk
strings as bytes, the simple string OK as the str ``"OK"`` (other simple strings as bytes),
RESP3 maps as dicts (``HELLO``), a script's Lua false as None and true as 1 (as RESP2 does), and
an error reply as a ``RequestError`` whose message is redis-rs's rendering of it: a known code
as its kind (``"An error was signalled by the server: - NoScriptError: No matching script..."``),
any other as ``"CODE: detail"``.
"""

from __future__ import annotations

import copy
import importlib
import re
import threading
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from redis.exceptions import (
    BusyLoadingError,
    ExecAbortError,
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)

if TYPE_CHECKING:  # (for the LockClient's signature: never imported at run time)
    import glide
    import glide_sync

    AsyncGlideClients: TypeAlias = (
        glide.GlideClient | glide.GlideClusterClient | Sequence[glide.GlideClient]
    )
    SyncGlideClients: TypeAlias = (
        glide_sync.GlideClient | glide_sync.GlideClusterClient | Sequence[glide_sync.GlideClient]
    )

# the packages whose clients the asyncio and the sync API accept
ASYNC_GLIDE: Final = "glide"
SYNC_GLIDE: Final = "glide_sync"
GLIDE_PACKAGES: Final = (ASYNC_GLIDE, SYNC_GLIDE)

# redis-rs's kinds of error replies (how glide names a known code) -> the code and redis-py's
# class (the code is dropped from the message, as redis-py does; LOADING is a ConnectionError
# there too)
_KINDS: Final[dict[str, tuple[str, type[RedisError]]]] = {
    "ResponseError": ("ERR", ResponseError),
    "NoScriptError": ("NOSCRIPT", NoScriptError),
    "PermissionDenied": ("NOPERM", NoPermissionError),
    "ReadOnly": ("READONLY", ReadOnlyError),
    "BusyLoadingError": ("LOADING", BusyLoadingError),
    "ExecAbortError": ("EXECABORT", ExecAbortError),
    "Moved": ("MOVED", ResponseError),
    "Ask": ("ASK", ResponseError),
    "TryAgain": ("TRYAGAIN", ResponseError),
    "ClusterDown": ("CLUSTERDOWN", ResponseError),
    "CrossSlot": ("CROSSSLOT", ResponseError),
    "MasterDown": ("MASTERDOWN", ResponseError),
}
_KNOWN = re.compile(r"An error was signalled by the server: - (\w+): (.*)", re.S)
_OTHER = re.compile(r"([A-Z][A-Z_-]*): (.*)", re.S)


def package_of(obj: object) -> str | None:
    """The glide package ``obj``'s class (or, for a list, its first item's) comes from, if
    any: known without importing glide."""
    if isinstance(obj, list | tuple) and obj:
        obj = obj[0]
    root = type(obj).__module__.split(".")[0]
    return root if root in GLIDE_PACKAGES else None


def async_glide() -> ModuleType:
    return importlib.import_module("glide")  # (only once a glide client was given)


def sync_glide() -> ModuleType:
    return importlib.import_module("glide_sync")


def async_let_go(client: Any) -> None:
    return None  # (the loop's reaper closes a dropped client's own: _transport.async_reap)


def sync_let_go(client: Any) -> None:
    """Close a glide client of a client dropped unclosed, in a thread of its own: the garbage
    collector, which runs this, must wait for nothing."""
    threading.Thread(target=client.close, name="fencelock-glide-close", daemon=True).start()


def error_reply(message: str) -> RedisError:
    """A glide error reply's message as the redis-py exception the same reply makes."""
    known = _KNOWN.fullmatch(message)
    if known is not None:
        kind, detail = known.groups()
        code, error = _KINDS.get(kind, (kind.upper(), ResponseError))
        if error is ResponseError and code != "ERR":  # (redis-py keeps an unknown code)
            return ResponseError(f"{code} {detail}")
        found: RedisError = error(detail)
        return found
    other = _OTHER.fullmatch(message)
    return ResponseError(" ".join(other.groups()) if other is not None else message)


def decoded(reply: Any) -> Any:
    """A glide reply as redis-py reads it on a RESP2 connection of fencelock's own: bytes for
    strings, a map as a flat list, a boolean as an integer, an error reply as the redis-py
    exception (a value, not raised)."""
    if isinstance(reply, bytes | int | None) and not isinstance(reply, bool):
        return reply
    if isinstance(reply, str):
        return reply.encode()
    if isinstance(reply, bool):
        return int(reply)
    if isinstance(reply, list | set | tuple):
        return [decoded(item) for item in reply]
    if isinstance(reply, dict):
        return [decoded(item) for pair in reply.items() for item in pair]
    if isinstance(reply, float):
        return repr(reply).encode()
    if isinstance(reply, Exception):
        return error_reply(str(reply))
    return reply


def argument(value: Any) -> str | bytes:
    """One argument of a command as glide takes it (str or bytes; a number as its digits, as
    fencelock's own packer writes it)."""
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, float):
        return repr(value)
    return str(int(value))


def config_of(client: Any) -> Any:
    """A glide client's configuration: public on glide's (``config``); glide_sync's 2.6 keeps
    it as ``_config`` only, read here alone (its server, for our own connections)."""
    config = getattr(client, "config", None)
    return client._config if config is None else config


def config_for(client: Any, connect_timeout: float, lazy: bool = False) -> Any:
    """A configuration for a client of fencelock's own, of the server of ``client``: its
    settings (address, credentials, TLS, database), without its subscriptions, connecting
    within ``connect_timeout`` seconds: as it is made, or (``lazy``) at its first request."""
    config = copy.copy(config_of(client))
    config.pubsub_subscriptions = None
    config.lazy_connect = lazy
    shared = importlib.import_module("glide_shared.config")  # (both packages' configurations)
    made = (
        shared.AdvancedGlideClusterClientConfiguration
        if is_cluster(client)
        else shared.AdvancedGlideClientConfiguration
    )
    advanced = copy.copy(config.advanced_config) or made()
    advanced.connection_timeout = max(1, round(connect_timeout * 1000))
    config.advanced_config = advanced
    return config


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a glide cluster client (of either package)."""
    shared = importlib.import_module("glide_shared.config")
    return isinstance(config_of(client), shared.GlideClusterClientConfiguration)


def sync_glide_like(client: Any, connect_timeout: float) -> Callable[[], Any]:
    """How to make a glide_sync client of the servers of ``client`` (an asyncio glide client:
    its settings read now): the asyncio client's renewal thread's (``_offloop.py``). Connected
    at its first request: a server down fails the requests to it, not the making (one Redlock
    node down must not keep the renewal thread from the others)."""
    made = sync_glide().GlideClusterClient if is_cluster(client) else sync_glide().GlideClient
    return partial(made.create, config_for(client, connect_timeout, lazy=True))


def address(client: Any) -> str:
    """host:port (or the socket path) of a glide client's (first) server, for messages."""
    first = config_of(client).addresses[0]
    return str(first.unix_socket_path or f"{first.host}:{first.port}")
