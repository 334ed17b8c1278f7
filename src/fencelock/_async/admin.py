"""What an operator sees and does: inspect a lock, list the held ones, force one free.

Every read of one name is one script (scripts/inspect.lua), so what it shows is one moment of
the server. Redlock shows the majority's view (``_core/inspection.majority_view``). A forced
release is one script too (force_release.lua): it serves the waiters as a release does, and
keeps the fencing counter, so the next grant's token is larger than the forced-out holder's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from redis.exceptions import RedisError

from .._core.inspection import (
    MAX_WAITERS_LISTED,
    ForceOutcome,
    ForceReleased,
    LockInfo,
    NodeView,
    force_reply,
    inspect_reply,
    majority_view,
    name_of,
    permits_info,
    scan_pattern,
)
from .._core.quorum import quorum
from .._core.replies import split_holder, translate_error
from .._transport import AsyncRedis, AsyncRedisCluster, async_fan_out, async_node_client
from ..errors import LockConnectionError, LockError
from ..keys import MAX_TTL, LockKeys, SemaphoreKeys
from ..scripts import FORCE_RELEASE, INSPECT, Script
from .redlock import AsyncQuorum
from .rw_lock import WRITE_PERMITS
from .semaphore import read_state
from .topology import AsyncOneServer, AsyncTopology

logger = logging.getLogger("fencelock.admin")

SCAN_COUNT = 1000  # keys looked at per SCAN call (each call is bounded by one request timeout)


def _timeout(topology: AsyncTopology) -> float:
    """One request's bound: a Redlock node's own timeout (a node down must not hold up the
    majority's answer), else one request timeout."""
    if isinstance(topology, AsyncQuorum):
        return topology.node_timeout(MAX_TTL)
    return topology.request_timeout


async def _on_one(
    topology: AsyncOneServer, script: Script, keys: LockKeys, args: tuple[Any, ...]
) -> object:
    """``script`` on the server of ``keys``, within one request timeout. A forced release waits
    for ``min_replicas`` as a release does; a read has nothing to wait for (and a replica down
    would make it wait the whole replica timeout)."""
    names = _script_keys(script, keys)
    try:
        if script is INSPECT:
            reply = await topology.read(script, names, args, _timeout(topology))
        else:
            reply, _ = await topology.script(script, names, args, _timeout(topology))
    except RedisError as exc:
        raise translate_error(exc, keys.lock) from exc
    return reply


def _script_keys(script: Script, keys: LockKeys) -> list[str]:
    if script is INSPECT:
        return [keys.lock, keys.fence, keys.queue]
    return [keys.lock, keys.queue, keys.fence]


async def _views(topology: AsyncTopology, keys: LockKeys) -> NodeView | None:
    """The lock at ``keys`` as its server (Redlock: a majority of nodes) shows it; None: not
    held."""
    args = (MAX_WAITERS_LISTED,)
    if isinstance(topology, AsyncQuorum):
        replies = await topology.fan_out_script(
            INSPECT, _script_keys(INSPECT, keys), args, _timeout(topology)
        )
        views = [r if isinstance(r, BaseException) else inspect_reply(r) for r in replies]
        return majority_view(views)
    assert isinstance(topology, AsyncOneServer)
    view = inspect_reply(await _on_one(topology, INSPECT, keys, args))
    return view if view.holder else None


async def inspect(topology: AsyncTopology, prefix: str, name: str) -> LockInfo | None:
    """The lock of ``name``; when none is held, a semaphore or read-write lock of that name
    (one more read script each: Redlock has neither)."""
    info = await _held_lock(topology, prefix, name)
    if info is not None or isinstance(topology, AsyncQuorum):
        return info
    for kind in ("sem", "rw"):
        info = await _permits(topology, prefix, name, kind)
        if info is not None:
            return info
    return None


async def _held_lock(topology: AsyncTopology, prefix: str, name: str) -> LockInfo | None:
    view = await _views(topology, LockKeys.for_name(name, prefix))
    return None if view is None else view.info(name)


async def locks(topology: AsyncTopology, prefix: str, pattern: str) -> AsyncIterator[LockInfo]:
    """Every held lock, semaphore and read-write lock whose name matches ``pattern`` (a glob),
    found by SCAN on every server (every master of a Cluster, every Redlock node), each then
    inspected: a name released between the two is left out."""
    seen: set[tuple[str, str]] = set()
    async for name, kind in _scan(topology, prefix, pattern):
        if (name, kind) in seen:  # SCAN may return a key twice; Redlock nodes share names
            continue
        seen.add((name, kind))
        if kind == "lock":
            info = await _held_lock(topology, prefix, name)
        else:
            info = await _permits(topology, prefix, name, kind)
        if info is not None:
            yield info


async def _permits(topology: AsyncTopology, prefix: str, name: str, kind: str) -> LockInfo | None:
    """A semaphore (``kind`` "sem") or read-write lock ("rw") of ``name``: one read script."""
    assert isinstance(topology, AsyncOneServer)  # (Redlock has neither)
    state = await read_state(topology, SemaphoreKeys.for_semaphore(name, prefix, kind))
    return permits_info(name, kind, state, WRITE_PERMITS)


async def _scan(
    topology: AsyncTopology, prefix: str, pattern: str
) -> AsyncIterator[tuple[str, str]]:
    match = scan_pattern(prefix, pattern)
    made: list[AsyncRedis] = []
    nodes: list[AsyncRedis]
    if isinstance(topology, AsyncQuorum):
        nodes = topology.nodes
    else:
        assert isinstance(topology, AsyncOneServer)
        redis = topology.redis
        if isinstance(redis, AsyncRedisCluster):
            made = [async_node_client(n, _timeout(topology)) for n in redis.get_primaries()]
            nodes = made
        else:
            nodes = [redis]
    answered = 0
    failure: LockError | None = None
    try:
        for node in nodes:
            cursor = 0
            while True:
                [reply] = await async_fan_out(
                    [node],
                    ("SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT),
                    _timeout(topology),
                )
                if isinstance(reply, RedisError):
                    failure = translate_error(reply, f"SCAN {match!r}")
                    break
                cursor, found = int(reply[0]), reply[1]
                for key in found:
                    named = name_of(key, prefix)
                    if named is not None:
                        yield named
                if cursor == 0:
                    answered += 1
                    break
    finally:
        for node in made:
            await node.aclose()
            await node.connection_pool.disconnect()
    # Redlock: a lock is held on a majority, so with fewer nodes silent than a majority, one of
    # its nodes answered; with more (or any silent elsewhere) the listing could miss some
    if failure is not None:
        silent = len(nodes) - answered
        if not (isinstance(topology, AsyncQuorum) and silent < quorum(len(nodes))):
            raise failure


async def force_release(
    topology: AsyncTopology, prefix: str, name: str, token: int | None
) -> ForceReleased:
    keys = LockKeys.for_name(name, prefix)
    if isinstance(topology, AsyncQuorum):
        result = await _force_quorum(topology, keys, name, token)
    else:
        assert isinstance(topology, AsyncOneServer)
        args = ("" if token is None else str(token), "", keys.channel, topology.publish_command)
        result = force_reply(name, await _on_one(topology, FORCE_RELEASE, keys, args))
    level = logging.WARNING if result.outcome is ForceOutcome.RELEASED else logging.INFO
    logger.log(
        level,
        "fencelock: force_release of %r (%s): %s; holder %s, label %r, token found %s",
        name,
        "any grant" if token is None else f"only token {token}",
        result.outcome.value,
        result.holder,
        result.label,
        result.token,
        extra={
            "event": "force_release",
            "lock_name": name,
            "token": result.token,
            "holder": result.holder,
            "label": result.label,
            "outcome": result.outcome.value,
        },
    )
    return result


async def _force_quorum(
    topology: AsyncQuorum, keys: LockKeys, name: str, token: int | None
) -> ForceReleased:
    """Redlock: the nodes' counters differ, so a token names the grant the majority shows, and
    each node releases only that grant's holder token; without one, every node releases."""
    holder = ""
    if token is not None:
        view = await _views(topology, keys)
        if view is None:
            return ForceReleased(name, ForceOutcome.NOT_HELD, None, None, None)
        if view.counter != token:
            found = split_holder(view.holder)
            return ForceReleased(name, ForceOutcome.TOKEN_MISMATCH, *found, view.counter)
        holder = view.holder
    args = ("", holder, keys.channel, topology.publish_command)
    replies = await topology.fan_out_script(
        FORCE_RELEASE, _script_keys(FORCE_RELEASE, keys), args, _timeout(topology)
    )
    results = [force_reply(name, r) for r in replies if not isinstance(r, BaseException)]
    if not results:
        raise LockConnectionError(f"force_release of {name!r}: no node answered: {replies[0]}")
    released = [r for r in results if r.outcome is ForceOutcome.RELEASED]
    if released:
        return max(released, key=lambda r: r.token or 0)
    return results[0]
