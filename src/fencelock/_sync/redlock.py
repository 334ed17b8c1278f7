# GENERATED from src/fencelock/_async/redlock.py by tools/gen_sync.py: edit that file instead.
"""Redlock: several independent masters, and a majority decides (``_core/quorum.py``).

Every request goes to all nodes at once, each bounded by a per-node timeout. A grant's fencing
token is the largest counter among the granting nodes, and is safe to use only once a majority's
counters were raised to it (fence_raise.lua): the asyncio API does that inside acquire, the sync
API at the first read of ``lock.token``. No local hand-off and no grant by a release script: one
script on one node cannot speak for a majority.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from .._backend import SYNC_LAZY_TOKEN, sync_checkpoint, sync_shield
from .._core.inspection import NodeView, inspect_reply, majority_view
from .._core.kinds import Kind, LeaseSpec, Released
from .._core.natives import ScriptMode, scripts_refused
from .._core.quorum import (
    acquire_outcome,
    first_answers,
    node_timeout,
    owned_by_quorum,
    quorum,
    renew_answers,
    tally,
    validity,
)
from .._core.replies import GONE, RENEWED, Busy, Granted, translate_error
from .._core.stats import Counters
from .._keys import MAX_TTL, renew_keys, ttl_to_ms
from .._scripts import FENCE_RAISE, INSPECT, RENEW, Script
from .._transport import SyncRedis
from ..errors import LockConnectionError, LockError
from .protocol import SyncProtocol, warn_of_hazards
from .topology import ATTEMPTS, SyncTopology, scan_node, server_address
from .waiter import Waiter, Watch

# the release replies of a holder that held the lock on that node
HELD = (Released.RELEASED, Released.STILL_HELD, Released.WOKE, Released.GRANTED)


class SyncQuorum(SyncTopology):
    local_handoff = False
    grants_by_release = False
    jitters = True
    one_counter = False

    def __init__(
        self,
        nodes: list[SyncRedis],
        waiters: dict[object, Waiter],
        request_timeout: float,
        counters: Counters,
        node_timeout: float | None,
    ) -> None:
        super().__init__(request_timeout, counters, owned=nodes)
        self.protocol = SyncProtocol(
            None, ScriptMode("auto", self.publish_command), request_timeout, one_server=False
        )
        self.nodes = nodes
        self.waiters = waiters
        # None: derived per lock from its ttl (_core/quorum.node_timeout)
        self.fixed_node_timeout = node_timeout

    def node_timeout(self, ttl: float) -> float:
        """How long one node may take to answer a request about a lock of ``ttl``."""
        return self.fixed_node_timeout or node_timeout(ttl)

    def fan_out(self, command: Sequence[Any], timeout: float, what: str) -> list[Any]:
        """Send ``command`` to every node at once; per node its reply, or the ``LockError`` it
        failed with (a node silent for ``timeout`` seconds counts as failed)."""
        self._loop.check()
        replies = self.requester.fan_out(self.nodes, command, timeout)
        return [translate_error(r, what) if isinstance(r, RedisError) else r for r in replies]

    def fan_out_script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float,
        what: str = "",
    ) -> list[Any]:
        """``fan_out`` of a script by EVALSHA; nodes that answer NOSCRIPT (restarted, or SCRIPT
        FLUSH) get the source in a second, smaller round."""
        self._loop.check()
        replies = self.requester.fan_out(self.nodes, script.evalsha(keys, args), timeout)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            nodes = [self.nodes[i] for i in missing]
            again = self.requester.fan_out(nodes, script.eval(keys, args), timeout)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        what = what or script.name
        refusals = [r for r in replies if isinstance(r, RedisError) and scripts_refused(r)]
        if refusals:
            raise self.protocol.refused_everywhere(
                refusals[0], what, "Redlock's tokens are raised on a majority by one"
            )
        return [translate_error(r, what) if isinstance(r, RedisError) else r for r in replies]

    def try_acquire(
        self,
        spec: LeaseSpec,
        holder: str,
        depth: int = 0,
        block: int = 1,
        waiter: str = "",
        *,
        deadline: float | None = None,
    ) -> Granted | Busy:
        """Ask every node at once; a majority within the validity grants. A round in which too
        few nodes could be reached to decide is no vote: it is sent once more while the caller's
        ``deadline`` has time left."""
        if not self.protocol.server_checked:
            self._check_servers()
        script = spec.kind.acquire_script
        args = spec.acquire_args(holder, depth, block, waiter, self.publish_command)
        timeout = self.node_timeout(spec.ttl)
        for attempt in range(1, ATTEMPTS + 1):
            sent_at = time.monotonic()
            replies = self.fan_out_script(script, spec.acquire_keys, args, timeout, spec.what)
            sync_checkpoint()
            try:
                outcome = acquire_outcome(replies, spec.ttl, time.monotonic() - sent_at)
                break
            except LockConnectionError:
                if attempt == ATTEMPTS or (deadline is not None and time.monotonic() >= deadline):
                    raise
        result = outcome.result
        if isinstance(result, Granted) and depth == 0 and not SYNC_LAZY_TOKEN:
            # asyncio cannot do the write-back later, inside the ``token`` property
            try:
                confirmed = self.confirm(spec, holder, result.fence)
            except LockConnectionError:
                confirmed = False
            # not confirmed: given back below, so a re-try may well succeed at once (a pttl
            # unknown would make a waiter wait a whole ttl for its fallback re-try)
            result = Granted(result.fence) if confirmed else Busy(0.0)
        if isinstance(result, Busy):
            if depth == 0 and outcome.touched:
                # some nodes may have granted (or still will): give it back on all of them
                sync_shield(self.give_back(spec, holder))
            return result
        return Granted(result.fence, result.confirmed, sent_at=sent_at)  # the lease: this round

    def _check_servers(self) -> None:
        """Once per client, before its first grant: can any node evict lock keys?"""
        self.protocol.server_checked = True
        replies = self.fan_out(("INFO", "memory"), self.request_timeout, "")
        for node, reply in zip(self.nodes, replies, strict=True):
            warn_of_hazards(reply, f"Redlock node {server_address(node)}")

    def release(
        self, spec: LeaseSpec, holder: str, leaving: str = "", timeout: float | None = None
    ) -> Released:
        """Release on every node (each within the node timeout, whatever ``timeout``). A round
        in which too few nodes answered to decide is sent once more, as an acquire's is: with
        a node timeout of a few ms, a moment's stall of this process is no outage."""
        script = spec.kind.release_script
        args = spec.release_args(holder, leaving, self.publish_command)
        timeout, what = self.node_timeout(spec.ttl), f"release of {spec.what}"
        replies = self.fan_out_script(script, spec.release_keys, args, timeout, what)
        try:
            owned = owned_by_quorum(replies, HELD, what)
        except LockConnectionError:  # undecided: once more
            again = self.fan_out_script(script, spec.release_keys, args, timeout, what)
            owned = owned_by_quorum(first_answers(replies, again), HELD, what)
        return Released.RELEASED if owned else Released.NOT_HELD

    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> list[int | LockError]:
        """Per lease: renewed by a majority in time (``RENEWED``), refused by enough nodes that
        no majority can hold it (``GONE``: whether another holder has a majority is not told),
        or unknown (the ``LockConnectionError`` saying why)."""
        timeout = min(timeout, *(self.node_timeout(ttl) for ttl in ttls))
        keys = renew_keys([spec.keys.lock for spec in specs])
        args = [arg for pair in zip(holders, map(ttl_to_ms, ttls), strict=True) for arg in pair]
        sent_at = time.monotonic()
        replies = self.fan_out_script(RENEW, keys, args, timeout, what)
        elapsed = time.monotonic() - sent_at
        held: list[int | LockError] = []
        for ttl, answers in zip(ttls, renew_answers(replies, len(specs)), strict=True):
            try:
                ok = tally(answers).outcome(len(replies), what)
            except LockConnectionError as exc:
                held.append(exc)
                continue
            if ok and validity(ttl, elapsed) <= 0:
                held.append(LockConnectionError(f"{what}: the nodes answered too late"))
            else:
                held.append(RENEWED if ok else GONE)
        return held

    def held(self, spec: LeaseSpec, holder: str) -> bool:
        kind = spec.kind
        [command] = kind.held_commands(spec.keys, holder)
        replies = self.fan_out(command, self.node_timeout(spec.ttl), spec.what)
        answers: list[bool | BaseException] = []
        for r in replies:
            if not isinstance(r, BaseException):
                answers.append(kind.held_reply([r], holder))
            else:  # WRONGTYPE: a lock of the other kind holds the name on that node, not ours
                answers.append(False if "WRONGTYPE" in str(r) else r)
        return tally(answers).outcome(len(replies), f"held {spec.what}")

    def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy:
        raise AssertionError("Redlock grants need a majority: no local hand-off")

    def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool:
        """Raise a majority's counters to ``fence`` (see fence_raise.lua). False when a majority
        no longer holds the grant; LockConnectionError when unknown."""
        replies = self.fan_out_script(
            FENCE_RAISE, spec.acquire_keys[:2], (holder, fence), self.node_timeout(spec.ttl)
        )
        return owned_by_quorum(replies, (1,), f"token of {spec.what}")

    @contextmanager
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> Iterator[Watch]:
        """Subscribe on every node: a release message from any of them wakes the waiter."""
        self._loop.check()
        watch = Watch()
        with contextlib.ExitStack() as stack:
            for waiter in self.waiters.values():
                # a node that is down is skipped: the others, or the fallback re-try, wake us
                with contextlib.suppress(LockConnectionError):
                    stack.enter_context(waiter.watch(channel, what, watch, timeout))
            yield watch

    def supports(self, kind: Kind) -> bool:
        return kind.on_quorum

    @property
    def read_timeout(self) -> float:
        # a node's own timeout: a node down must not hold up the majority's answer
        return self.node_timeout(MAX_TTL)

    def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        return self.fan_out_script(script, keys, args, self.read_timeout, what)

    def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        replies = self.run_all(INSPECT, keys, (listed,), what, read=True)
        return majority_view([r if isinstance(r, LockError) else inspect_reply(r) for r in replies])

    def publish(self, channel: str, message: str) -> None:
        self.fan_out((self.publish_command, channel, message), self.read_timeout, channel)

    def scan(self, match: str, count: int) -> Iterator[bytes]:
        answered = 0
        failure: LockError | None = None
        for node in self.nodes:
            try:
                for key in scan_node(self.requester, node, match, count, self.read_timeout):
                    yield key
                answered += 1
            except LockError as exc:
                failure = exc
        # a lock is held on a majority: with fewer nodes silent than a majority, one of its
        # nodes answered; with more, the listing could miss some
        if failure is not None and len(self.nodes) - answered >= quorum(len(self.nodes)):
            raise failure

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        raise TypeError(f"{what}: Redlock mode has no one server to run it on")
