# GENERATED from src/fencelock/_async/connect.py by tools/gen_sync.py: edit that file instead.
"""The one place a client's topology is made from what the user passed (``connect``).

* one ``Redis`` (also a Sentinel ``master_for`` client): one server's word is final;
* a ``RedisCluster``: the same per name (every key of a name is in one slot, thanks to the hash
  tag); wake-ups use sharded pub/sub and the watchdog batches per slot;
* a list of ``Redis`` (independent masters): Redlock. Every request goes to all nodes at once,
  each bounded by a per-node timeout, and a majority decides (``_core/quorum.py``).

What the user passed is checked and made into the route's settings (``routes.RouteSettings``),
a value the asyncio client's renewal twin is made from too (``_offloop.py``).

fencelock talks to the servers given through clients of its own (their settings, their own
pools: see ``async_own_client``); the application's clients are left as they are. Each pub/sub
connection has a pool of its own: in the requests' pool it would take a connection they may be
waiting for (a pool of one would never serve them).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._core.natives import ScriptMode
from .._core.options import ClientOptions
from .._core.quorum import socket_limit
from .._core.routing import CLUSTER, ONE, QUORUM, RouteSettings
from .._core.stats import Counters
from .._keys import described, validate_db, validate_url
from .._transport import (
    SYNC_OTHER_API,
    SYNC_OTHER_HINT,
    SyncRedis,
    SyncRedisCluster,
    sync_own_client,
    sync_reap,
)
from ..errors import ScriptsRequired
from .glide_route import glide_settings, recognised
from .routes import route
from .topology import SyncTopology
from .watchdog import SyncRenewer

if TYPE_CHECKING:
    from .._glide import SyncGlideClients


def connect(
    redis: SyncRedis | SyncRedisCluster | Sequence[SyncRedis] | SyncGlideClients,
    options: ClientOptions,
    counters: Counters,
) -> SyncTopology:
    """The topology for ``redis`` (no request is sent: nothing to close if this refuses)."""
    settings = route_settings(redis, options)
    made = route(settings)
    return SyncTopology(made, counters, ScriptMode(options.scripts, made.traits.publish_command))


def route_settings(
    redis: SyncRedis | SyncRedisCluster | Sequence[SyncRedis] | SyncGlideClients,
    options: ClientOptions,
) -> RouteSettings:
    """The settings of the route to ``redis``, checked, over fencelock's own clients."""
    if recognised(redis):  # valkey-glide's clients
        return glide_settings(redis, options)
    expected = SyncRedis.__module__ + ".Redis"
    if isinstance(redis, SYNC_OTHER_API) or (
        isinstance(redis, list | tuple) and redis and isinstance(redis[0], SYNC_OTHER_API)
    ):
        raise TypeError("redis is " + SYNC_OTHER_HINT)
    if options.scripts == "never" and not isinstance(redis, SyncRedis):
        raise ScriptsRequired(
            'scripts="never" is for one server (a Redis, or a Sentinel master): a Cluster and '
            "Redlock need Lua scripts (docs/modes.md, 'Without scripts')"
        )
    timeout = options.socket_timeout
    if isinstance(redis, SyncRedisCluster):
        if options.min_replicas:
            raise ValueError("min_replicas is not supported with a RedisCluster")
        # the caller's client: requests are bounded by their deadline (AsyncRequester)
        return RouteSettings(CLUSTER, (redis,), timeout, owned=False)
    if isinstance(redis, SyncRedis):
        validate_db(redis.connection_pool.connection_kwargs.get("db", 0))
        own = sync_own_client(redis, timeout)
        return RouteSettings(
            ONE,
            (own,),
            timeout,
            min_replicas=options.min_replicas,
            replica_timeout=options.replica_timeout,
        )
    if not isinstance(redis, list | tuple) or not redis:
        raise TypeError(
            f"redis must be a {expected}, a RedisCluster, or a non-empty list of "
            f"{expected} (Redlock), not {described(redis)}"
        )
    for node in redis:
        if not isinstance(node, SyncRedis):
            raise TypeError(f"Redlock nodes must be {expected}, not {described(node)}")
        validate_db(node.connection_pool.connection_kwargs.get("db", 0))
    if options.min_replicas:
        raise ValueError("min_replicas applies to one master, not to Redlock nodes")
    limit = socket_limit(options.node_timeout)
    nodes = tuple(sync_own_client(node, limit) for node in redis)
    return RouteSettings(QUORUM, nodes, timeout, node_timeout=options.node_timeout)


def from_urls(url: str | Sequence[str], socket_timeout: float) -> SyncRedis | list[SyncRedis]:
    """Clients for ``url``, not connected yet (nothing to close if the client refuses them); a
    list of URLs means Redlock over those masters."""
    urls = [url] if isinstance(url, str) else list(url) if isinstance(url, list | tuple) else []
    if not urls or not all(isinstance(u, str) for u in urls):
        raise TypeError(f"url must be a URL or a non-empty list of URLs, not {described(url)}")
    clients = []
    for u in urls:
        validate_url(u)
        try:
            clients.append(
                SyncRedis.from_url(
                    u, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
                )
            )
        except (ValueError, TypeError) as exc:
            raise ValueError(f"url {u!r}: {exc}") from None
    return clients[0] if isinstance(url, str) else clients


def close(watchdog: SyncRenewer, topology: SyncTopology) -> None:
    watchdog.close()
    topology.close()


def abandoned(name: str | None, watchdog: SyncRenewer, topology: SyncTopology) -> None:
    """A client was collected unclosed. Run by the garbage collector, in whatever thread, maybe
    while that thread holds a lock of ours: so it takes no lock and waits for nothing. The
    pub/sub listeners are told to stop (they end within a read and close their connection); the
    watchdog ends with its last lease, its late give-backs within one request timeout; the rest:
    see async_reap. ``name`` None: a client of fencelock.compat, which the application never
    saw, so there is nothing to warn it of."""
    if name is not None:
        warnings.warn(f"unclosed {name}: call close()", ResourceWarning, stacklevel=2)
    topology.abandon()
    watchdog.abandon()
    sync_reap(lambda: close(watchdog, topology), topology.requester, topology.pools())
