"""``fencelock ls``, ``inspect``, ``release`` and ``top``: an operator's view of the locks on a
server, from the server side only (``LockClient.inspect``, ``locks``, ``force_release``).

Exit statuses (as ``fencelock run``): 0 done, 64 bad usage, 69 no server reachable (Redlock: no
majority of them) or the server refused (an ACL, a key of another type); and 1 when ``inspect``
finds the name not held, or ``release`` is refused: another grant than ``--token`` holds it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Final, TextIO

from . import LockClient
from ._core.inspection import ForceOutcome, LockInfo
from .errors import LockConnectionError, LockError
from .run import EX_UNAVAILABLE, EX_USAGE, redact

EX_REFUSED: Final = 1  # release refused (another grant holds the name), or inspect: not held
DEFAULT_TOP = 20  # names shown by top
CLEAR: Final = "\x1b[H\x1b[2J"  # cursor home, clear screen: top redraws in place on a terminal


class _Usage(Exception):
    pass


class _Unavailable(Exception):
    pass


@contextmanager
def _client(urls: Sequence[str], prefix: str) -> Iterator[LockClient]:
    """A client for ``urls`` (several: Redlock); errors become the exit statuses above."""
    where = ", ".join(redact(u) for u in urls)
    try:
        client = LockClient.from_url(urls[0] if len(urls) == 1 else list(urls), prefix=prefix)
    except (ValueError, TypeError) as exc:
        raise _Usage(f"bad --url or --prefix: {exc}") from None
    try:
        yield client
    except LockConnectionError as exc:
        raise _Unavailable(f"no server reachable at {where}: {exc}") from None
    except LockError as exc:
        raise _Unavailable(f"{where}: {exc}") from None
    finally:
        client.close()


def operate(action: Callable[[LockClient], int], urls: Sequence[str], prefix: str) -> int:
    """Run ``action`` with a client; its status, or the status of what went wrong."""
    try:
        with _client(urls, prefix) as client:
            return action(client)
    except _Usage as exc:
        print(f"fencelock: {exc}", file=sys.stderr)
        return EX_USAGE
    except _Unavailable as exc:
        print(f"fencelock: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE


# -- rendering -----------------------------------------------------------------------------


def _shown(text: str | None, width: int | None = None) -> str:
    """A name or label for a terminal: control characters escaped, cut to ``width``."""
    if text is None:
        return "-"
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def _ttl(ttl: float | None) -> str:
    return "no expiry" if ttl is None else f"{ttl:.3f} s"


def as_json(info: LockInfo) -> dict[str, Any]:
    return asdict(info)


def table(infos: Sequence[LockInfo]) -> list[str]:
    """One line per lock, under a header."""
    rows = [("NAME", "HOLDER", "LABEL", "TTL", "TOKEN", "KIND", "WAITERS", "LONGEST WAIT")]
    for info in infos:
        longest = max((w.age for w in info.waiters), default=None)
        rows.append(
            (
                _shown(info.name, 40),
                info.holder,
                _shown(info.label, 32),
                _ttl(info.ttl),
                "-" if info.token is None else str(info.token),
                _kind(info),
                str(info.queued),
                "-" if longest is None else f"{longest:.3f} s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _kind(info: LockInfo) -> str:
    """The KIND column: a semaphore's permits held of its limit, a hold count or the holders
    of a read lock."""
    if info.limit is not None:
        return f"{info.kind} {info.count}/{info.limit}"
    return info.kind if info.count == 1 else f"{info.kind} x{info.count}"


def details(info: LockInfo) -> list[str]:
    if info.holders:  # a semaphore or read-write lock: every holder
        held = [f"holders: {len(info.holders)}"]
        for h in info.holders:
            label = f"  label {_shown(h.label)}" if h.label else ""
            share = "all permits" if info.kind == "write_lock" else f"{h.permits} permit(s)"
            held.append(f"  {h.holder}  {share}, ttl {_ttl(h.ttl)}{label}")
    else:
        label = f"  label {_shown(info.label)}" if info.label else ""
        held = [f"holder:  {info.holder}{label}"]
    kind = _kind(info) if info.holders else f"{info.kind}, hold count {info.count}"
    lines = [
        f"name:    {_shown(info.name)}",
        *held,
        f"kind:    {kind}",
        f"ttl:     {_ttl(info.ttl)}",
        f"token:   {'- (counter gone)' if info.token is None else info.token}",
        f"waiters: {info.queued} queued",
    ]
    for i, waiter in enumerate(info.waiters, 1):
        label = f"  {_shown(waiter.label)}" if waiter.label else ""
        lines.append(f"  {i}. {waiter.id}  waiting {waiter.age:.3f} s{label}")
    if info.queued > len(info.waiters):
        lines.append(f"  ... and {info.queued - len(info.waiters)} more")
    return lines


# -- the commands ------------------------------------------------------------------------------


def ls(client: LockClient, pattern: str, as_json_lines: bool, out: TextIO) -> int:
    infos = list(client.locks(pattern))
    infos.sort(key=lambda i: i.name)
    if as_json_lines:  # one object per line: a listing may be long, and streams
        for info in infos:
            print(json.dumps(as_json(info)), file=out)
    elif infos:
        print("\n".join(table(infos)), file=out)
    return 0


def inspect(client: LockClient, name: str, json_out: bool, out: TextIO) -> int:
    info = client.inspect(name)
    if json_out:
        print(json.dumps(None if info is None else as_json(info)), file=out)
    elif info is None:
        print(f"{_shown(name)}: not held", file=out)
    else:
        print("\n".join(details(info)), file=out)
    return EX_REFUSED if info is None else 0


def release(client: LockClient, name: str, token: int | None, json_out: bool, out: TextIO) -> int:
    result = client.force_release(name, token=token)
    if result.outcome is ForceOutcome.NOT_HELD:
        held = client.inspect(name)  # a semaphore or read-write lock of that name?
        if held is not None:
            print(
                f"{_shown(name)}: a {held.kind} holds this name, not a lock: its permits come "
                "back when their leases end (release frees locks only)",
                file=sys.stderr,
            )
            return EX_REFUSED
    if json_out:
        print(json.dumps(asdict(result)), file=out)
    else:
        found = f"holder {result.holder}, token {result.token}" if result.holder else ""
        label = f", label {_shown(result.label)}" if result.label else ""
        message = {
            ForceOutcome.RELEASED: f"released ({found}{label})",
            ForceOutcome.NOT_HELD: "not held: nothing to release",
            ForceOutcome.TOKEN_MISMATCH: f"refused: another grant holds it ({found}{label})",
        }[result.outcome]
        print(f"{_shown(name)}: {message}", file=out)
    return EX_REFUSED if result.outcome is ForceOutcome.TOKEN_MISMATCH else 0


def busiest(infos: Sequence[LockInfo], limit: int) -> list[LockInfo]:
    """The names to show first: most waiters, then the longest wait, then the name."""

    def rank(info: LockInfo) -> tuple[int, float, str]:
        return (-info.queued, -max((w.age for w in info.waiters), default=0.0), info.name)

    return sorted(infos, key=rank)[:limit]


def top(
    client: LockClient,
    pattern: str,
    interval: float,
    iterations: int | None,
    limit: int,
    json_out: bool,
    out: TextIO,
) -> int:
    """Redraw the busiest names every ``interval`` seconds, ``iterations`` times (None: until
    interrupted). In place on a terminal; one frame after another otherwise."""
    redraw = out.isatty() and not json_out
    frame = 0
    while iterations is None or frame < iterations:
        if frame:
            time.sleep(interval)
        frame += 1
        infos = list(client.locks(pattern))
        shown = busiest(infos, limit)
        waiting = sum(i.queued for i in infos)
        if json_out:
            snapshot = {"time": time.time(), "held": len(infos), "waiting": waiting}
            print(json.dumps({**snapshot, "locks": [as_json(i) for i in shown]}), file=out)
        else:
            stamp = time.strftime("%H:%M:%S")
            head = f"fencelock top  {stamp}  {len(infos)} held, {waiting} waiting"
            if len(infos) > len(shown):
                head += f" (the busiest {len(shown)} shown)"
            lines = [head, "", *table(shown)] if shown else [head]
            print((CLEAR if redraw else "" if frame == 1 else "\n") + "\n".join(lines), file=out)
        out.flush()
    return 0
