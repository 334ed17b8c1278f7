"""A COMMAND run under a lease, for ``fencelock run`` (a lock) and ``fencelock elect`` (an
election): acquire, start COMMAND, supervise it, release; each command says what its lease is.

The lease is renewed automatically, so the client's watchdog keeps it alive for as long as
COMMAND runs; COMMAND sees the grant's fencing token as ``FENCELOCK_TOKEN``.

Who waits for what: the main thread blocks on one event, set either by a thread that does
``proc.wait()`` or by ``on_lost`` (called from the watchdog thread). Signal handlers run in the
main thread while it waits, and forward SIGINT/SIGTERM/SIGHUP to COMMAND.

COMMAND runs in a process group of its own, so that a signal (forwarded, or SIGTERM/SIGKILL
after the lease was lost) reaches the whole tree it started, not only its first process. When
the command is in the foreground of a terminal, that group is made the terminal's foreground
group while COMMAND runs, so it can read from the terminal and gets Ctrl-C directly.

Exit statuses (sysexits.h): COMMAND's own status (128 + N for death by signal N, like a shell),
or 64 bad usage, 69 no server reachable (Redlock: no majority of them), 70 lease lost while
COMMAND ran, 75 lease busy until ``--timeout``, 126/127 COMMAND could not be executed / was not
found (like a shell).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from types import FrameType
from typing import ClassVar, Final, Generic, Protocol, TypeVar

from .. import LockClient, LockConnectionError, LockError, LockNotOwned, holder_label
from ._common import EX_BUSY, EX_LOST, EX_UNAVAILABLE, EX_USAGE, redact

EX_NOEXEC: Final = 126  # found but could not be executed, as in sh
EX_NOTFOUND: Final = 127  # not found, as in sh

DEFAULT_GRACE: Final = 10.0
FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Lease(Protocol):
    """What a command runs COMMAND under: a lock, or an election."""

    @property
    def token(self) -> int: ...

    def acquire(self, *, timeout: float | None) -> bool: ...

    def release(self) -> None: ...

    def check(self) -> None: ...


L = TypeVar("L", bound=Lease)


def exit_status(returncode: int) -> int:
    """A ``Popen.returncode`` as a shell reports it: death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of the group that COMMAND leads; a group already gone
    is not an error. (If COMMAND moved to another group, it still gets the signal itself.)"""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pgid, signum)
    except PermissionError:
        pass


class _Interrupted(BaseException):
    """A forwarded signal arrived while waiting for the lock: give up waiting."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# Run beside COMMAND, in a session of its own (terminal signals do not reach it): it waits for
# the end of a pipe that only this process holds open, so it reads EOF when this process dies
# however it dies (SIGKILL, OOM). It then stops COMMAND's process group as a lost lease would,
# SIGTERM then SIGKILL after the grace: a COMMAND left running would run without the lock,
# beside the next holder's. When COMMAND ends normally this process kills it first.
_GUARD: Final = """
import os, signal, sys, time
sys.stdin.buffer.read()
group, grace = int(sys.argv[1]), float(sys.argv[2])
try:
    os.killpg(group, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        time.sleep(0.05)
        os.killpg(group, 0)
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


class _Guard:
    """Stops COMMAND's process group if this process dies first (see ``_GUARD``)."""

    def __init__(self, pgid: int, grace: float) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _GUARD, str(pgid), repr(grace)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self) -> None:
        """COMMAND has ended: the guard goes, without touching the group (whose id may be
        reused by then)."""
        self._proc.kill()
        self._proc.wait()
        if self._proc.stdin is not None:
            self._proc.stdin.close()


