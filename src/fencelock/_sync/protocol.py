# GENERATED from src/fencelock/_async/protocol.py by tools/gen_sync.py: edit that file instead.
"""The protocol: what a client sends for a kind's request, one per client, and the only place
that knows the script mode (docs/modes.md, "Without scripts").

* scripts, or, where none runs (``scripts="never"``, or a server that refused one: the client
  made with ``scripts="auto"`` switches once, and says so), the native commands of the kind that
  stands in (``Kind.without_scripts``; one server only), else ``ScriptsRequired``; a native
  request that finds its holder's grant stored by a script ('holder token') is sent again with
  that value, within the same bound (``request_natively``);
* WAIT for ``min_replicas`` after every write, on the write's own connection;
* the server check before the first grant: which native commands the server has (``HELLO``)
  and whether it may evict lock keys (``INFO memory``: ``_core/hazards.py``'s rules);
* waiting by re-trying where subscribing is refused to a client that runs no scripts.

NOSCRIPT (a restart, SCRIPT FLUSH: nothing ran) is answered by the script's EVAL, which every
request made here carries (``noscript``). The decisions are ``_core/natives.py``'s; the I/O
goes through the one server it is given (``AsyncEndpoint``), never around it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Callable, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from redis.exceptions import NoPermissionError, NoScriptError, RedisError

from .._core.hazards import memory, per_node
from .._core.kinds import Command, Kind, LeaseSpec, raised
from .._core.natives import ScriptMode, ServerCommands, left_without_scripts, scripts_refused
from .._core.replies import check_replicated, translate_error
from .._keys import ttl_to_ms
from .._scripts import Script
from ..errors import LockError, ScriptsRequired
from .waiter import Watch

server_logger = logging.getLogger("fencelock.server")
waiter_logger = logging.getLogger("fencelock.waiter")

# what one server is asked once per client, before its first grant: its native commands, and
# whether it may evict lock keys (a Cluster's nodes may run different versions: no HELLO there)
ONE_SERVER_CHECK: tuple[Command, ...] = (("HELLO",), ("INFO", "memory"))
CLUSTER_CHECK: tuple[Command, ...] = (("INFO", "memory"),)


class SyncEndpoint(Protocol):
    """Where a protocol's requests go: the one server of a key (on a Cluster: the node of
    ``key``), or every node of a Redlock quorum."""

    @property
    def address(self) -> str: ...

    @property
    def addresses(self) -> list[str]:
        """Every node's, in the order of ``send_all``'s replies."""
        ...

    def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        """``command`` to every node at once (``only``: to these of them): per node its reply
        or the ``RedisError`` it failed with (silent for ``timeout`` seconds: timed out)."""
        ...

    def send(
        self,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]: ...


def warn_of_hazards(info: object, where: str) -> None:
    """Warn of what a server's ``INFO memory`` shows threatening the locks (eviction, a server
    nearly full): ``fencelock doctor``'s rules (_core/hazards.py), once per client. (INFO, not
    CONFIG GET: managed servers refuse CONFIG, and it would show an ACL user passwords.)"""
    if isinstance(info, Exception):  # refused (an ACL without +info), or down
        server_logger.debug("fencelock: %s: cannot read its memory settings: %s", where, info)
        return
    for node, reply in per_node(info):
        at = node or where
        for finding in memory(reply, at):
            server_logger.warning("fencelock: %s: %s", at, finding.line(), extra={"server": at})


class SyncProtocol:
    """A client's way of speaking to its servers (see the module's docstring). ``server``: where
    the requests go; ``one_server``: one plain server (the only place the script-free mode
    serves: not a Cluster, not Redlock); ``mode``: shared with the asyncio client's
    renewal twin (``_offloop.py``), so that what one learns the other knows; ``quorum``: the
    requests go to every Redlock node, and a majority decides."""

    def __init__(
        self,
        server: SyncEndpoint,
        mode: ScriptMode,
        request_timeout: float,
        *,
        one_server: bool = True,
        quorum: bool = False,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        self.server = server
        self.mode = mode
        self.request_timeout = request_timeout  # the server check's bound
        self.one_server = one_server
        self.quorum = quorum
        self.min_replicas = min_replicas
        self.replica_timeout = replica_timeout
        self.first_requests = ONE_SERVER_CHECK if one_server else CLUSTER_CHECK
        # after every write: one script cannot wait for replicas
        self.wait: tuple[Command, ...] = (
            (("WAIT", min_replicas, ttl_to_ms(replica_timeout)),) if min_replicas else ()
        )
        # whether the server was checked (once per client, at the first acquire)
        self.server_checked = False
        self.polls = False  # waiters re-try instead of listening: subscribing was refused

    # -- the script mode ------------------------------------------------------------------

    @property
    def runs_scripts(self) -> bool:
        return not self.mode.no_scripts

    @property
    def switches(self) -> bool:
        """Whether a server's refusal of a script switches this client to native commands
        (made with scripts="auto")."""
        return self.mode.auto

    @property
    def commands(self) -> ServerCommands:
        """How requests are spelled on the server: the native commands it has."""
        return self.mode.commands

    def running(self, kind: Kind) -> Kind:
        """The kind whose requests this client sends for grants of ``kind``: ``kind``, or, in a
        client that runs no scripts, the kind that stands in for it (if none can, ``kind``,
        whose requests are then refused)."""
        if not self.mode.no_scripts:
            return kind
        return kind.without_scripts() or kind

    def scripts_required(self, what: str, why: str = "") -> ScriptsRequired:
        """The error of ``what``, which needs scripts (``why``: what they do for it)."""
        because = f": {why}" if why else ""
        return ScriptsRequired(
            f"{what} needs Lua scripts{because}. This client runs none: "
            f"{self.mode.no_scripts} (docs/modes.md, 'Without scripts')"
        )

    def require_scripts(self, what: str, why: str) -> None:
        """``ScriptsRequired`` (of ``what``, because ``why``) when this client runs no
        scripts (docs/modes.md)."""
        if self.mode.no_scripts:
            raise self.scripts_required(what, why)

    def require_kind(self, kind: Kind, what: str) -> None:
        """``ScriptsRequired`` of ``what`` when this client runs no scripts and no kind stands
        in for ``kind``."""
        if self.mode.no_scripts and kind.without_scripts() is None:
            raise self.scripts_required(what, kind.why_scripts)

    def refused_everywhere(self, error: BaseException, what: str, why: str) -> ScriptsRequired:
        """Redlock's nodes refuse scripts (``error``): no grant can be made there, nor from
        now on; the ``ScriptsRequired`` of ``what`` (because ``why``)."""
        self.mode.no_scripts = f"the Redlock nodes refuse them ({error})"
        return self.scripts_required(what, why)

    # -- requests ------------------------------------------------------------------------------

    def request_all(
        self,
        commands: list[Command],
        noscript: Command | None,
        timeout: float,
        what: str,
        only: Sequence[int] = (),
    ) -> list[list[Any] | LockError]:
        """``commands`` (one command: each kind's request on a quorum is one) on every node at
        once (``only``: on these of them), each within ``timeout`` seconds: per node its
        replies, or the ``LockError`` of ``what`` it failed with (caused by the node's error: a
        ``NoReply`` says the node may still run it, ``replies.unanswered``). Nodes that answer
        NOSCRIPT (restarted, or SCRIPT FLUSH) get ``noscript`` in a second, smaller round;
        nodes that refuse scripts make this client run none (``ScriptsRequired``: Redlock's
        tokens are raised on a majority by one)."""
        [command] = commands
        server = self.server
        replies = server.send_all(command, timeout, only)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing and noscript is not None:
            nodes = [only[i] for i in missing] if only else missing
            again = server.send_all(noscript, timeout, nodes)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        refusals = [r for r in replies if isinstance(r, RedisError) and scripts_refused(r)]
        if refusals:
            raise self.refused_everywhere(
                refusals[0], what, "Redlock's tokens are raised on a majority by one"
            )
        return [_failed(r, what) if isinstance(r, RedisError) else [r] for r in replies]

    def check_servers(self, key: str) -> None:
        """Once per client, before its first grant: the server check (``check_server``), of
        the one server, or of every Redlock node (can any evict lock keys?)."""
        if not self.quorum:
            self.check_server(key)
            return
        self.server_checked = True
        server = self.server
        replies = server.send_all(("INFO", "memory"), self.request_timeout)
        for where, reply in zip(server.addresses, replies, strict=True):
            warn_of_hazards(reply, f"Redlock node {where}")

    def request(
        self, commands: list[Command], noscript: Command | None, timeout: float, key: str
    ) -> tuple[list[Any], int | None]:
        """Send ``commands`` (then WAIT for the replicas, on the same connection: WAIT counts
        the writes of its own connection) within ``timeout`` seconds: their replies (error
        replies as values), and how many replicas acknowledged them (None without
        ``min_replicas``; an error reply to WAIT is raised)."""
        wait = self.wait
        replies = self.server.send(
            [*commands, *wait] if wait else commands, timeout, key, noscript
        )
        return replies, int(raised(replies.pop())) if wait else None

    def script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        timeout: float,
        what: str,
        *,
        read: bool = False,
    ) -> tuple[Any, int | None]:
        """Run ``script`` within ``timeout`` seconds: its reply (an error reply raised), and how
        many replicas acknowledged it (None without ``min_replicas``, and for a ``read``: a
        read has nothing for replicas to acknowledge, and with none attached a WAIT would hold
        it for the whole replica timeout). ``ScriptsRequired`` where no script runs."""
        if self.mode.no_scripts:
            raise self.scripts_required(what)
        commands, noscript = [script.evalsha(keys, args)], script.eval(keys, args)
        try:
            if read:
                [reply] = self.server.send(commands, timeout, keys[0], noscript)
                return raised(reply), None
            replies, acked = self.request(commands, noscript, timeout, keys[0])
            return raised(replies[0]), acked
        except RedisError as exc:
            if self.refused(exc, keys[0]):
                raise self.scripts_required(what) from exc
            raise

    def check_server(self, key: str) -> None:
        """Once per client, before its first grant: which native commands has the server
        (``HELLO``: any user may send it), and can it evict lock keys? (On a Cluster, its
        default node answers.) A failure here is the acquire's to report."""
        self.server_checked = True
        server = self.server
        mode, where = self.mode, server.address
        try:
            *hello, info = server.send(list(self.first_requests), self.request_timeout, key)
        except RedisError as exc:
            server_logger.debug("fencelock: %s: cannot tell what the server is: %s", where, exc)
            return
        if hello:
            if isinstance(hello[0], Exception):  # (a server, or a proxy, without HELLO)
                server_logger.debug("fencelock: %s: HELLO refused: %s", where, hello[0])
            else:
                mode.commands = mode.commands.detected(hello[0])
        mode.detected = True
        warn_of_hazards(info, where)

    def refused(self, error: BaseException, key: str) -> bool:
        """Whether ``error`` is the server refusing a script (nothing ran). A client made with
        scripts="auto" runs none from then on, and says once what it can still do there (what
        the server has natively: asked now if it was not yet; ``key``: a key of the call)."""
        if not scripts_refused(error):
            return False
        mode, where = self.mode, self.server.address
        if mode.auto and not mode.no_scripts:
            mode.no_scripts = f"{where} refuses them ({error})"
            if not mode.detected and self.one_server:
                self.check_server(key)
            left = left_without_scripts(mode.commands, self.one_server)
            server_logger.warning(
                "fencelock: %s refuses Lua scripts (%s): this client runs none from now on, and "
                "can take %s (docs/modes.md, 'Without scripts')",
                where,
                error,
                left,
                extra={"event": "scripts_refused", "server": where},
            )
        return True

    def kind_of(self, spec: LeaseSpec) -> Kind:
        """The kind whose requests are sent for ``spec``'s grant: its own while scripts run,
        else the one that stands in (``stand_in``)."""
        if not self.mode.no_scripts:
            return spec.kind
        return self.stand_in(spec)

    def stand_in(self, spec: LeaseSpec) -> Kind:
        """The kind that stands in for ``spec``'s where this client runs no scripts; the
        ``ScriptsRequired`` of ``spec`` if there is none, or if the server has not the native
        commands it needs (a release without a compare-and-delete could delete another holder's
        lock)."""
        kind = spec.kind.without_scripts()
        if kind is None:
            raise self.scripts_required(spec.what, spec.kind.why_scripts)
        if not self.one_server:  # (a Cluster)
            raise self.scripts_required(f"{spec.what} on a Cluster", "the mode is for one server")
        if not self.mode.detected:
            self.check_server(spec.keys.lock)
        commands = self.mode.commands
        if not commands.script_free:
            raise self.scripts_required(
                f"{spec.what} on this server",
                f"{commands.server or 'it'} lacks {commands.lacking()}, and without them a "
                "release could delete another holder's lock",
            )
        return kind

    def request_natively(
        self,
        asks: Sequence[tuple[Kind, str]],
        made: Callable[[int, str], list[Command]],
        timeout: float,
        key: str,
    ) -> tuple[list[list[Any]], int | None]:
        """The native commands ``made(i, holder)`` of each ask (a kind's grant to ``holder``),
        in one request, then WAIT (``request``), the whole within ``timeout`` seconds: per ask
        its replies, and how many replicas acknowledged (the fewest of the sends). An ask whose
        replies show its holder's grant stored with another value (``Kind.held_as``: a grant a
        script made before this client turned script-free, 'holder token') is sent again with
        that value for the holder token, once, in what is left of the same bound."""
        end = time.monotonic() + timeout
        answers: list[list[Any]] = [[]] * len(asks)
        acked: int | None = None
        sending = [(i, holder) for i, (_, holder) in enumerate(asks)]
        # (loops, not comprehensions: this is every native acquire's and release's path)
        for again in (False, True):
            commands: list[Command] = []
            sizes: list[int] = []
            for i, holder in sending:
                request = made(i, holder)
                commands += request
                sizes.append(len(request))
            left = end - time.monotonic() if again else timeout
            replies, acks = self.request(commands, None, left, key)
            if acks is not None:
                acked = acks if acked is None else min(acked, acks)
            stored: list[tuple[int, str]] = []
            at = 0
            for (i, holder), size in zip(sending, sizes, strict=True):
                answers[i] = answer = replies[at : at + size]
                at += size
                value = None if again else asks[i][0].held_as(answer, holder)
                if value is not None:
                    stored.append((i, value))
            if not stored:
                break
            sending = stored
        return answers, acked

    def renew_natively(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls_ms: Sequence[int],
        timeout: float,
        what: str,
    ) -> list[int | LockError]:
        """The renewal of each lease by its kind's native commands, in one request (sent again
        for the leases stored as 'holder token': ``request_natively``), where this client runs
        no scripts; a lease of a kind that has none gets its ``ScriptsRequired``."""
        kinds = [self.running(spec.kind) for spec in specs]
        spelled = self.mode.commands

        def made(i: int, holder: str) -> list[Command]:
            return kinds[i].renew_request(specs[i], holder, ttls_ms[i], spelled) or []

        native = [i for i in range(len(specs)) if made(i, holders[i])]
        try:
            answers, acked = self.request_natively(
                [(kinds[i], holders[i]) for i in native],
                lambda n, holder: made(native[n], holder),
                timeout,
                specs[0].keys.lock,
            )
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        check_replicated(acked, self.min_replicas, what)
        replies_of = dict(zip(native, answers, strict=True))
        held: list[int | LockError] = []
        for i, (kind, spec, holder) in enumerate(zip(kinds, specs, holders, strict=True)):
            if i not in replies_of:
                held.append(self.scripts_required(spec.what, spec.kind.why_scripts))
                continue
            try:
                held.append(kind.renew_result(replies_of[i], holder))
            except RedisError as exc:
                held.append(translate_error(exc, what))
        return held

    def watch(
        self, subscribed: contextlib.AbstractContextManager[Watch]
    ) -> contextlib.AbstractContextManager[Watch]:
        """The watch ``subscribed`` gives, or, once subscribing was refused to a client that
        runs no scripts, a watch never set: its waiters re-try (at the end of the holder's
        lease, or every ``max_poll``). (Where scripts run, a refusal is an error: nothing
        to wrap.)"""
        if self.polls or self.mode.no_scripts:
            return self._watch_or_poll(subscribed)
        return subscribed

    @contextmanager
    def _watch_or_poll(
        self, subscribed: contextlib.AbstractContextManager[Watch]
    ) -> Iterator[Watch]:
        if self.polls:
            yield Watch()
            return
        with contextlib.ExitStack() as stack:
            try:
                watch = stack.enter_context(subscribed)
            except LockError as exc:
                if not self.mode.no_scripts or not isinstance(exc.__cause__, NoPermissionError):
                    raise
                self.polls = True
                waiter_logger.warning(
                    "fencelock: %s: subscribing is refused (%s): waiters re-try at the end of "
                    "the holder's lease, or every max_poll",
                    self.server.address,
                    exc,
                    extra={"event": "subscribe_refused"},
                )
                watch = Watch()
            yield watch


def _failed(error: RedisError, what: str) -> LockError:
    """A node's failure as the ``LockError`` of ``what``, caused by it (a ``NoReply`` says that
    the node may still run the request: ``replies.unanswered``)."""
    failure = translate_error(error, what)
    failure.__cause__ = error
    return failure
