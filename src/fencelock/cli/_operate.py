"""``fencelock ls``, ``inspect``, ``release`` and ``top``: an operator's view of the locks on a
server, from the server side only (``LockClient.inspect``, ``locks``, ``force_release``).

Exit statuses (as ``fencelock run``): 0 done, 64 bad usage, 69 no server reachable (Redlock: no
majority of them) or the server refused (an ACL, a key of another type); and 1 when ``inspect``
finds the name not held, or ``release`` is refused: another grant than ``--token`` holds it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Final

from .. import ForceOutcome, LockClient, LockInfo
from ._common import (
    EX_REFUSED,
    OPERATOR_STATUSES,
    Commands,
    add_operator_options,
    as_json,
    lock_name,
    operator,
    positive_float,
    positive_int,
    print_json,
    shown,
)

DEFAULT_TOP: Final = 20  # names shown by top
LATCHES: Final = ("latch", "barrier")  # kinds that are not held as locks are
CLEAR: Final = "\x1b[H\x1b[2J"  # cursor home, clear screen: top redraws in place on a terminal


# -- rendering -----------------------------------------------------------------------------


def _ttl(ttl: float | None) -> str:
    return "no expiry" if ttl is None else f"{ttl:.3f} s"


def _latch(info: LockInfo) -> bool:
    return info.kind in LATCHES


def _table(infos: Sequence[LockInfo]) -> list[str]:
    """One line per lock, under a header. A latch's holder and ttl are those of the participant
    whose lease ends last ("-": none joined); its waiters are not queued, so not counted."""
    rows = [("NAME", "HOLDER", "LABEL", "TTL", "TOKEN", "KIND", "WAITERS", "LONGEST WAIT")]
    for info in infos:
        longest = max((w.age for w in info.waiters), default=None)
        latch = _latch(info)
        rows.append(
            (
                shown(info.name, 40),
                info.holder or "-",
                shown(info.label, 32),
                "-" if latch and info.ttl is None else _ttl(info.ttl),
                "-" if info.token is None else str(info.token),
                _kind(info),
                "-" if latch else str(info.queued),
                "-" if longest is None else f"{longest:.3f} s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _kind(info: LockInfo) -> str:
    """The KIND column: a semaphore's permits held of its limit, a latch's count left of its
    count, a barrier's parties in of its parties, a hold count or the holders of a read lock."""
    if info.limit is not None:
        return f"{info.kind} {info.count}/{info.limit}"
    return info.kind if info.count == 1 else f"{info.kind} x{info.count}"


def _latch_details(info: LockInfo) -> list[str]:
    """A latch or barrier: its count, every participant that joined with its lease, and no
    token line (it hands out no fencing token: it counts participants by id)."""
    if info.kind == "latch":
        count = f"{info.count} left to count down of {info.limit}"
    else:
        count = f"{info.count} of {info.limit} parties in"
    missing = f", {len(info.missing)} missing" if info.missing else ""
    lines = [
        f"name:    {shown(info.name)}",
        f"kind:    {_kind(info)} ({count})",
        f"joined:  {len(info.holders) or 'none'}{missing}",
    ]
    for h in info.holders:
        if h.ttl > 0:
            lease = f"lease {_ttl(h.ttl)} left"
        elif h.label in info.missing:
            lease = "lease ended: missing"
        else:
            lease = "lease ended, counted down"
        lines.append(f"  {h.holder}  {shown(h.label)}  {lease}")
    return [*lines, f"token:   none (a {info.kind} hands out no fencing token)"]


