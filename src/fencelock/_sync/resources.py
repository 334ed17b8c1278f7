# GENERATED from src/fencelock/_async/resources.py by tools/gen_sync.py: edit that file instead.
"""The resource side: fenced writes (``fenced_set``/``fenced_get``/``fenced_update``) and
versioned values, each one script on the server of the resource's key (``fenced_set.lua``,
``fenced_get.lua``, ``versioned_*.lua``): the lock client's own server by default, or the one
the caller names (``redis=``; Redlock mode has no server of its own, so there it is required).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from redis.exceptions import NoScriptError, RedisError

from .._core.replies import digest, fenced_get_reply, fenced_set_reply, translate_error
from .._fencing import fencing_token, refused
from .._keys import described, fence_key_for, validate_resource_key, validate_value
from .._scripts import FENCED_GET, FENCED_SET, Script
from .._transport import SyncRedis, SyncRedisCluster
from ..errors import StaleToken
from .engine import ClientState
from .topology import SyncTopology
from .versioned import Versioned

T = TypeVar("T")
Server = SyncRedis | SyncRedisCluster
Value = str | bytes | int | float


def _fenced(parse: Callable[[object, str, int], T], reply: object, key: str, token: int) -> T:
    """``parse(reply, key, token)``; a refused stale token is reported (``refused``) first."""
    try:
        return parse(reply, key, token)
    except StaleToken as stale:
        refused(stale)
        raise


def _run_script(
    client: Server, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """``script`` run by the caller's own client (its settings, its retries)."""
    try:
        return client.execute_command(*script.evalsha(keys, args))
    except NoScriptError:
        return client.execute_command(*script.eval(keys, args))


class Resources:
    """The resource writes of one lock client (its ``fenced_*`` and ``versioned`` methods)."""

    def __init__(self, topology: SyncTopology, state: ClientState) -> None:
        self._topology = topology
        self._state = state

    def server(self, redis: Server | None, what: str) -> Server | None:
        """The client for a resource key's server: ``redis`` if given, else None (the lock
        client's own server, which Redlock mode does not have)."""
        self._state.check()
        topology = self._topology
        if redis is None and not topology.traits.one_counter:
            raise TypeError(f"{what} in Redlock mode needs redis=: the server of the resource")
        if redis is None:
            why = "it compares and writes in one script; redis= may name a server that runs them"
            topology.protocol.require_scripts(what, why)
        if redis is not None and not isinstance(redis, SyncRedis | SyncRedisCluster):
            expected = SyncRedis.__module__ + ".Redis"
            raise TypeError(f"redis must be a {expected}, not {described(redis)}")
        return redis

    def run(
        self, redis: Server | None, script: Script, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """``script``'s reply from the server of a resource key (``server``); ``ClientClosed``
        once the client is closed, whichever server (a versioned value made before checks here)."""
        self._state.check()
        what = f"resource {keys[0]!r}"
        if redis is None:  # within one request timeout
            return self._topology.run(script, keys, args, what)
        try:  # the resource's server: within what the caller's client allows
            return _run_script(redis, script, keys, args)
        except RedisError as exc:
            raise translate_error(exc, what) from exc

    def fenced_set(
        self, key: str, value: object, token: object, redis: Server | None
    ) -> None:
        key = validate_resource_key(key)
        token = fencing_token(token)
        checked = validate_value(value)
        server = self.server(redis, "fenced_set")
        reply = self.run(server, FENCED_SET, [key, fence_key_for(key)], [checked, token])
        _fenced(fenced_set_reply, reply, key, token)

    def fenced_get(self, key: str, token: object, redis: Server | None) -> bytes | None:
        key = validate_resource_key(key)
        token = fencing_token(token)
        server = self.server(redis, "fenced_get")
        reply = self.run(server, FENCED_GET, [key, fence_key_for(key)], [token])
        value: bytes | None = _fenced(fenced_get_reply, reply, key, token)
        return value

    def fenced_update(
        self,
        key: str,
        token: int,
        fn: Callable[[bytes | None], str | bytes | int | float],
        redis: Server | None,
    ) -> str | bytes | int | float:
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        value = self.fenced_get(key, token, redis)
        new = validate_value(fn(value), "the value fn returned")
        keys, args = [key, fence_key_for(key)], [new, token, digest(value)]
        reply = self.run(self.server(redis, "fenced_update"), FENCED_SET, keys, args)
        _fenced(fenced_set_reply, reply, key, token)
        return new

    def versioned(self, key: str, redis: Server | None) -> Versioned:
        key = validate_resource_key(key)
        return Versioned(key, partial(self.run, self.server(redis, "versioned")))
