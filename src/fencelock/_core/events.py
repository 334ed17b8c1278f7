"""What the locks do, as values: the events of one stream that the metrics exporters
(``fencelock.metrics``), the tracing (``fencelock._tracing``) and the slow-acquire log listen to.
Who listens, and the emit that sends an event to them, is process state: ``fencelock._events``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The kind of lock an event is about (a metric label): one per primitive.
LOCK = "lock"
REENTRANT_LOCK = "reentrant_lock"
SEMAPHORE = "semaphore"
READ_LOCK = "read_lock"  # the two sides of a read-write lock (a semaphore: rw_lock.py)
WRITE_LOCK = "write_lock"

# How an acquire ended.
GRANTED = "granted"
TIMEOUT = "timeout"  # not acquired in time (also ``timeout=0`` on a busy lock)
ERROR = "error"  # raised: the server unreachable, a bad reply, cancelled or interrupted

# How a compute_once or idempotent call ended, besides TIMEOUT (no result in time) and ERROR.
HIT = "hit"  # a fresh stored result
STALE = "stale"  # a stale stored result, while another caller refreshes it
BUILT = "built"  # this call built the result
WAITED = "waited"  # the result of another caller's build, waited for


@dataclass(frozen=True, slots=True)
class AcquireEnded:
    primitive: str
    name: str
    outcome: str  # GRANTED, TIMEOUT or ERROR
    seconds: float  # from the call to its end, waits included
    token: int | None  # the grant's fencing token (GRANTED only)
    # The grant taken (GRANTED only), an opaque key: the same object in the HoldEnded and
    # LeaseLost of this hold, which tracing ties to this acquire.
    grant: object = None
    error: BaseException | None = None  # what the acquire raised (ERROR only)


@dataclass(frozen=True, slots=True)
class HoldEnded:
    """A grant that was held: released, or taken afresh after it was lost. Emitted once the
    release's request is done, so that a loss the release found comes first (its LeaseLost)."""

    primitive: str
    name: str
    seconds: float  # from the grant to its release (the call)
    token: int
    grant: object  # the key of AcquireEnded.grant


@dataclass(frozen=True, slots=True)
class LeaseLost:
    primitive: str
    name: str
    token: int
    reason: str  # one of lease.LOSS_REASONS
    grant: object  # the key of AcquireEnded.grant


@dataclass(frozen=True, slots=True)
class Renewal:
    """One lease's renewal by the watchdog: confirmed, or unconfirmed (tried again soon)."""

    primitive: str
    name: str
    ok: bool


@dataclass(frozen=True, slots=True)
class HandedOff:
    """A grant passed to the next lock object of the same client (no wait in Redis)."""

    primitive: str
    name: str


@dataclass(frozen=True, slots=True)
class WokenUp:
    """A waiter woken by a release message (not by its timer)."""

    primitive: str
    name: str


@dataclass(frozen=True, slots=True)
class GivenBack:
    """A grant given back by the client's watchdog once a silent server answered again: made
    after its acquire's request went unanswered, or left by a release that got no answer
    (Redlock: per node)."""

    primitive: str
    name: str


@dataclass(frozen=True, slots=True)
class StaleWriteRefused:
    """``fenced_set`` refused a write: a newer token had written the resource already."""

    key: str
    token: int


@dataclass(frozen=True, slots=True)
class LoopStalled:
    """An asyncio client's event loop was blocked for more than a third of the shortest lease
    held: the leases were renewed off the loop, but every task waited (_offloop.py)."""

    seconds: float
    ttl: float  # the shortest lease held then


@dataclass(frozen=True, slots=True)
class ComputeEnded:
    """A ``compute_once`` or ``idempotent`` call returned or raised."""

    primitive: str  # "compute" or "idempotent"
    name: str  # the key the user gave
    outcome: str  # HIT, STALE, BUILT, WAITED, TIMEOUT or ERROR
    seconds: float  # from the call to its end, the build or the wait included


@dataclass(frozen=True, slots=True)
class TookOver:
    """A caller that waited for a build took it over: the builder's lease ended (it died, was
    cancelled, or its store was refused) without a result."""

    primitive: str
    name: str


Event = (
    AcquireEnded
    | HoldEnded
    | LeaseLost
    | Renewal
    | HandedOff
    | WokenUp
    | GivenBack
    | StaleWriteRefused
    | LoopStalled
    | ComputeEnded
    | TookOver
)
Listener = Callable[[Event], object]
