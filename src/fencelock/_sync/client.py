# GENERATED from src/fencelock/_async/client.py by tools/gen_sync.py: edit that file instead.
"""The client: one per application (or per process), shared by all its locks.

It owns what must not be per lock: the Redis connection pool, the one pub/sub connection that
wakes every waiter, and (later) the one watchdog that renews every lease.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from redis.exceptions import NoScriptError, RedisError

from .._backend import SyncRedis
from .._core.replies import fenced_set_reply, translate_error
from .._core.timing import DEFAULT_MAX_POLL
from ..keys import (
    DEFAULT_PREFIX,
    fence_key_for,
    ttl_to_ms,
    validate_prefix,
    validate_resource_key,
    validate_ttl,
)
from ..scripts import FENCED_SET, Script
from .lock import Lock
from .waiter import Waiter
from .watchdog import Watchdog

DEFAULT_SOCKET_TIMEOUT = 5.0


def _bounded(client: SyncRedis, socket_timeout: float) -> SyncRedis:
    """The same server, with every socket operation bounded.

    A client given without ``socket_timeout`` would let a hung server block a lock call forever.
    Its pool is not changed (the application may rely on blocking commands): fencelock gets its
    own pool with the same settings plus the timeouts.
    """
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    if kwargs.get("socket_timeout") and kwargs.get("socket_connect_timeout"):
        return client
    kwargs["socket_timeout"] = kwargs.get("socket_timeout") or socket_timeout
    kwargs["socket_connect_timeout"] = kwargs.get("socket_connect_timeout") or socket_timeout
    new_pool = type(pool)(connection_class=pool.connection_class, **kwargs)
    return SyncRedis(connection_pool=new_pool)


def run_script(
    client: SyncRedis, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """EVALSHA, falling back to EVAL (which also caches the script) after SCRIPT FLUSH or a
    restart: the server answers NOSCRIPT and nothing has run, so the fallback is safe."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.source, len(keys), *keys, *args)


class LockClient:
    """Distributed locks on one Redis server.

    ``LockClient(redis.asyncio.Redis(...))`` or ``LockClient.from_url("redis://...")``.
    """

    def __init__(
        self,
        redis: SyncRedis,
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        max_poll: float = DEFAULT_MAX_POLL,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        if not isinstance(redis, SyncRedis):
            expected = SyncRedis.__module__
            raise TypeError(f"redis must be a {expected}.Redis, not {type(redis).__name__}")
        self._prefix = validate_prefix(prefix)
        # a blocked acquire re-tries at least this often, even if no wake-up message arrives
        self.max_poll = validate_ttl(max_poll, "max_poll")
        if isinstance(min_replicas, bool) or not isinstance(min_replicas, int):
            raise TypeError(f"min_replicas must be an int, not {type(min_replicas).__name__}")
        if min_replicas < 0:
            raise ValueError(f"min_replicas must be >= 0, got {min_replicas}")
        # grants and extensions wait (WAIT) for this many replicas to acknowledge them
        self.min_replicas = min_replicas
        self.replica_timeout = validate_ttl(replica_timeout, "replica_timeout")
        if min_replicas and self.replica_timeout >= socket_timeout:
            raise ValueError("replica_timeout must be shorter than socket_timeout")
        self.redis = _bounded(redis, socket_timeout)
        # close() closes what fencelock made: its own pool, or (from_url) the whole client
        self._owns_redis = self.redis is not redis
        self._waiter = Waiter(self.redis, confirm_timeout=socket_timeout)
        self._watchdog = Watchdog(self)
        self.publish_command = "PUBLISH"

    @classmethod
    def from_url(
        cls, url: str, *, socket_timeout: float = DEFAULT_SOCKET_TIMEOUT, **kwargs: Any
    ) -> Self:
        redis_client = SyncRedis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
        )
        client = cls(redis_client, socket_timeout=socket_timeout, **kwargs)
        client._owns_redis = True
        return client

    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        *,
        timeout: float | None = None,
        auto_renew: bool = False,
        reentrant: bool = False,
        on_lost: Callable[[Lock], object] | None = None,
        on_lost_policy: str = "raise",
    ) -> Lock:
        """A lock on ``name`` (no request is sent until it is acquired)."""
        return Lock(
            self,
            name,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            reentrant=reentrant,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
        )

    @property
    def prefix(self) -> str:
        return self._prefix

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return run_script(self.redis, script, keys, args)

    def run_replicated(
        self, script: Script, keys: Sequence[str], args: Sequence[Any]
    ) -> tuple[Any, int | None]:
        """Run ``script``, then ``WAIT`` for ``min_replicas``: the reply, and how many replicas
        acknowledged it (None without ``min_replicas``). WAIT counts the writes of its own
        connection, so both go in one pipeline, which keeps them on one connection."""
        if not self.min_replicas:
            return self.run(script, keys, args), None
        wait = ("WAIT", self.min_replicas, ttl_to_ms(self.replica_timeout))
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command(*wait)
            reply, acked = pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):  # nothing ran: send the source, which caches it
                pipe.eval(script.source, len(keys), *keys, *args)
                pipe.execute_command(*wait)
                reply, acked = pipe.execute(raise_on_error=False)
        for result in (reply, acked):
            if isinstance(result, Exception):
                raise result
        return reply, int(acked)

    def fenced_set(
        self,
        key: str,
        value: str | bytes | int | float,
        token: int,
        *,
        redis: SyncRedis | None = None,
    ) -> None:
        """Write ``value`` to ``key`` only if ``token`` is >= every token seen for ``key``;
        otherwise raise ``StaleToken`` and write nothing."""
        key = validate_resource_key(key)
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"token must be an int, not {type(token).__name__}")
        if token <= 0:
            raise ValueError(f"token must be a positive fencing token, got {token}")
        if not isinstance(value, str | bytes | int | float) or isinstance(value, bool):
            raise TypeError(f"value must be str, bytes, int or float, not {type(value).__name__}")
        target = self.redis if redis is None else redis
        try:
            reply = run_script(
                target, FENCED_SET, [key, fence_key_for(key)], [value, str(token)]
            )
        except RedisError as exc:
            raise translate_error(exc, f"resource {key!r}") from exc
        fenced_set_reply(reply, key, token)

    def close(self) -> None:
        self._watchdog.close()
        self._waiter.close()
        if self._owns_redis:
            self.redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
