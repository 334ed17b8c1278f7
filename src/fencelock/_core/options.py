"""What a primitive object was asked for, checked once and kept as one frozen value (no I/O).

Every primitive (lock, semaphore, read-write side, election, multi-lock, latch) takes the same
options; the client's factory methods check them here and hand the value to the object, which
hands it to its lease engine, instead of forwarding keyword lists through constructors.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, TypedDict

from .._keys import (
    DEFAULT_PREFIX,
    MIN_LEASE,
    validate_flag,
    validate_name,
    validate_on_lost,
    validate_prefix,
    validate_timeout,
    validate_ttl,
)
from .._labels import Label, check_label
from ..errors import ScriptsRequired
from .natives import SCRIPT_MODES


class Default:
    """The type of ``DEFAULT``: "not given" where None means something (a timeout of None waits
    for ever; a label of None is no label)."""

    __slots__ = ()  # one value with no state

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = Default()


class _Keywords(TypedDict, total=False):
    timeout: float | None
    auto_renew: bool
    on_lost: Callable[[Any], object] | None


class LeaseKeywords(_Keywords, total=False):
    """The keyword options of every primitive (``client.lock(name, ttl, **options)``,
    ``client.semaphore(name, limit, ttl, **options)``...); each is documented in docs/api.md.
    Defaults: ``timeout=None`` (wait as long as it takes), ``auto_renew=False``, ``on_lost=None``,
    ``on_lost_policy="raise"``, ``label``: the client's."""

    on_lost_policy: str
    label: Any


class MultiLockKeywords(_Keywords, total=False):
    """A multi-lock's: a lease's, but ``on_lost_policy`` (its block ends by the policy of
    none of its names: docs/multilock.md)."""

    label: Any


class ParticipantKeywords(TypedDict, total=False):
    """A latch's or a barrier's: its participant's lease is always renewed and labelled by its
    id, and ends by no ``with`` block's policy (the barrier's block enters and leaves:
    docs/latch.md), so neither ``auto_renew``, ``label`` nor ``on_lost_policy`` is taken."""

    timeout: float | None
    on_lost: Callable[[Any], object] | None


LEASE_KEYWORDS: Final = tuple(LeaseKeywords.__annotations__)  # (in the order above)
_LEASE_KEYWORDS: Final = frozenset(LEASE_KEYWORDS)
MULTI_LOCK_KEYWORDS: Final = tuple(MultiLockKeywords.__annotations__)
PARTICIPANT_KEYWORDS: Final = tuple(ParticipantKeywords.__annotations__)


