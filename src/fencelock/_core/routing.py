"""Where a client's keys live, as a value: what a route is made from (``_async/routes.py``).
``connect.py`` makes it from what the user passed; the asyncio client's renewal thread makes its
twin's from its route's, with sync clients of the same servers (``_offloop.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

# where a client's keys live (RouteSettings.shape)
ONE: Final = "one server"
CLUSTER: Final = "Cluster"
QUORUM: Final = "Redlock"
# the client library of its servers (RouteSettings.client)
REDIS_PY: Final = "redis-py"
GLIDE: Final = "valkey-glide"


@dataclass(frozen=True, slots=True)
class RouteSettings:
    """What a route is made from: its ``shape``, its ``servers`` (fencelock's own clients of
    one server or of Redlock's nodes, or a Cluster client), and how long a request may take.
    ``owned``: the servers are fencelock's, closed with the route (a Cluster client given by
    the application is not)."""

    shape: str
    servers: tuple[Any, ...]
    request_timeout: float
    owned: bool = True
    node_timeout: float | None = None  # Redlock: None derives it per grant from the ttl
    min_replicas: int = 0  # one server: the replicas every write waits for
    replica_timeout: float = 1.0
    # whether wake-up channels are watched (not by the renewal twin, which only renews)
    listens: bool = True
    client: str = REDIS_PY  # the library of ``servers``: whose route serves them
