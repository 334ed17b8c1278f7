"""Where a client's keys live, as values: what a route is made from (``RouteSettings``,
``_async/routes.py``) and what follows from it for the layers above (``RouteTraits``).
``connect.py`` makes the settings from what the user passed; the asyncio client's renewal thread
makes its twin's from its route's, with sync clients of the same servers (``_offloop.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from redis.crc import key_slot

if TYPE_CHECKING:
    from .kinds import Kind

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


@dataclass(frozen=True, slots=True)
class RouteTraits:
    """What a route is and can do, one value for the layers above it (the engine, the
    primitives' own scripts, the operators): it follows from where the keys live, not from
    the client library that reaches them (``of``)."""

    local_handoff: bool = True  # a release may hand the grant to a local waiter, in one script
    grants_by_release: bool = True  # a release script may grant the first queued waiter
    jitters: bool = False  # contenders re-try after a random pause: split votes must not repeat
    one_counter: bool = True  # every server that holds a name holds its one fencing counter
    majority: bool = False  # a majority of several servers decides (Redlock)
    slotted: bool = False  # a Cluster: a key lives on the node of its hash slot
    publish_command: str = "PUBLISH"  # how a script publishes (a Cluster: sharded, SPUBLISH)

    @classmethod
    def of(cls, settings: RouteSettings) -> RouteTraits:
        """The traits of the route ``settings`` describe."""
        if settings.shape == QUORUM:
            return cls(False, False, jitters=True, one_counter=False, majority=True)
        if settings.shape == CLUSTER:
            return cls(slotted=True, publish_command="SPUBLISH")
        # a script cannot wait for replicas: with min_replicas, no grant without its WAIT
        return cls(
            local_handoff=not settings.min_replicas, grants_by_release=not settings.min_replicas
        )

    def supports(self, kind: Kind) -> bool:
        """Whether grants of ``kind`` can be made here (a majority: the kinds it can hold)."""
        return kind.on_quorum or not self.majority

    def slot_of(self, key: str) -> int:
        """The Cluster slot of ``key``: one multi-key script call must stay within one slot.
        (0 elsewhere: everything can share a call.)"""
        return key_slot(key.encode()) if self.slotted else 0

    def one_call(self, keys: Sequence[str]) -> bool:
        """Whether one script call can reach every key of ``keys`` (on a Cluster: one slot)."""
        return len({self.slot_of(key) for key in keys}) <= 1