def refuse_unknown(call: str, given: Iterable[str], accepted: Sequence[str]) -> None:
    """The ``TypeError`` of the first keyword of ``given`` that ``call`` does not take, worded as
    Python words it but naming the call the user made (``lock()``, not the function that checks
    its options), with the accepted keyword nearest to it, and the others."""
    for keyword in given:
        if keyword not in accepted:
            near = difflib.get_close_matches(keyword, accepted, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TypeError(
                f"{call}() got an unexpected keyword argument {keyword!r}{hint} "
                f"(its keywords: {', '.join(accepted)})"
            )


@dataclass(frozen=True, slots=True)
class LeaseOptions:
    name: str
    ttl: float
    timeout: float | None  # the wait of acquire() and ``with`` (None: as long as it takes)
    auto_renew: bool = False
    on_lost: Callable[[Any], object] | None = None  # called with the primitive object
    on_lost_policy: str = "raise"
    label: Label = None  # the holder label (_labels.py)

    @classmethod
    def checked(
        cls,
        name: object,
        ttl: object,
        *,
        timeout: object,
        auto_renew: object = False,
        on_lost: object = None,
        on_lost_policy: object = "raise",
        label: object = None,
        threads: bool,
    ) -> LeaseOptions:
        """Each option checked, naming the argument in the error (``threads``: the sync API,
        where a thread cannot be cancelled nor await an ``async def`` callback)."""
        validate_on_lost(on_lost, on_lost_policy, threads=threads)
        return cls(
            validate_name(name),
            validate_ttl(ttl, minimum=MIN_LEASE),
            validate_timeout(timeout),
            validate_flag("auto_renew", auto_renew),
            on_lost,  # type: ignore[arg-type]  # (checked callable above)
            str(on_lost_policy),
            check_label(label),
        )

    @classmethod
    def given(
        cls,
        call: str,
        name: object,
        ttl: object,
        given: Mapping[str, object],
        own: Sequence[str] = (),
        *,
        label: Label,
        threads: bool,
    ) -> LeaseOptions:
        """What the factory ``call`` was given, checked: a keyword it does not take refused
        (``own``: its keywords besides the lease options), ``label`` (the client's) unless one
        was given."""
        if not _LEASE_KEYWORDS.issuperset(given):
            refuse_unknown(call, given, (*own, *LEASE_KEYWORDS))
        options: dict[str, Any] = {"timeout": None, **given}
        if options.get("label", DEFAULT) is DEFAULT:
            options["label"] = label
        return cls.checked(name, ttl, threads=threads, **options)

    def wait(self, timeout: object) -> float | None:
        """The wait of one acquire: ``timeout`` checked, or the object's own (``DEFAULT``)."""
        return self.timeout if timeout is DEFAULT else validate_timeout(timeout)


WAKE_MODES: Final = ("all", "one")
DEFAULT_SOCKET_TIMEOUT: Final = 5.0
# Consecutive local hand-offs before the lock goes back through Redis (see singleflight.py).
DEFAULT_MAX_HANDOFFS: Final = 10


def _count(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{arg} must be >= 0, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """A client's options, each checked (``LockClient(...)``'s keyword arguments)."""

    prefix: str = DEFAULT_PREFIX
    # one request's bound ("one request timeout" in the README): waiting for a connection,
    # connecting and the reply included
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT
    # None: a blocked acquire re-tries only when woken or when the holder's lease ends; else
    # also at least this often (it costs a request per waiter each time)
    max_poll: float | None = None
    # grants and extensions wait (WAIT) for this many replicas to acknowledge them
    min_replicas: int = 0
    replica_timeout: float = 1.0
    # Redlock: each node's share of a request is bounded by this (None: derived per lock from
    # its ttl, see _core/quorum.node_timeout)
    node_timeout: float | None = None
    # lock objects of one client wait for a name in a local queue; the lock passes from one to
    # the next at most this many times in a row before it goes back through Redis
    max_handoffs: int = DEFAULT_MAX_HANDOFFS
    # "one": waiters queue in Redis and a release wakes the first that still listens; "all": a
    # release wakes every waiting client, and one wins the re-try (docs/contention.md). Given
    # as None: "one" where scripts run, "all" without (a release cannot serve a queue there)
    wake: str = "one"
    # who holds, for inspect() and the CLI: a str, or a callable run at each acquire
    label: Label = None
    # "auto": Lua scripts, and without them (plain locks only) if the server refuses one;
    # "never": plain locks only, by native commands (docs/modes.md, "Without scripts")
    scripts: str = "auto"

    @classmethod
    def checked(
        cls,
        *,
        prefix: object,
        socket_timeout: object,
        max_poll: object,
        min_replicas: object,
        replica_timeout: object,
        node_timeout: object,
        max_handoffs: object,
        wake: object,
        label: object,
        scripts: object = "auto",
    ) -> ClientOptions:
        if scripts not in SCRIPT_MODES:
            raise ValueError(f"scripts must be one of {SCRIPT_MODES}, got {scripts!r}")
        if wake is None:
            wake = "one" if scripts == "auto" else "all"
        if wake not in WAKE_MODES:
            raise ValueError(f"wake must be one of {WAKE_MODES} or None, got {wake!r}")
        if wake == "one" and scripts == "never":
            raise ScriptsRequired(
                'wake="one" needs Lua scripts: waiters queue in Redis, and a release serves the '
                'first in its own step. With scripts="never" every release wakes every waiter '
                "(wake=\"all\"; docs/modes.md, 'Without scripts')"
            )
        timeout = validate_ttl(socket_timeout, "socket_timeout")
        replicas = _count("min_replicas", min_replicas)
        replica_wait = validate_ttl(replica_timeout, "replica_timeout")
        if replicas and replica_wait >= timeout:
            raise ValueError("replica_timeout must be shorter than socket_timeout")
        return cls(
            validate_prefix(prefix),
            timeout,
            None if max_poll is None else validate_ttl(max_poll, "max_poll"),
            replicas,
            replica_wait,
            None if node_timeout is None else validate_ttl(node_timeout, "node_timeout"),
            _count("max_handoffs", max_handoffs),
            str(wake),
            check_label(label),
            str(scripts),
        )


# the keyword arguments of ``LockClient(...)``: the options above, by their names
CLIENT_KEYWORDS: Final = tuple(option.name for option in fields(ClientOptions))
