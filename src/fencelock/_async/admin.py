"""What an operator sees and does: inspect a lock, list the held ones, force one free.

Every read of one name is one script (_scripts/inspect.lua), so what it shows is one moment of
the server. Redlock shows the majority's view (the topology's ``view``). A forced release is one
script too (force_release.lua): it serves the waiters as a release does, and keeps the fencing
counter, so the next grant's token is larger than the forced-out holder's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from .._core.inspection import (
    MAX_WAITERS_LISTED,
    ForceOutcome,
    ForceReleased,
    LockInfo,
    force_reply,
    name_of,
    scan_pattern,
)
from .._core.kinds import Kind
from .._core.replies import split_holder
from .._fencing import fencing_token
from .._keys import LockKeys, encodable, validate_name
from .._scripts import FORCE_RELEASE
from ..errors import LockError
from .engine import ClientState
from .topology import AsyncTopology

logger = logging.getLogger("fencelock.admin")

SCAN_COUNT = 1000  # keys looked at per SCAN call (each call is bounded by one request timeout)


class Reader(Protocol):
    async def __call__(self, topology: AsyncTopology, prefix: str, name: str) -> LockInfo | None:
        """What inspect shows of the primitive of ``name``; None when nothing of it is held."""


@dataclass(frozen=True, slots=True)
class View:
    """How the operators' tools show one family of primitives other than the lock (whose keys
    are ``{name}:<family>:...``): registered by the primitive's own module (``register``)."""

    family: str  # "sem", "rw", "latch"...
    kind: Kind  # a kind of the family: the topology must support it (Redlock has no semaphore)
    read: Reader
    # the key ``locks()`` finds a name of the family by (``{name}:<family>:<found_by>``): one
    # that exists whenever there is something of it to show
    found_by: str = "lock"


VIEWS: dict[str, View] = {}


def register(view: View) -> None:
    VIEWS[view.family] = view


def inspected(keys: LockKeys) -> tuple[str, str, str]:
    """The keys inspect.lua reads of a lock."""
    return (keys.lock, keys.fence, keys.queue)


async def lock_info(
    topology: AsyncTopology, prefix: str, name: str, what: str = ""
) -> LockInfo | None:
    """The lock of ``name`` as its server (Redlock: a majority of nodes) shows it; None: not
    held. ``what``: who asks, for errors (default: the lock)."""
    keys = LockKeys.for_name(name, prefix)
    view = await topology.view(inspected(keys), MAX_WAITERS_LISTED, what or f"lock {name!r}")
    return None if view is None else view.info(name)


async def inspect(topology: AsyncTopology, prefix: str, name: str) -> LockInfo | None:
    """The lock of ``name``; when none is held, another primitive of that name (a semaphore,
    a read-write lock...: one more read script each, where the topology has them)."""
    info = await lock_info(topology, prefix, name)
    for view in VIEWS.values():
        if info is not None:
            return info
        if topology.traits.supports(view.kind):
            info = await view.read(topology, prefix, name)
    return info


async def locks(topology: AsyncTopology, prefix: str, pattern: str) -> AsyncIterator[LockInfo]:
    """Every held lock, semaphore and read-write lock, and every latch and barrier, whose name
    matches ``pattern`` (a glob), found by SCAN on every server (every master of a Cluster,
    every Redlock node), each then inspected: a name released between the two is left out."""
    seen: set[tuple[str, str]] = set()
    families = {family: view.found_by for family, view in VIEWS.items()}
    async for key in topology.scan(scan_pattern(prefix, pattern), SCAN_COUNT):
        named = name_of(key, prefix, families)
        if named is None or named in seen:  # SCAN may return a key twice; nodes share names
            continue
        seen.add(named)
        name, family = named
        if family == "lock":
            info = await lock_info(topology, prefix, name)
        else:
            info = await VIEWS[family].read(topology, prefix, name)
        if info is not None:
            yield info


async def force_release(
    topology: AsyncTopology, prefix: str, name: str, token: int | None
) -> ForceReleased:
    keys = LockKeys.for_name(name, prefix)
    what = f"lock {name!r}"
    holder, only = "", "" if token is None else str(token)
    if token is not None and not topology.traits.one_counter:
        # Redlock: the nodes' counters differ, so a token names the grant the majority shows,
        # and each node releases only that grant's holder token
        view = await topology.view(inspected(keys), MAX_WAITERS_LISTED, what)
        if view is None:
            return _logged(ForceReleased(name, ForceOutcome.NOT_HELD, None, None, None), token)
        if view.counter != token:
            found = split_holder(view.holder)
            outcome = ForceOutcome.TOKEN_MISMATCH
            return _logged(ForceReleased(name, outcome, *found, view.counter), token)
        holder, only = view.holder, ""
    args = (only, holder, keys.channel, topology.traits.publish_command)
    script_keys = (keys.lock, keys.queue, keys.fence)
    replies = await topology.run_all(FORCE_RELEASE, script_keys, args, f"force_release of {what}")
    results = [force_reply(name, r) for r in replies if not isinstance(r, LockError)]
    if not results:
        raise replies[0]
    released = [r for r in results if r.outcome is ForceOutcome.RELEASED]
    result = max(released, key=lambda r: r.token or 0) if released else results[0]
    return _logged(result, token)


def _logged(result: ForceReleased, token: int | None) -> ForceReleased:
    level = logging.WARNING if result.outcome is ForceOutcome.RELEASED else logging.INFO
    logger.log(
        level,
        "fencelock: force_release of %r (%s): %s; holder %s, label %r, token found %s",
        result.name,
        "any grant" if token is None else f"only token {token}",
        result.outcome.value,
        result.holder,
        result.label,
        result.token,
        extra={
            "event": "force_release",
            "lock_name": result.name,
            "token": result.token,
            "holder": result.holder,
            "label": result.label,
            "outcome": result.outcome.value,
        },
    )
    return result


class AsyncOperators:
    """The operators' calls of one client (its ``inspect``, ``locks``, ``force_release``): the
    arguments checked, then the functions above."""

    def __init__(self, topology: AsyncTopology, prefix: str, state: ClientState) -> None:
        self._topology = topology
        self._prefix = prefix
        self._state = state

    def _check(self, call: str) -> None:
        self._state.check()
        topology = self._topology
        topology.protocol.require_scripts(call, "the operators' views are read by scripts")

    async def inspect(self, name: str) -> LockInfo | None:
        self._check("inspect()")
        return await inspect(self._topology, self._prefix, validate_name(name))

    async def locks(self, pattern: str) -> AsyncIterator[LockInfo]:
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
        self._check("locks()")
        async for info in locks(self._topology, self._prefix, encodable("pattern", pattern)):
            yield info

    async def force_release(self, name: str, token: int | None) -> ForceReleased:
        if token is not None:
            token = fencing_token(token)
        self._check("force_release()")
        return await force_release(self._topology, self._prefix, validate_name(name), token)