def _details(info: LockInfo) -> list[str]:
    if _latch(info):
        return _latch_details(info)
    if info.holders:  # a semaphore or read-write lock: every holder
        held = [f"holders: {len(info.holders)}"]
        for h in info.holders:
            label = f"  label {shown(h.label)}" if h.label else ""
            share = "all permits" if info.kind == "write_lock" else f"{h.permits} permit(s)"
            held.append(f"  {h.holder}  {share}, ttl {_ttl(h.ttl)}{label}")
    else:
        label = f"  label {shown(info.label)}" if info.label else ""
        held = [f"holder:  {info.holder}{label}"]
    kind = _kind(info) if info.holders else f"{info.kind}, hold count {info.count}"
    lines = [
        f"name:    {shown(info.name)}",
        *held,
        f"kind:    {kind}",
        f"ttl:     {_ttl(info.ttl)}",
        f"token:   {'- (counter gone)' if info.token is None else info.token}",
        f"waiters: {info.queued} queued",
    ]
    for i, waiter in enumerate(info.waiters, 1):
        label = f"  {shown(waiter.label)}" if waiter.label else ""
        lines.append(f"  {i}. {waiter.id}  waiting {waiter.age:.3f} s{label}")
    if info.queued > len(info.waiters):
        lines.append(f"  ... and {info.queued - len(info.waiters)} more")
    return lines


def _busiest(infos: Sequence[LockInfo], limit: int) -> list[LockInfo]:
    """The names to show first: most waiters, then the longest wait, then the name."""

    def rank(info: LockInfo) -> tuple[int, float, str]:
        return (-info.queued, -max((w.age for w in info.waiters), default=0.0), info.name)

    return sorted(infos, key=rank)[:limit]


# -- the commands ------------------------------------------------------------------------------


def _ls(client: LockClient, args: argparse.Namespace) -> int:
    infos = sorted(client.locks(args.pattern), key=lambda i: i.name)
    if args.json:  # one object per line: a listing may be long, and streams
        for info in infos:
            print_json(info, sys.stdout)
    elif infos:
        print("\n".join(_table(infos)))
    return 0


def _inspect(client: LockClient, args: argparse.Namespace) -> int:
    info = client.inspect(args.name)
    if args.json:
        print_json(info, sys.stdout)
    elif info is None:
        print(f"{shown(args.name)}: not held")
    else:
        print("\n".join(_details(info)))
    return EX_REFUSED if info is None else 0


def _release(client: LockClient, args: argparse.Namespace) -> int:
    name: str = args.name
    result = client.force_release(name, token=args.token)
    if result.outcome is ForceOutcome.NOT_HELD:
        held = client.inspect(name)  # a semaphore, read-write lock or latch of that name?
        if held is not None:
            permits = "" if _latch(held) else ": its permits come back when their leases end"
            print(
                f"{shown(name)}: a {held.kind} holds this name, not a lock{permits} (release "
                "frees locks only)",
                file=sys.stderr,
            )
            return EX_REFUSED
    if args.json:
        print_json(result, sys.stdout)
    else:
        found = f"holder {result.holder}, token {result.token}" if result.holder else ""
        label = f", label {shown(result.label)}" if result.label else ""
        message = {
            ForceOutcome.RELEASED: f"released ({found}{label})",
            ForceOutcome.NOT_HELD: "not held: nothing to release",
            ForceOutcome.TOKEN_MISMATCH: f"refused: another grant holds it ({found}{label})",
        }[result.outcome]
        print(f"{shown(name)}: {message}")
    return EX_REFUSED if result.outcome is ForceOutcome.TOKEN_MISMATCH else 0


def _top(client: LockClient, args: argparse.Namespace) -> int:
    """Redraw the busiest names every --interval seconds, --iterations times (None: until
    interrupted). In place on a terminal; one frame after another otherwise."""
    out = sys.stdout
    redraw = out.isatty() and not args.json
    frame = 0
    while args.iterations is None or frame < args.iterations:
        if frame:
            time.sleep(args.interval)
        frame += 1
        infos = list(client.locks(args.pattern))
        top = _busiest(infos, args.limit)
        waiting = sum(i.queued for i in infos)
        latches = sum(1 for i in infos if _latch(i))  # listed, but not held as locks are
        held = len(infos) - latches
        if args.json:
            snapshot = {"time": time.time(), "held": held, "waiting": waiting, "latches": latches}
            print(json.dumps({**snapshot, "locks": [as_json(i) for i in top]}), file=out)
        else:
            stamp = time.strftime("%H:%M:%S")
            head = f"fencelock top  {stamp}  {held} held, {waiting} waiting"
            if latches:
                head += f", {latches} {'latch' if latches == 1 else 'latches'}"
            if len(infos) > len(top):
                head += f" (the busiest {len(top)} shown)"
            lines = [head, "", *_table(top)] if top else [head]
            print((CLEAR if redraw else "" if frame == 1 else "\n") + "\n".join(lines), file=out)
        out.flush()
    return 0


