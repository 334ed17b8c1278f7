"""What a one-server topology learns of its server, and the script-free mode on it
(docs/modes.md): the server's native commands and eviction policy, learned once per client; the
kind that stands in for a lease's where no script runs; the renewal by native commands; waiting
where subscribing is refused (every waiter of the client re-tries from then on). The decisions
are ``_core/natives.py``'s; these do the I/O."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from redis.exceptions import NoPermissionError, RedisError

from .._core.kinds import Kind, LeaseSpec
from .._core.natives import left_without_scripts, scripts_refused
from .._core.replies import check_replicated, translate_error
from ..errors import LockError
from .waiter import Watch

if TYPE_CHECKING:
    from .topology import AsyncOneServer

server_logger = logging.getLogger("fencelock.server")
waiter_logger = logging.getLogger("fencelock.waiter")


async def check_server(topology: AsyncOneServer, key: str) -> None:
    """Once per client, before its first grant: which native commands has the server
    (``HELLO``: any user may send it), and can it evict lock keys? (On a Cluster, its default
    node answers.) A failure here is the acquire's to report."""
    topology.server_checked = True
    mode, where = topology.mode, topology.address
    try:
        *hello, info = await topology.ask(list(topology.first_requests), key)
    except RedisError as exc:
        server_logger.debug("fencelock: %s: cannot tell what the server is: %s", where, exc)
        return
    if hello:
        if isinstance(hello[0], Exception):  # (a server, or a proxy, without HELLO)
            server_logger.debug("fencelock: %s: HELLO refused: %s", where, hello[0])
        else:
            mode.commands = mode.commands.detected(hello[0])
    mode.detected = True
    topology.warn_of_hazards(info, where)


async def refused(topology: AsyncOneServer, error: BaseException, key: str) -> bool:
    """Whether ``error`` is the server refusing a script (nothing ran). A client made with
    scripts="auto" runs none from then on, and says once what it can still do there (what the
    server has natively: asked now if it was not yet; ``key``: a key of the call)."""
    if not scripts_refused(error):
        return False
    mode, where = topology.mode, topology.address
    if mode.auto and not mode.no_scripts:
        mode.no_scripts = f"{where} refuses them ({error})"
        if not mode.detected and topology.runs_without_scripts:
            await check_server(topology, key)
        left = left_without_scripts(mode.commands, topology.runs_without_scripts)
        server_logger.warning(
            "fencelock: %s refuses Lua scripts (%s): this client runs none from now on, and "
            "can take %s (docs/modes.md, 'Without scripts')",
            where,
            error,
            left,
            extra={"event": "scripts_refused", "server": where},
        )
    return True


async def stand_in(topology: AsyncOneServer, spec: LeaseSpec) -> Kind:
    """The kind that stands in for ``spec``'s where this client runs no scripts; the
    ``ScriptsRequired`` of ``spec`` if there is none, or if the server has not the native
    commands it needs (a release without a compare-and-delete could delete another holder's
    lock)."""
    kind = spec.kind.without_scripts()
    if kind is None:
        raise topology.scripts_required(spec.what, spec.kind.why_scripts)
    if not topology.runs_without_scripts:  # (a Cluster)
        raise topology.scripts_required(f"{spec.what} on a Cluster", "the mode is for one server")
    if not topology.mode.detected:
        await check_server(topology, spec.keys.lock)
    commands = topology.mode.commands
    if not commands.script_free:
        raise topology.scripts_required(
            f"{spec.what} on this server",
            f"{commands.server or 'it'} lacks {commands.lacking()}, and without them a release "
            "could delete another holder's lock",
        )
    return kind


async def renew_natively(
    topology: AsyncOneServer,
    specs: Sequence[LeaseSpec],
    holders: Sequence[str],
    ttls_ms: Sequence[int],
    timeout: float,
    what: str,
) -> list[int | LockError] | None:
    """The renewal of each lease by its kind's own commands, in one request; None where a
    script does better: several leases while scripts run (one script renews them all, in one
    command), or a kind without such commands. (Without scripts, a lease of a kind that has
    none gets its ``ScriptsRequired``.)"""
    mode = topology.mode
    if not mode.no_scripts and len(specs) > 1:
        return None
    requests = [
        topology.running(spec.kind).renew_request(spec, holder, ttl_ms, mode.commands)
        for spec, holder, ttl_ms in zip(specs, holders, ttls_ms, strict=True)
    ]
    if not mode.no_scripts and requests[0] is None:
        return None
    commands = [command for request in requests if request for command in request]
    try:
        replies, acked = await topology.request(commands, None, timeout, specs[0].keys.lock)
    except RedisError as exc:
        raise translate_error(exc, what) from exc
    check_replicated(acked, topology.min_replicas, what)
    held: list[int | LockError] = []
    for spec, holder, request in zip(specs, holders, requests, strict=True):
        if request is None:
            held.append(topology.scripts_required(spec.what, spec.kind.why_scripts))
            continue
        own, replies = replies[: len(request)], replies[len(request) :]
        try:
            held.append(topology.running(spec.kind).renew_result(own, holder))
        except RedisError as exc:
            held.append(translate_error(exc, what))
    return held


@asynccontextmanager
async def watch(
    topology: AsyncOneServer, channel: str, what: str, timeout: float | None
) -> AsyncIterator[Watch]:
    """The one server's watch of ``channel`` (``AsyncOneServer.watch``), or, once subscribing
    was refused to a client that runs no scripts, a watch never set: its waiters re-try."""
    if topology.polls:
        yield Watch()
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            watch = await stack.enter_async_context(
                topology.waiters[0].watch(channel, what, timeout=timeout)
            )
        except LockError as exc:
            if not topology.mode.no_scripts or not isinstance(exc.__cause__, NoPermissionError):
                raise
            topology.polls = True
            waiter_logger.warning(
                "fencelock: %s: subscribing is refused (%s): waiters re-try at the end of the "
                "holder's lease, or every max_poll",
                topology.address,
                exc,
                extra={"event": "subscribe_refused"},
            )
            watch = Watch()
        yield watch
