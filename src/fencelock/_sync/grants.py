# GENERATED from src/fencelock/_async/grants.py by tools/gen_sync.py: edit that file instead.
"""Grants: the engine's questions (try to acquire, release, renew a batch, is it held, hand
off, confirm a token, give back), written once over a one-or-majority decision.

Each question is the same shape wherever the keys live: the protocol says what is sent for the
grant's kind (``protocol.py``: scripts or native commands, WAIT, the switch on refusal), it goes
to the one server of the name or to every Redlock node, and the answers are decided by
``_core/quorum.py``: one server is a majority of one (its answer is the answer; its failure is
raised), a Redlock quorum decides by a majority of its nodes (an undecided round is sent once
more). What differs is only what one server can do that a majority cannot: a fencing counter of
its own (no confirmation), WAIT for replicas, a local hand-off.

A request that timed out, or whose connection broke (a Sentinel failover closes every client
connection), is sent once more, in the time left: with the same holder token it cannot count
twice (acquire.lua). A grant that came back after its lease is given back (``GaveBack``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any, Final

from redis.exceptions import ConnectionError, RedisError, TimeoutError

from .._backend import (
    SYNC_LAZY_TOKEN,
    SyncDetached,
    sync_checkpoint,
    sync_shield,
    sync_wait_done,
)
from .._core.kinds import Kind, LeaseSpec, Released, per_grant, raised, renewal
from .._core.lease import arrived_late, time_left
from .._core.quorum import (
    FIRST_LEAD_US,
    acquire_outcome,
    decided,
    owned_by_quorum,
    proposal_lead,
    proposed_token,
    released,
    renew_outcome,
    two_rounds,
)
from .._core.replies import (
    Busy,
    Granted,
    NoReply,
    check_replicated,
    renew_reply,
    reserved_block,
    translate_error,
    unanswered,
)
from .._keys import ttl_to_ms
from .._scripts import FENCE_RAISE, RENEW
from ..errors import LockConnectionError, LockError, ScriptsRequired
from .protocol import SyncProtocol
from .routes import SyncRoute

ATTEMPTS: Final = 2


class GaveBack(Exception):
    """A grant came back after its lease and was given back. Its holder token must not be used
    again: the give-back (or a copy redis-py re-sent) may reach the server later still, and it
    would delete a grant made later to the same token."""


class SyncGrants:
    """The engine's questions for one client (see the module's docstring), over its
    ``route`` (one server's: a request sent to the server of its key; a Redlock quorum's:
    every request to every node, through the protocol, and a majority decides)."""

    def __init__(self, protocol: SyncProtocol, route: SyncRoute) -> None:
        self.protocol = protocol
        self._route = route
        self.request_timeout = route.request_timeout
        # whether a majority of several servers decides
        self.majority = route.traits.majority
        # the servers a late give-back must reach, each on its own (``release_at``): Redlock's
        # nodes; elsewhere one, the server of the name's keys
        self.node_count = len(route.addresses) if self.majority else 1
        self._bound = route.node_timeout  # one request's bound about a grant of a ttl
        self._lead = FIRST_LEAD_US  # Redlock: the next proposed token's lead (proposal_lead)
        # give-backs left to finish when their caller was cancelled (finished by close(), or
        # as the loop shuts down)
        self.detached = SyncDetached(route.request_timeout)

    def time_left(self, deadline: float | None) -> float:
        return time_left(deadline, self.request_timeout, time.monotonic())

    def _ask(
        self, commands: list[Any], noscript: Any, timeout: float, key: str, what: str
    ) -> list[list[Any] | LockError]:
        """Per server, the replies to ``commands`` (one server: its failure raised, and WAIT
        for the replicas sent after them; a quorum: a node's failure as its answer)."""
        if self.majority:
            return self.protocol.request_all(commands, noscript, timeout, what)
        replies, _ = self.protocol.request(commands, noscript, timeout, key)
        return [replies]

    # -- acquire ------------------------------------------------------------------------------

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
        """One try at the grant, ended by the caller's ``deadline`` (None: none) plus one
        request timeout however often the servers fail to answer. ``GaveBack`` when the grant
        came too late to be used; a ``LockConnectionError`` caused by ``NoReply`` when a request
        got no reply (it may still grant: ``replies.unanswered``)."""
        protocol = self.protocol
        if not protocol.server_checked:
            protocol.check_servers(spec.keys.lock)
        kind = spec.kind if protocol.runs_scripts else protocol.stand_in(spec)
        spelled = protocol.commands
        if self.majority:
            # the token proposed, where the lock key holds it: a majority that grants it needs
            # no write-back (quorum.proposed_token)
            proposal = proposed_token(time.time_ns(), self._lead) if kind.token_in_key else 0
            request = kind.acquire_request(spec, holder, depth, block, waiter, spelled, proposal)
            return self._acquire_by_majority(spec, kind, holder, depth, request, deadline)
        # (the scripts' request: a native one is made at each send, ``request_natively``)
        commands, noscript = (
            kind.acquire_request(spec, holder, depth, block, waiter, spelled)
            if kind is spec.kind
            else ([], None)
        )
        send, key, wait = self._route.send, spec.acquire_keys[0], protocol.wait
        attempt, first = 1, None
        no_reply: NoReply | None = None  # an attempt sent that got no reply: it may still grant
        while True:
            sent_at = time.monotonic()
            try:
                if kind is spec.kind:
                    # (the request sent from here: the hot path of every acquire stays short)
                    sent = [*commands, *wait] if wait else commands
                    replies = send(sent, self.time_left(deadline), key, noscript)
                    acked = int(raised(replies.pop())) if wait else None
                else:  # native commands: a grant a script made to this holder is found too

                    def made(_: int, h: str, native: Kind = kind) -> list[Any]:
                        server = protocol.commands  # (learnt at the switch, if not before)
                        return native.acquire_request(spec, h, depth, block, waiter, server)[0]

                    [replies], acked = protocol.request_natively(
                        [(kind, holder)], made, self.time_left(deadline), key
                    )
                result = kind.acquire_result(replies)
            except (TimeoutError, ConnectionError) as exc:
                if isinstance(exc, NoReply):
                    no_reply = exc
                if attempt < ATTEMPTS and self.time_left(deadline) > 0:
                    attempt, first = attempt + 1, exc
                    continue
                # the cause: a NoReply if any attempt got none (it may still grant)
                raise translate_error(reported(first, exc), spec.what) from no_reply or exc
            except RedisError as exc:
                if not protocol.refused(exc, key):
                    raise translate_error(exc, spec.what) from exc
                # Nothing ran: again, without scripts. An attempt that got no reply was read
                # before this refused one, sent after it: what it granted by a script is in the
                # key, and the native request finds it and holds it (``request_natively``).
                kind = protocol.stand_in(spec)
                continue
            sync_checkpoint()
            if isinstance(result, Busy):
                return result
            check_replicated(acked, protocol.min_replicas, f"grant of {spec.what}")
            if depth == 0 and arrived_late(sent_at, spec.ttl, time.monotonic()):
                sync_shield(self.give_back(spec, holder, deadline))
                raise GaveBack
            granted = reserved_block(result.fence, block)
            return Granted(
                granted.fence,
                reserved=granted.reserved,
                sent_at=sent_at,
                more_fences=result.more_fences,
            )

    def _acquire_by_majority(
        self,
        spec: LeaseSpec,
        kind: Kind,
        holder: str,
        depth: int,
        request: tuple[list[Any], Any],
        deadline: float | None,
    ) -> Granted | Busy:
        """Ask every node at once; a majority within the validity grants. A round in which too
        few nodes could be reached to decide is no vote: it is sent once more while the
        caller's ``deadline`` has time left."""
        timeout = self._bound(spec.ttl)
        no_reply: BaseException | None = None  # a node was sent a request and did not answer
        for attempt in range(1, ATTEMPTS + 1):
            sent_at = time.monotonic()
            answers = self.protocol.request_all(*request, timeout, spec.what)
            self._lead = proposal_lead(time.monotonic() - sent_at)
            results = [a if isinstance(a, LockError) else _acquired(kind, a) for a in answers]
            sync_checkpoint()
            try:
                outcome = acquire_outcome(results, spec.ttl, time.monotonic() - sent_at)
                break
            except LockConnectionError as exc:
                silent = [a for a in answers if isinstance(a, LockError) and unanswered(a)]
                no_reply = silent[0].__cause__ if silent else no_reply
                if attempt == ATTEMPTS or (deadline is not None and time.monotonic() >= deadline):
                    # (the nodes that did not answer may still grant: replies.unanswered)
                    raise exc from no_reply
        result = outcome.result
        if (
            isinstance(result, Granted)
            and depth == 0
            and not (result.confirmed or SYNC_LAZY_TOKEN)
        ):
            # the majority's tokens differ (the sync API writes the largest back at the first
            # read of ``lock.token``: ASYNC_LAZY_TOKEN); asyncio cannot do it later, inside the
            # ``token`` property
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

    def confirm(self, spec: LeaseSpec, holder: str, fence: int) -> bool:
        """Raise the grant's token to ``fence`` on a majority (fence_raise.lua). False when a
        majority no longer holds the grant; LockConnectionError when unknown. (One server's
        tokens need no confirmation: that server made them.)"""
        assert self.majority, "one server's tokens need no confirmation"
        keys, args = spec.acquire_keys[:2], (holder, fence)
        answers = self.protocol.request_all(
            [FENCE_RAISE.evalsha(keys, args)],
            FENCE_RAISE.eval(keys, args),
            self._bound(spec.ttl),
            f"token of {spec.what}",
        )
        replies = [a if isinstance(a, LockError) else a[0] for a in answers]
        return owned_by_quorum(replies, (1,), f"token of {spec.what}")

    # -- release, hand-off, give-back ---------------------------------------------------------

    def release(
        self,
        spec: LeaseSpec,
        holder: str,
        leaving: str = "",
        timeout: float | None = None,
        *,
        depth: int = 1,
        held_until: float | None = None,
    ) -> Released:
        """Release ``holder``'s grant (``leaving``: a queue entry removed first, a simple lock's
        waiter giving up), within ``timeout`` seconds (default: one request timeout; on a
        quorum, each node within its own timeout). A quorum's round in which too few nodes
        answered to decide is sent once more, as an acquire's is: with a node timeout of a few
        ms, a moment's stall of this process is no outage. A node that did not answer the
        first round may have applied it: a reentrant release carries ``depth``, the holds
        before it, so that the second round does not leave a hold twice, and a "not held" to
        the second counts as released if the first went out before ``held_until``, the lease's
        local deadline, if known (``_core/quorum.two_rounds`` says why; one server's answer is
        final, whatever ``held_until``)."""
        protocol = self.protocol
        kind = protocol.kind_of(spec)
        key = spec.release_keys[0]
        what = f"release of {spec.what}" if self.majority else spec.what
        bound = self._bound(spec.ttl) if self.majority or timeout is None else timeout
        try:
            sent_at = time.monotonic()
            if kind is not spec.kind:  # native commands (one server)
                spelled = protocol.commands
                [replies], _ = protocol.request_natively(
                    [(kind, holder)],
                    lambda _, h: kind.release_request(spec, h, leaving, spelled, depth)[0],
                    bound,
                    key,
                )
                return released([_released(kind, replies)], what)
            commands, noscript = kind.release_request(
                spec, holder, leaving, protocol.commands, depth
            )
            answers = self._ask(commands, noscript, bound, key, what)
            results = [_released(kind, a) for a in answers]
            try:
                return released(results, what)
            except LockConnectionError:
                if not self.majority:
                    raise
            answers = self._ask(commands, noscript, bound, key, what)  # undecided: again
            again = [_released(kind, a) for a in answers]
            in_lease = held_until is not None and sent_at < held_until
            return released(two_rounds(results, again, in_lease), what)
        except RedisError as exc:
            if protocol.refused(exc, key):  # nothing ran: again
                return self.release(
                    spec, holder, leaving, timeout, depth=depth, held_until=held_until
                )
            raise translate_error(exc, spec.what) from exc

    def release_at(self, spec: LeaseSpec, holder: str, node: int, timeout: float) -> Released:
        """Release ``holder``'s grant on server ``node`` only (< ``node_count``), within
        ``timeout`` seconds: one try of a late give-back (``giveback.py``)."""
        if not self.majority:
            return self.release(spec, holder, timeout=timeout)
        kind = spec.kind  # (scripts: a Redlock client runs no other)
        # depth 1: each try leaves one hold (a reentrant grant answers "still held" until its
        # last), which a give-back repeats until none is left
        commands, noscript = kind.release_request(spec, holder, "", self.protocol.commands, 1)
        what = f"release of {spec.what}"
        [answer] = self.protocol.request_all(commands, noscript, timeout, what, [node])
        reply = _released(kind, answer)
        if isinstance(reply, LockError):
            raise reply
        return reply

    def hand_off(
        self, spec: LeaseSpec, holder: str, ttl_ms: int, block: int
    ) -> Granted | Busy:
        """One request: the lease of ``holder``'s grant restarts at ``ttl_ms`` and a block of
        fencing tokens is reserved for a streak of local hand-offs (one server only: a grant
        on a quorum needs its majority)."""
        assert not self.majority, "Redlock grants need a majority: no local hand-off"
        protocol = self.protocol
        kind = protocol.kind_of(spec)
        spelled, key, timeout = protocol.commands, spec.acquire_keys[0], self.request_timeout
        try:
            if kind is not spec.kind:  # native commands
                [replies], _ = protocol.request_natively(
                    [(kind, holder)],
                    lambda _, h: kind.handoff_request(spec, h, ttl_ms, block, spelled)[0],
                    timeout,
                    key,
                )
            else:
                commands, noscript = kind.handoff_request(spec, holder, ttl_ms, block, spelled)
                replies, _ = protocol.request(commands, noscript, timeout, key)
            return kind.handoff_result(replies)
        except RedisError as exc:
            if protocol.refused(exc, key):  # nothing ran: again
                return self.hand_off(spec, holder, ttl_ms, block)
            raise translate_error(exc, spec.what) from exc

    def give_back(
        self,
        spec: LeaseSpec,
        holder: str,
        deadline: float | None = None,
        after: Awaitable[object] | None = None,
    ) -> bool:
        """Give back what ``holder`` may have been granted, best effort, within what is left of
        the bound of the call whose ``deadline`` it serves (``after``: a request of that call
        still in flight, answered or cut off by its own bound first, so that the give-back
        cannot overtake it). No time left (the server did not answer for all that): not sent,
        and the lease expires on its own."""
        if after is not None:
            sync_wait_done(after)
        try:
            return (self.release(spec, holder, timeout=self.time_left(deadline))).freed
        except (RedisError, LockError):  # unreachable: the lease expires on its own
            return False

    # -- renew, held ---------------------------------------------------------------------------

    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = "the renewal",
    ) -> list[int | LockError]:
        """Renew a batch of leases (each ``specs[i]``'s grant of ``holders[i]``, for
        ``ttls[i]`` seconds): per lease, ``RENEWED``, ``GONE`` or ``TAKEN`` (replies.py), or
        the error that kept it from being renewed. One server: raises when it cannot be
        reached, or the replicas did not acknowledge (a failover could undo the renewal). A
        quorum: per lease, renewed by a majority in time, refused by enough nodes that no
        majority can hold it (``GONE``), or unknown (the ``LockConnectionError`` saying why)."""
        protocol = self.protocol
        ttls_ms = [ttl_to_ms(ttl) for ttl in ttls]
        if self.majority:
            timeout = min(timeout, *(self._bound(ttl) for ttl in ttls))
            keys, args = renewal(specs, holders, ttls_ms)
            sent_at = time.monotonic()
            answers = protocol.request_all(
                [RENEW.evalsha(keys, args)], RENEW.eval(keys, args), timeout, what
            )
            replies = [a if isinstance(a, LockError) else a[0] for a in answers]
            return renew_outcome(replies, ttls, time.monotonic() - sent_at, what)
        if not protocol.runs_scripts:
            return protocol.renew_natively(specs, holders, ttls_ms, timeout, what)
        keys, args = renewal(specs, holders, ttls_ms)
        try:
            reply, acked = protocol.script(RENEW, keys, args, timeout, what)
        except ScriptsRequired:
            if not protocol.switches:
                raise
            return self.renew(specs, holders, ttls, timeout, what)  # (refused just now)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        check_replicated(acked, protocol.min_replicas, what)
        return per_grant(specs, renew_reply(reply, len(keys) // 2))

    def held(self, spec: LeaseSpec, holder: str) -> bool:
        """Whether the servers show ``holder`` holding the grant (a quorum: a majority). A read
        is safe to send again: within one request timeout in all, on one server."""
        kind = spec.kind
        commands = kind.held_commands(spec.keys, holder)
        key, what = spec.keys.lock, spec.what
        if self.majority:
            answers = self.protocol.request_all(commands, None, self._bound(spec.ttl), what)
            return decided([_holds(kind, a, holder) for a in answers], f"held {what}")
        send = self._route.send
        end = time.monotonic() + self.request_timeout
        first = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                replies = send(commands, end - time.monotonic(), key)
            except (TimeoutError, ConnectionError) as exc:
                if attempt < ATTEMPTS and time.monotonic() < end:
                    first = exc
                    continue
                raise translate_error(reported(first, exc), what) from exc
            except RedisError as exc:
                raise translate_error(exc, what) from exc
            answer = _holds(kind, replies, holder)
            if isinstance(answer, RedisError):
                raise translate_error(answer, what) from answer
            return decided([answer], what)
        raise AssertionError("unreachable")


def _acquired(kind: Kind, replies: list[Any]) -> Granted | Busy | LockError:
    try:
        return kind.acquire_result(replies)
    except LockError as exc:  # (LockLost: a node's reentrant hold count is not ours)
        return exc


def _released(kind: Kind, replies: list[Any] | LockError) -> Released | LockError:
    """A server's release, as its kind reads it; a quorum's node's failure or unexpected reply
    as its answer (one server's error reply is raised, to be told from a refusal)."""
    if isinstance(replies, LockError):
        return replies
    try:
        return kind.release_result(replies)
    except ValueError as exc:
        return LockError(str(exc))


def _holds(kind: Kind, replies: list[Any] | LockError, holder: str) -> bool | BaseException:
    """Per server: whether ``holder`` holds the grant there, or why that is not known (a
    WRONGTYPE: a grant of another kind holds the name there now, not ours)."""
    if isinstance(replies, LockError):
        return False if "WRONGTYPE" in str(replies) else replies
    if isinstance(replies[0], RedisError):
        return False if "WRONGTYPE" in str(replies[0]) else replies[0]
    return kind.held_reply(replies, holder)


def reported(first: RedisError | None, last: RedisError) -> RedisError:
    """What to report of a request sent again after ``first`` failed, and failed again with
    ``last``: ``first`` if ``last`` timed out too, which tells nothing new (the re-send is on a
    new connection; the first was on the one in use: "connected, but no reply", not "no answer
    while connecting", of a server that hangs)."""
    return first if first is not None and isinstance(last, TimeoutError) else last