def _token(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fencing token: {text!r}") from None
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"a fencing token is from 1 to 2**63 - 1, got {text}")
    return value


def add_commands(commands: Commands) -> None:
    ls = commands.add_parser(
        "ls",
        help="list the held locks (and latches)",
        description="List the held locks, semaphores and read-write locks, and the latches and "
        "barriers, whose names match PATTERN: holder, label, ttl, fencing token, kind, "
        "waiters. --json: one JSON object per line.",
        epilog="exit statuses: 0 done, 64 bad usage, 69 no server reachable (Redlock: no "
        "majority of them) or the server refused",
    )
    ls.add_argument("pattern", nargs="?", default="*", metavar="PATTERN",
                    help="a glob over lock names (default '*')")  # fmt: skip
    add_operator_options(ls)
    ls.set_defaults(handler=operator(_ls))

    inspect = commands.add_parser(
        "inspect",
        help="show who holds a lock, and who waits for it",
        description="Show the lock NAME as the server has it: holder id and label, ttl, "
        "fencing token (the counter: with local hand-offs, the last of the block reserved), "
        "kind and hold count, and the queued waiters in order with how long they have waited. "
        "A latch or barrier: its count, and each participant that joined with its lease.",
        epilog=OPERATOR_STATUSES.format("NAME is not held"),
    )
    inspect.add_argument("name", type=lock_name, metavar="NAME", help="the lock's name")
    add_operator_options(inspect)
    inspect.set_defaults(handler=operator(_inspect))

    release = commands.add_parser(
        "release",
        help="force a stuck lock free (an administrator's release)",
        description="Release the lock NAME whoever holds it, and serve its waiters as a release "
        "does. With --token (the token inspect showed), only if that grant still holds. The next "
        "grant gets a larger fencing token, so the forced-out holder's fenced writes are refused.",
        epilog=OPERATOR_STATUSES.format("refused: another grant than --token holds NAME"),
    )
    release.add_argument("name", type=lock_name, metavar="NAME", help="the lock's name")
    release.add_argument("--token", type=_token, metavar="T",
                         help="release only the grant with this fencing token")  # fmt: skip
    add_operator_options(release)
    release.set_defaults(handler=operator(_release))

    top = commands.add_parser(
        "top",
        help="a live view of the busiest locks",
        description="Show the busiest held locks (most waiters, then the longest wait) and "
        "refresh the view every --interval seconds, in place on a terminal, from the server "
        "side only. --json: one JSON object per refresh.",
        epilog="exit statuses: 0 done (130 when interrupted), 64 bad usage, 69 no server "
        "reachable (Redlock: no majority of them) or the server refused",
    )
    top.add_argument("pattern", nargs="?", default="*", metavar="PATTERN",
                     help="a glob over lock names (default '*')")  # fmt: skip
    top.add_argument("--interval", type=positive_float, default=2.0, metavar="S",
                     help="seconds between refreshes (default 2)")  # fmt: skip
    top.add_argument("--limit", type=positive_int, default=DEFAULT_TOP, metavar="N",
                     help=f"names shown (default {DEFAULT_TOP})")  # fmt: skip
    frames = top.add_mutually_exclusive_group()
    frames.add_argument("--iterations", type=positive_int, metavar="N",
                        help="refresh N times, then exit (default: until interrupted)")  # fmt: skip
    frames.add_argument("--once", dest="iterations", action="store_const", const=1,
                        help="show one view and exit (as --iterations 1)")  # fmt: skip
    add_operator_options(top)
    top.set_defaults(handler=operator(_top))
