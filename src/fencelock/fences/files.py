"""Fencing for files (docs/fencing.md, "Files").

``write(path, data, token=...)`` replaces ``path`` atomically (a temporary file beside it,
fsync, rename) only if ``token`` is >= the highest token that wrote ``path``. That token is kept
beside the file, in ``.NAME.fence``, and the check, the rename and the token's update happen
under an exclusive OS lock (``flock``) on that file, so writers on one host take turns. On a
shared filesystem it holds where ``flock`` and ``rename`` are atomic across hosts (a local
filesystem; NFSv4 with working locks); where they are not (NFSv3 without lockd, SMB, object-store
mounts), it does not.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path

from .._fencing import fencing_token, refused
from ..errors import LockTimeout, StaleToken

__all__ = ["fence_path", "token", "write"]

_WIDTH = 20  # digits of the largest token (2**63 - 1 has 19), so every update is one block
_POLL = 0.005  # seconds between two tries of a held flock (no OS call waits with a deadline)


def _path(path: object) -> Path:
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    result = Path(path)
    if not result.name:
        raise ValueError(f"path must name a file, not {str(path)!r}")
    return result


def fence_path(path: str | os.PathLike[str]) -> Path:
    """Where the highest token that wrote ``path`` is kept: ``.NAME.fence`` beside it."""
    target = _path(path)
    return target.with_name(f".{target.name}.fence")


def _read(fd: int) -> int | None:
    text = os.pread(fd, _WIDTH + 1, 0).strip()
    return int(text) if text else None


def _locked(fd: int, operation: int, timeout: float, what: Path) -> None:
    """``flock(fd, operation)``, given up after ``timeout`` seconds (``LockTimeout``): a writer
    stopped while it holds the lock must not hang every other."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # (never set: a sleep that says it waits for nothing else)
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise LockTimeout(f"{what} stayed locked by another writer for {timeout:g} s")
        pause.wait(_POLL)


def _timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not 0 <= timeout < float("inf"):
        raise ValueError(f"timeout must be >= 0 and finite, got {timeout}")
    return float(timeout)


def write(path: str | os.PathLike[str], data: bytes, *, token: int, timeout: float = 10.0) -> None:
    """Replace ``path``'s content with ``data`` if ``token`` is >= every token that wrote it;
    ``StaleToken`` otherwise, and the file is left as it was.

    The new content is written to a temporary file in the same directory, fsynced, and renamed
    over ``path`` (readers see the old content or the new, never a mix); the token is recorded
    before the rename, so a crash between the two can lose this write but never let an older
    token's in. ``timeout``: how long to wait for another writer's turn (``LockTimeout``)."""
    target = _path(path)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    token = fencing_token(token)
    wait = _timeout(timeout)
    fence = fence_path(target)
    fd = os.open(fence, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _locked(fd, fcntl.LOCK_EX, wait, fence)
        seen = _read(fd)
        if seen is not None and seen > token:
            stale = StaleToken(str(target), token, seen)
            refused(stale)
            raise stale
        if seen != token:
            os.pwrite(fd, f"{token:0{_WIDTH}d}\n".encode(), 0)
            os.fsync(fd)
        _replace(target, bytes(data))
    finally:
        os.close(fd)  # (and with it the lock)


def _replace(target: Path, data: bytes) -> None:
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself, on disk
    finally:
        os.close(directory)


def token(path: str | os.PathLike[str], *, timeout: float = 10.0) -> int | None:
    """The highest token that wrote ``path`` (None: no fenced write yet)."""
    wait = _timeout(timeout)
    fence = fence_path(path)
    try:
        fd = os.open(fence, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        _locked(fd, fcntl.LOCK_SH, wait, fence)
        return _read(fd)
    finally:
        os.close(fd)