@contextmanager
def _handling(
    signals: Sequence[int], handler: Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """Install ``handler`` for ``signals`` (except those ignored, as under nohup: the command
    inherits that), restoring the previous handlers afterwards."""
    previous: dict[int, Callable[[int, FrameType | None], object] | int] = {}
    for signum in signals:
        current = signal.getsignal(signum)
        if current == signal.SIG_IGN:
            continue
        previous[signum] = signal.SIG_DFL if current is None else current
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class _Terminal:
    """The controlling terminal, when this process is in its foreground: the command's group is
    given the foreground while it runs (so that it may read from the terminal), then taken back."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def if_foreground(cls) -> _Terminal | None:
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return None  # no controlling terminal: cron, systemd, CI
        try:
            if os.tcgetpgrp(fd) == os.getpgrp():
                return cls(fd)
        except OSError:
            pass
        os.close(fd)
        return None

    def _set_foreground(self, pgid: int) -> None:
        # From the background tcsetpgrp() would stop us with SIGTTOU unless it is ignored.
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            with suppress(OSError):
                os.tcsetpgrp(self.fd, pgid)
        finally:
            signal.signal(signal.SIGTTOU, old)

    def give(self, pgid: int) -> None:
        self._set_foreground(pgid)
        # It may have tried to use the terminal before it had it, and been stopped (SIGTTIN).
        signal_group(pgid, signal.SIGCONT)

    def take_back(self) -> None:
        self._set_foreground(os.getpgrp())
        os.close(self.fd)


class Supervisor(ABC, Generic[L]):
    """One run of COMMAND under a lease of type ``L``: ``make_lease`` says which (a command
    defines it), ``while_held`` what to do once it is held (run COMMAND, by default)."""

    prog: ClassVar[str]  # for messages: "fencelock run"
    # what is lost, in the command's words: "the lock {!r}", "the leadership of {!r}" (the
    # name); what it has, "lock"; its token, "token"; who has it, "holder"
    held: ClassVar[str]
    thing: ClassVar[str]
    token_name: ClassVar[str]
    holder: ClassVar[str]

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        ttl: float,
        timeout: float | None,
        grace: float,
        urls: Sequence[str],
        label: str | None = None,
    ) -> None:
        if not command:
            raise ValueError("command must not be empty")
        self.name = name
        self.command = list(command)
        self.ttl = ttl
        self.timeout = timeout
        self.grace = grace
        self.urls = list(urls)
        self.label = holder_label() if label is None else label  # what ls and leader show
        self._where = ", ".join(redact(url) for url in urls)
        self._wake = threading.Event()  # COMMAND exited or the lease was lost
        self._exited = threading.Event()
        self._lost = threading.Event()
        self._cause = "its lease was lost"  # (the library's words, once it says why)
        self._proc: subprocess.Popen[bytes] | None = None
        self._acquiring = False
        self._started = False
        self._stopping = False  # COMMAND is being stopped because the lease was lost
        self._unforwarded: list[int] = []  # signals that arrived before COMMAND was started

    # -- what a command defines ---------------------------------------------------------------

    @abstractmethod
    def make_lease(self, client: LockClient) -> L:
        """The lease, auto-renewed, with ``on_lost`` as its loss callback."""

    def environment(self, token: int) -> dict[str, str]:
        """COMMAND's environment: ours, and the grant's."""
        return {**os.environ, "FENCELOCK_TOKEN": str(token), "FENCELOCK_NAME": self.name}

    def while_held(self, client: LockClient, lease: L) -> int:
        """Once the lease is held: run COMMAND; the exit status (before the release)."""
        return self.supervise(lease)

    # -- for the commands ---------------------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)

    @property
    def lost(self) -> bool:
        """Whether the lease was lost (``on_lost`` was called)."""
        return self._lost.is_set()

    # -- called from other threads, or from signal handlers -----------------------------------

    def on_lost(self, lease: Lease) -> None:
        """The lease's loss callback: from the watchdog thread, once."""
        try:
            lease.check()  # (raises: it says why the lease was lost)
        except LockNotOwned as exc:
            self._cause = str(exc)
        self._lost.set()
        self._wake.set()

    def _wait_for(self, proc: subprocess.Popen[bytes]) -> None:
        """In a thread of its own: the only caller of ``proc.wait()``."""
        proc.wait()
        self._exited.set()
        self._wake.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """In the main thread, between two bytecodes of whatever it was doing."""
        if self._acquiring:
            raise _Interrupted(signum)
        if self._proc is None:
            self._unforwarded.append(signum)
        elif not self._exited.is_set():
            signal_group(self._proc.pid, signum)

    # -- the main thread ----------------------------------------------------------------------

    def run(self) -> int:
        try:
            client = LockClient.from_url(self.urls[0] if len(self.urls) == 1 else self.urls)
        except ValueError as exc:
            self.say(f"bad --url {self._where!r}: {exc}")
            return EX_USAGE
        try:
            with _handling(FORWARDED, self._on_signal):
                return self._run(client)
        finally:
            client.close()

    def _run(self, client: LockClient) -> int:
        lease = self.make_lease(client)
        try:
            acquired = self._acquire(lease)
        except _Interrupted as exc:
            # acquire() gives up a grant it had in flight; this covers a signal just after it.
            with suppress(LockError):
                lease.release()
            self.say(f"{signal_name(exc.signum)} while waiting for {self.name!r}; COMMAND not run")
            return 128 + exc.signum
        except LockConnectionError as exc:
            if len(self.urls) > 1:  # Redlock: fewer than a majority answered
                self.say(
                    f"no majority of the {len(self.urls)} servers reachable ({self._where}): {exc}"
                )
            else:
                self.say(f"no server reachable at {self._where}: {exc}")
            return EX_UNAVAILABLE
        except LockError as exc:  # e.g. the key holds something else, or NOAUTH
            self.say(f"cannot acquire {self.name!r}: {exc}")
            return EX_UNAVAILABLE
        if not acquired:
            return EX_BUSY  # silent, like flock -n: cron would mail every busy run
        try:
            status = self.while_held(client, lease)
        except BaseException:
            with suppress(LockError):
                lease.release()
            raise
        return self._release(lease, status)

    def _acquire(self, lease: L) -> bool:
        self._acquiring = True
        try:
            return lease.acquire(timeout=self.timeout)
        finally:
            self._acquiring = False

    def supervise(self, lease: L) -> int:
        """Run COMMAND while the lease is held: its exit status, or one of ours if not started."""
        if self._unforwarded:  # a signal came between the grant and now
            signum = self._unforwarded[0]
            self.say(f"{signal_name(signum)} before COMMAND started; COMMAND not run")
            return 128 + signum
        try:
            token = lease.token
        except LockNotOwned:  # (Redlock mode: a token first read after the loss)
            self._lost.set()
            token = 0
        except LockConnectionError as exc:  # Redlock: no majority to write the token back to
            where = f"{len(self.urls)} servers reachable ({self._where})"
            self.say(
                f"no majority of the {where} to confirm the fencing token: {exc}; COMMAND not run"
            )
            return EX_UNAVAILABLE
        if self._lost.is_set():
            self.say(f"lost {self.held.format(self.name)} before COMMAND started; COMMAND not run")
            return EX_LOST
        env = self.environment(token)
        terminal = _Terminal.if_foreground()
        try:
            proc = subprocess.Popen(self.command, env=env, process_group=0)
        except OSError as exc:
            if terminal is not None:
                terminal.take_back()
            self.say(f"cannot run {self.command[0]!r}: {exc.strerror or exc}")
            missing = exc.errno in (errno.ENOENT, errno.ENOTDIR)
            return EX_NOTFOUND if missing else EX_NOEXEC
        self._started = True
        guard = _Guard(proc.pid, self.grace)
        try:
            if terminal is not None:
                terminal.give(proc.pid)
            self._proc = proc
            while self._unforwarded:  # arrived while Popen ran
                signal_group(proc.pid, self._unforwarded.pop(0))
            threading.Thread(
                target=self._wait_for, args=(proc,), name="fencelock-run-wait", daemon=True
            ).start()
            self._wake.wait()
            if not self._exited.is_set():
                self._stop(proc, token)
        finally:
            if self._exited.is_set():  # (else the guard stops COMMAND when this process ends)
                guard.stop()
            if terminal is not None:
                terminal.take_back()
        assert proc.returncode is not None
        return exit_status(proc.returncode)

    def _stop(self, proc: subprocess.Popen[bytes], token: int) -> None:
        """The lease is lost while COMMAND runs: it may no longer be the only holder."""
        self._stopping = True
        self.say(
            f"lost {self.held.format(self.name)} ({self.token_name} {token}) while COMMAND was "
            f"running: {self._cause}. COMMAND may no longer be the only {self.holder}; stopping "
            f"it: SIGTERM now, SIGKILL after {self.grace:g} s."
        )
        signal_group(proc.pid, signal.SIGTERM)
        if not self._exited.wait(self.grace):
            self.say(f"COMMAND still running {self.grace:g} s after SIGTERM: sending SIGKILL")
            signal_group(proc.pid, signal.SIGKILL)
            self._exited.wait()

    def _release(self, lease: L, status: int) -> int:
        """Release the lease; the exit status given COMMAND's ``status``."""
        lost = self._lost.is_set()
        try:
            lease.release()
        except LockNotOwned as exc:  # found gone: lost before the watchdog noticed, or just after
            lost, self._cause = True, str(exc)
        except LockError as exc:  # the server went away: the lease runs out by itself
            self.say(f"could not release {self.name!r} ({exc}); it expires within {self.ttl:g} s")
        if not lost:
            return status
        if self._started and not self._stopping:
            self.say(
                f"lost {self.held.format(self.name)} before COMMAND ended: {self._cause}. "
                f"COMMAND may have run beside another {self.holder}"
            )
        if self._started:
            lost_what = f"{self.thing} lost"
            self.say(f"COMMAND exited with status {status}; exiting with {EX_LOST} ({lost_what})")
        return EX_LOST
