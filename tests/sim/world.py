"""The simulated world: servers, the network between them and the processes, and the one place
where anything happens next (``World.step``): the deterministic scheduler of issue 25.

Every process runs the real asyncio code on a ``SimLoop`` of its own (``loop.py``), with the
redis-py surface of ``client.py`` in place of redis-py, so every await of the library ends up
waiting for one of three things, all of them the world's to decide:

- a **message**: a request on its way to a server, a reply on its way back, a pub/sub message
  (or a subscribe confirmation, a pong) on its way to a listener. Each is delivered only when the
  scheduler picks it, in any order (requests on one connection, and the messages of one pub/sub
  connection, keep their order: that is TCP);
- **time**: the clock moves only when the scheduler advances it, to the next timer of a process
  (or of the world: a fault's end). Advancing it while messages are in flight delays them;
- **faults** (``FAULTS``), each applied between two steps.

Between two choices every process runs until it can do nothing more at that instant (its own
tasks in asyncio's order), so a choice is one point where the real system could go more than
one way, and a run is fully described by its list of choices: replaying the list replays the
run, step by step. The state digest (``digest``) is what the exhaustive search prunes with.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError

from fencelock import _scripts as scripts

from .loop import T0_US, Clock, SimLoop
from .lua import Lua
from .protocol import Push, Reply
from .server import Entry, Queued, SimServer

# A message is delivered this long after it was sent at the earliest: a round trip takes time,
# and a waiter that re-tries the moment a lease ends finds it ended a moment later.
LATENCY = 0.0001
ALL_SCRIPTS = [s for s in vars(scripts).values() if isinstance(s, scripts.Script)]


# Lua states with the scripts compiled, kept between runs (per set of mutants): a script is a
# pure function of its keys and arguments, and Redis keeps its Lua state between calls too.
_LUA: dict[frozenset[tuple[str, str]], list[Lua]] = {}


class Node:
    """One server: up or down, its wall clock (the world's plus ``offset_us``: a clock jump),
    and the copies a lagging replica would have (``failover``)."""

    def __init__(self, name: str, patches: dict[str, str]) -> None:
        self.name = name
        self.patches = patches  # original script source -> the source run in its place
        self.server = SimServer()
        spare = _LUA.get(frozenset(patches.items()))
        if spare:
            self.server.lua = spare.pop()
        self.up = True
        self.offset_us = 0
        # the keyspace before each of the last script calls, kept where a failover may come
        self.writes: deque[dict[bytes, Entry]] | None = None
        self.preload()

    def preload(self) -> None:
        """Every fencelock script cached, as a server that has served a client a while (a
        restarted one answers NOSCRIPT, and the client sends the source)."""
        for script in ALL_SCRIPTS:
            self.load(script.source)

    def load(self, source: str) -> None:
        lua = self.server.lua
        original = source.encode()
        sha = hashlib.sha1(original).hexdigest()
        if not lua.has(sha):
            patched = self.patches.get(source)
            lua.load(original if patched is None else patched.encode())
            if patched is not None:  # run the mutant under the original's sha
                lua._scripts[sha] = lua._scripts.pop(hashlib.sha1(patched.encode()).hexdigest())

    def recycle(self) -> None:
        """The run is over: its Lua state may serve another."""
        _LUA.setdefault(frozenset(self.patches.items()), []).append(self.server.lua)

    def now_us(self, now: float) -> int:
        """This server's wall clock when the world's clock reads ``now``."""
        return T0_US + round(now * 1_000_000) + self.offset_us

    def execute(self, now: float, conn: Hashable, command: tuple[Any, ...]) -> Reply | Queued:
        server = self.server
        server.now_us = self.now_us(now)
        if conn not in server.connections:  # a new connection: redis-py's handshake (RESP3)
            server.execute(conn, "HELLO", 3)
        name = str(command[0]).upper()
        if name == "EVAL":  # a mutant must run in place of its original, EVAL or EVALSHA
            self.load(command[1])
            command = ("EVALSHA", hashlib.sha1(command[1].encode()).hexdigest(), *command[2:])
        if self.writes is not None and name in ("EVAL", "EVALSHA"):
            self.writes.append(copy.deepcopy(server.keys))
        return server.execute(conn, *command)

    def digest(self, now: float) -> tuple[Any, ...]:
        now_ms = self.now_us(now) // 1000
        keys = []
        for key, entry in sorted(self.server.keys.items()):
            if entry.expires_at is not None and entry.expires_at < now_ms:
                continue
            value = entry.value
            shown = sorted(value.items()) if isinstance(value, dict) else value
            left = None if entry.expires_at is None else entry.expires_at - now_ms
            keys.append((key, repr(shown), left))
        return (self.name, self.up, self.offset_us, tuple(keys))


@dataclass(eq=False)
class Message:
    """Something on the network: a request to a node, a reply to a process, or a pub/sub
    message (``push``) to a process's listener."""

    seq: int
    sent: float
    kind: str  # "request", "reply" or "push"
    process: Process
    node: Node
    conn: Hashable  # the connection, at the server
    payload: Any  # the commands, the replies, or the pushed item
    future: asyncio.Future[Any] | None = None  # who waits for the reply (None: nobody)
    fifo: bool = False  # one of the ordered messages of a pub/sub connection
    request: Any = None  # a reply's: the commands it answers
    answered: bool = False  # a reply delivered while its caller still waited for it

    def describe(self) -> str:
        if self.kind == "request":
            return f"{self.process.name}->{self.node.name} " + "; ".join(
                _short(c) for c in self.payload
            )
        if self.kind == "reply":
            return f"{self.node.name}->{self.process.name} " + _short_reply(self.payload)
        return f"{self.node.name}=>{self.process.name} " + _short_reply(self.payload)


class Listener(Protocol):
    def deliver(self, item: Reply) -> None: ...

    def lost(self) -> None: ...


@dataclass(eq=False)
class Process:
    """A simulated client process: its loop, and whether it is paused, crashed or done."""

    name: str
    loop: SimLoop
    paused_until: float | None = None
    paused_at: float = 0.0
    paused_total: float = 0.0  # the time it spent paused so far
    crashed: bool = False
    done: bool = False
    main: asyncio.Task[Any] | None = None
    state: Callable[[], Any] = lambda: None  # what it holds and does, for the digest

    @property
    def running(self) -> bool:
        return not self.crashed and self.paused_until is None


@dataclass
class Option:
    """One thing the scheduler may do next."""

    label: str
    apply: Callable[[], None]
    kind: str  # "deliver", "advance", "fault"
    message: Message | None = None


class Chooser(Protocol):
    def choose(self, world: World, options: list[Option]) -> int: ...


@dataclass
class Step:
    """A step taken: at what time, which option of how many, and what it was."""

    at: float
    index: int
    count: int
    label: str


class World:
    def __init__(self, nodes: int = 1, patches: dict[str, str] | None = None) -> None:
        self.clock = Clock()
        self.nodes = [Node(f"s{i}", patches or {}) for i in range(nodes)]
        self.processes: list[Process] = []
        self.network: list[Message] = []  # in the order sent
        self._seq = 0
        self.listeners: dict[tuple[str, Hashable], Listener] = {}  # (node, conn) -> listener
        self.timers: list[tuple[float, int, str, Callable[[], None]]] = []  # the world's own
        self.steps: list[Step] = []
        self.log: list[str] = []  # what happened, for a failure's replay
        self.loop_errors: list[str] = []
        self.faults: list[str] = []  # the faults applied, as labels
        self.on_settled: list[Callable[[World], None]] = []  # every process ran: the state
        self.on_step: list[Callable[[World, Option, float], None]] = []  # (world, taken, idle)

    # -- processes ------------------------------------------------------------------------------

    def process(self, name: str) -> Process:
        loop = SimLoop(self.clock, lambda context: self._loop_error(name, context))
        process = Process(name, loop)
        self.processes.append(process)
        return process

    def start(self, process: Process, main: Any) -> None:
        """Run ``main`` (a coroutine) as the process's main task."""
        process.main = process.loop.create_task(main)
        process.main.add_done_callback(lambda _: setattr(process, "done", True))

    def _loop_error(self, name: str, context: dict[str, Any]) -> None:
        error = context.get("exception")
        self.loop_errors.append(f"{name}: {context.get('message')} {error!r}")

    # -- the network ----------------------------------------------------------------------------

    def _message(
        self,
        kind: str,
        process: Process,
        node: Node,
        conn: Hashable,
        payload: Any,
        future: asyncio.Future[Any] | None = None,
        fifo: bool = False,
        request: Any = None,
    ) -> Message:
        self._seq += 1
        message = Message(
            self._seq, self.clock.now, kind, process, node, conn, payload, future, fifo, request
        )
        self.network.append(message)
        return message

    def send(
        self,
        process: Process,
        node: Node,
        conn: Hashable,
        commands: list[tuple[Any, ...]],
        future: asyncio.Future[Any] | None,
        fifo: bool = False,
    ) -> Message:
        """A request leaves ``process`` for ``node`` (refused at once when the node is down)."""
        if not node.up:
            raise RedisConnectionError(f"Error connecting to {node.name}: connection refused")
        return self._message("request", process, node, conn, commands, future, fifo)

    def deliverable(self) -> list[Message]:
        found = []
        seen_fifo: set[tuple[str, str, Hashable]] = set()
        for m in self.network:
            if m.fifo:
                lane = (m.kind, m.node.name, m.conn)
                if lane in seen_fifo:
                    continue
                seen_fifo.add(lane)
            if m.kind == "request":
                if m.node.up:
                    found.append(m)
            elif m.process.running:
                found.append(m)
        return found

    def deliver(self, message: Message) -> None:
        self.network.remove(message)
        self.advance(message.sent + LATENCY)
        node, process = message.node, message.process
        if message.kind == "request":
            replies = [node.execute(self.clock.now, message.conn, c) for c in message.payload]
            self._collect_pushes(node)
            waited = message.future is not None and not message.future.done()
            if waited and not process.crashed and not any(isinstance(r, Queued) for r in replies):
                self._message(
                    "reply",
                    process,
                    node,
                    message.conn,
                    replies,
                    message.future,
                    request=message.payload,
                )
        elif message.kind == "reply":
            assert message.future is not None
            if not message.future.done():
                message.future.set_result(message.payload)
                message.answered = True
        else:
            listener = self.listeners.get((node.name, message.conn))
            if listener is not None:
                listener.deliver(message.payload)

    def _collect_pushes(self, node: Node) -> None:
        """What the server queued on pub/sub connections goes on the network, in order."""
        for (name, conn), _listener in self.listeners.items():
            if name != node.name:
                continue
            connection = node.server.connections.get(conn)
            if connection is None:
                continue
            while connection.inbox:
                item = connection.inbox.popleft()
                process = self._owner(conn)
                self._message("push", process, node, conn, item, fifo=True)

    def _owner(self, conn: Hashable) -> Process:
        name = conn[0] if isinstance(conn, tuple) else conn
        return next(p for p in self.processes if p.name == name)

    def orphan(self, future: asyncio.Future[Any]) -> None:
        """The caller stopped waiting (a timeout, a cancellation): its reply goes nowhere (its
        request, if not yet delivered, still reaches the server: it was written)."""
        self.network = [m for m in self.network if not (m.kind == "reply" and m.future is future)]

    def connect_listener(self, node: Node, conn: Hashable, listener: Listener) -> None:
        if not node.up:
            raise RedisConnectionError(f"Error connecting to {node.name}: connection refused")
        self.listeners[(node.name, conn)] = listener
        node.execute(self.clock.now, conn, ("HELLO", 3))

    def close_listener(self, node: Node, conn: Hashable) -> None:
        self.listeners.pop((node.name, conn), None)
        node.server.reset(conn)
        self.network = [m for m in self.network if not (m.fifo and m.conn == conn)]

    # -- faults ---------------------------------------------------------------------------------

    def reset(self, process: Process, node: Node) -> None:
        """Every connection of ``process`` to ``node`` is lost: requests not yet delivered are
        lost with them, replies not yet read too, pub/sub subscriptions and messages."""
        for m in list(self.network):
            if m.process is process and m.node is node:
                self.network.remove(m)
                if m.future is not None and not m.future.done():
                    m.future.set_exception(RedisConnectionError("Connection reset by peer"))
        for (name, conn), listener in list(self.listeners.items()):
            if name == node.name and self._owner(conn) is process:
                self.listeners.pop((name, conn))
                node.server.reset(conn)
                listener.lost()

    def drop(self, message: Message) -> None:
        """A message lost on the way (a reply's caller then waits until its timeout)."""
        self.network.remove(message)

    def node_down(self, node: Node) -> None:
        """The server process dies: every connection to it is reset."""
        for process in self.processes:
            self.reset(process, node)
        node.up = False

    def restart_empty(self, node: Node) -> None:
        node.server.restart_empty()
        node.up = True

    def failover(self, node: Node, missed: int, seconds: float) -> None:
        """The node's master dies and its replica, which missed the last ``missed`` script
        writes, takes over ``seconds`` later (a failover takes time: the tokens of the
        writes it missed are behind the replica's clock by then, docs/safety.md)."""
        history = list(node.writes or ())
        replica = history[-missed] if missed <= len(history) else {}
        self.node_down(node)

        def promote() -> None:
            node.server.failover(replica)
            node.up = True

        self.at(self.clock.now + seconds, f"{node.name} failed over", promote)

    def pause(self, process: Process, seconds: float) -> None:
        process.paused_at, process.paused_until = self.clock.now, self.clock.now + seconds
        self.at(process.paused_until, f"resume {process.name}", lambda: self.resume(process))

    def resume(self, process: Process) -> None:
        process.paused_total += self.clock.now - process.paused_at
        process.paused_until = None

    def crash(self, process: Process) -> None:
        """SIGKILL: the process never runs again; its sockets close (what it wrote before
        still reaches the servers)."""
        process.crashed = True
        for node in self.nodes:
            for (name, conn), _ in list(self.listeners.items()):
                if name == node.name and self._owner(conn) is process:
                    self.listeners.pop((name, conn))
                    node.server.reset(conn)
        self.network = [
            m for m in self.network if not (m.process is process and m.kind != "request")
        ]

    def at(self, when: float, label: str, action: Callable[[], None]) -> None:
        self._seq += 1
        self.timers.append((when, self._seq, label, action))
        self.timers.sort(key=lambda t: (t[0], t[1]))

    # -- the scheduler --------------------------------------------------------------------------

    def settle(self) -> None:
        """Run every process until none can do anything more at this instant."""
        for process in self.processes:
            if process.running:
                process.loop.run_ready()

    def next_time(self) -> float | None:
        times = [t[0] for t in self.timers[:1]]
        for process in self.processes:
            if process.running:
                when = process.loop.next_timer()
                if when is not None:
                    times.append(when)
        return min(times, default=None)

    def advance(self, when: float) -> None:
        self.clock.now = max(self.clock.now, when)
        while self.timers and self.timers[0][0] <= self.clock.now:
            _, _, label, action = self.timers.pop(0)
            self.log.append(f"{self.clock.now:9.4f}  {label}")
            action()

    def options(self) -> list[Option]:
        found = [
            Option(m.describe(), lambda m=m: self.deliver(m), "deliver", m)
            for m in self.deliverable()
        ]
        when = self.next_time()
        if when is not None:
            found.append(Option(f"time -> {when:.4f}", lambda: self.advance(when), "advance"))
        return found

    def step(
        self,
        chooser: Chooser,
        faults: Callable[[], list[Option]] = list,
        stop: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Let every process run, then take one choice (``faults``: the faults that may be
        applied now). False, taking none, when ``stop()`` says so or nothing can happen any
        more (a fault alone is no way forward)."""
        self.settle()
        for observe in self.on_settled:
            observe(self)
        if stop():
            return False
        options = self.options()
        if not options:
            return False
        options += faults()
        index = chooser.choose(self, options)
        option = options[index]
        self.steps.append(Step(self.clock.now, index, len(options), option.label))
        self.log.append(f"{self.clock.now:9.4f}  [{index}/{len(options)}] {option.label}")
        before, quiet = self.clock.now, not self.deliverable()
        option.apply()
        if option.kind == "fault":
            self.faults.append(option.label)
        # time that passed with nothing that could be delivered
        idle = self.clock.now - before if option.kind == "advance" and quiet else 0.0
        for observe in self.on_step:
            observe(self, option, idle)
        return True

    def digest(self) -> str:
        """The state, for the exhaustive search: what the servers hold, what is in flight,
        every process's state and timers, and the faults applied."""
        now = self.clock.now
        parts: list[Any] = [round(now, 6), tuple(self.faults)]
        parts += [node.digest(now) for node in self.nodes]
        parts += [(m.kind, m.describe()) for m in self.network]
        parts += [(t[0] - now, t[2]) for t in self.timers]
        for process in self.processes:
            parts.append(
                (
                    process.name,
                    process.paused_until,
                    process.crashed,
                    process.done,
                    process.loop.timers(),
                    process.state(),
                )
            )
        return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()

    def close(self) -> None:
        for process in self.processes:
            process.loop.discard()
        for node in self.nodes:
            node.recycle()


def _short(command: tuple[Any, ...]) -> str:
    words = [str(w) for w in command]
    if words[0].upper() in ("EVALSHA", "EVAL"):
        script = next((s.name for s in ALL_SCRIPTS if words[1] in (s.sha, s.source)), "?")
        return f"{words[0].upper()} {script} " + " ".join(_clip(w) for w in words[3:])
    return " ".join(_clip(w) for w in words)


def _clip(word: str) -> str:
    return word if len(word) <= 24 else word[:21] + "..."


def _short_reply(reply: Any) -> str:
    if isinstance(reply, Push):
        return "push " + " ".join(_clip(repr(x)) for x in reply)
    return _clip(repr(reply))[:24] if not isinstance(reply, list) else repr(reply)[:80]
