"""``fencelock run`` end to end: the real command (``python -m fencelock run``) against a real
server, with real child processes and real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
import redis

import fencelock
from fencelock._keys import LockKeys
from fencelock._sync.lock import Lock
from fencelock.cli._run import Runner
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from tests.concurrency import TIMEOUT, sync_until

NAME = "nightly-report"
KEYS = LockKeys.for_name(NAME)


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fencelock", "run", *args]


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FENCELOCK_URL", "REDIS_URL")}
    env.update(overrides)
    return env


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(*args),
        cwd=cwd,
        env=_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


class Spawn(Protocol):
    def __call__(self, *args: str) -> subprocess.Popen[str]: ...


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start ``fencelock run`` in the background (in ``tmp_path``); stopped at teardown if a
    test left it running (SIGTERM is forwarded to its command, which then ends)."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            _command(*args),
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.communicate()


def _gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped counts as gone: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


# -- the command's status, environment and lock --------------------------------------------


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 128 + signal.SIGKILL)],
)
def test_exits_with_the_commands_status(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, script: str, status: int
) -> None:
    result = run("--url", server.url, NAME, "--", "sh", "-c", script, cwd=tmp_path)
    assert result.returncode == status, result.stderr
    assert not raw.exists(KEYS.lock)  # released afterwards


def test_command_sees_the_fencing_token(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    script = (
        'printf %s "$FENCELOCK_TOKEN" > token; printf %s "$FENCELOCK_NAME" > name; '
        'printf %s "$1" > args'
    )
    started = server_micros(raw)
    result = run(
        NAME, "--ttl", "5", "--url", server.url, "--", "sh", "-c", script, "sh", "a -- b",
        cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    token = int((tmp_path / "token").read_text())
    assert started < token < server_micros(raw)  # the grant's token, from the server's clock
    assert (tmp_path / "name").read_text() == NAME
    assert (tmp_path / "args").read_text() == "a -- b"  # COMMAND's arguments passed verbatim
    assert not raw.exists(KEYS.lock)


def test_lease_is_renewed_while_the_command_runs(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    # The command outlives its 1 s lease twice over: only renewal keeps it held.
    result = run("--ttl", "1", "--url", server.url, NAME, "--", "sleep", "2.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # never lost: a loss exits 70


def test_url_comes_from_the_environment(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    first = run(
        NAME, "--", "true", cwd=tmp_path, env=_env(FENCELOCK_URL=server.url, REDIS_URL=closed)
    )
    assert first.returncode == 0, first.stderr
    before = deleted(raw)
    second = run(NAME, "--", "true", cwd=tmp_path, env=_env(REDIS_URL=server.url))
    assert second.returncode == 0, second.stderr
    assert deleted(raw) == before + 1  # granted and released on this server


def server_micros(raw: redis.Redis) -> int:
    seconds, micros = raw.time()
    return int(seconds) * 1_000_000 + int(micros)


def deleted(raw: redis.Redis) -> int:
    """The DELs the server has run so far, in scripts too (a release deletes a lock it holds)."""
    return int(raw.info("commandstats").get("cmdstat_del", {}).get("calls", 0))


def fencelock_command(*args: str) -> subprocess.CompletedProcess[str]:
    """Another ``fencelock`` command (``ls``, ``inspect``...), as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "fencelock", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


# runs until the test creates the file "stop" in its directory
STOPPABLE = "touch started; while [ ! -e stop ]; do sleep 0.05; done"


@pytest.mark.parametrize("label", ["cron on box-1", None], ids=["given", "default"])
def test_ls_inspect_and_top_show_the_label_of_a_run(
    server: EmbeddedServer, tmp_path: Path, spawn: Spawn, label: str | None
) -> None:
    given = [] if label is None else ["--label", label]
    proc = spawn("--url", server.url, *given, NAME, "--", "sh", "-c", STOPPABLE)
    sync_until(lambda: (tmp_path / "started").exists() or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()
    # the default, as fencelock elect's: host:pid:thread of the runner
    expected = f"{socket.gethostname()}:{proc.pid}:MainThread" if label is None else label

    listed = fencelock_command("ls", "--json", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    [shown] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (shown["name"], shown["label"]) == (NAME, expected)
    inspected = fencelock_command("inspect", NAME, "--json", "--url", server.url)
    assert json.loads(inspected.stdout)["label"] == expected, inspected.stderr
    top = fencelock_command("top", "--once", "--json", "--url", server.url)
    assert [lock["label"] for lock in json.loads(top.stdout)["locks"]] == [expected], top.stderr
    text = fencelock_command("ls", "--url", server.url)
    assert expected in text.stdout.splitlines()[1]

    (tmp_path / "stop").touch()
    assert proc.wait(TIMEOUT) == 0


# -- its own exit statuses -------------------------------------------------------------------


def test_busy_lock_exits_75_without_running_the_command(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    with fencelock.LockClient.from_url(server.url) as client, client.lock(NAME) as holder:
        result = run(
            "--timeout", "0", "--url", server.url, NAME, "--", "touch", "ran", cwd=tmp_path
        )
        assert result.returncode == 75, result.stderr
        assert not (tmp_path / "ran").exists()
        assert holder.held()  # untouched


def test_without_timeout_it_waits_for_the_holder(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, spawn: Spawn
) -> None:
    with fencelock.LockClient.from_url(server.url) as client:
        holder = client.lock(NAME)
        assert holder.acquire()
        proc = spawn("--url", server.url, NAME, "--", "sh", "-c", 'echo "$FENCELOCK_TOKEN" > ran')
        # It is waiting once it is queued for the release (it would also retry without that).
        sync_until(lambda: raw.zcard(KEYS.queue) == 1)
        assert not (tmp_path / "ran").exists()
        token = holder.token
        holder.release()

    assert proc.wait(TIMEOUT) == 0
    assert int((tmp_path / "ran").read_text()) > token  # the grant after the holder's


def test_no_server_exits_69(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run("--url", url, NAME, "--", "touch", "ran", cwd=tmp_path)
    assert result.returncode == 69
    assert "no server reachable" in result.stderr
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "args",
    [
        [NAME],  # no COMMAND
        [NAME, "--"],  # an empty one
        [NAME, "touch", "ran"],  # COMMAND must follow --
        ["--ttl", "0", NAME, "--", "touch", "ran"],
        ["--ttl", "0.01", NAME, "--", "touch", "ran"],  # below the library's minimum lease
        ["--ttl", "-1", NAME, "--", "touch", "ran"],
        ["--ttl", "nan", NAME, "--", "touch", "ran"],
        ["--ttl", "1e400", NAME, "--", "touch", "ran"],  # inf
        ["--ttl", "1e12", NAME, "--", "touch", "ran"],  # past a year
        ["--ttl", "soon", NAME, "--", "touch", "ran"],
        ["--timeout", "-1", NAME, "--", "touch", "ran"],
        ["--timeout", "nan", NAME, "--", "touch", "ran"],
        ["--timeout", "soon", NAME, "--", "touch", "ran"],
        ["--grace", "nan", NAME, "--", "touch", "ran"],
        ["--grace", "1e10", NAME, "--", "touch", "ran"],  # would overflow threading's wait
        ["", "--", "touch", "ran"],  # empty name
        ["--url", "redis://a", "--url", "http://b", NAME, "--", "touch", "ran"],
        ["--url", "http://example.com", NAME, "--", "touch", "ran"],
        ["--url", "redis://127.0.0.1:99999/0", NAME, "--", "touch", "ran"],
        ["--url", "redis://127.0.0.1:port/0", NAME, "--", "touch", "ran"],
        ["--url", "redis://[::1", NAME, "--", "touch", "ran"],
        ["--url", "", NAME, "--", "touch", "ran"],
        ["--once-per", "0", NAME, "--", "touch", "ran"],
        ["--once-per", "2y", NAME, "--", "touch", "ran"],
        ["--once-per", "400d", NAME, "--", "touch", "ran"],  # past a year
        ["--offset", "60", NAME, "--", "touch", "ran"],  # without --once-per
        [
            "--once-per",
            "1d",
            "--url",
            "redis://a",
            "--url",
            "redis://b",
            "--url",
            "redis://c",
            NAME,
            "--",
            "touch",
            "ran",
        ],  # Redlock: no server for the record
    ],
)
def test_bad_usage_exits_64(tmp_path: Path, args: list[str]) -> None:
    # no server there: input that got past the checks would exit 69 instead
    result = run(*args, cwd=tmp_path, env=_env(FENCELOCK_URL="redis://127.0.0.1:1/0"))
    assert result.returncode == 64, result.stderr
    # one line saying what is wrong (after argparse's usage line), no traceback
    lines = [line for line in result.stderr.splitlines() if not line.startswith("usage:")]
    assert len(lines) == 1 and lines[0].startswith("fencelock"), result.stderr
    assert not (tmp_path / "ran").exists()


def test_once_per_runs_each_period_once_and_a_failed_run_records_nothing(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    """The crontab line of docs/cli.md on every host: the period's first successful run records
    it (fenced), later ticks of the period skip, silently and with status 0."""
    tick = ["--once-per", "1d", "--timeout", "0", "--url", server.url, NAME, "--", "sh", "-c"]
    failed = run(*tick, "exit 3", cwd=tmp_path)
    assert failed.returncode == 3  # not recorded: the next tick runs the period
    assert raw.get(f"fencelock:{{{NAME}}}:once_per") is None
    for _ in range(2):
        ticked = run(*tick, 'echo "$FENCELOCK_TOKEN" >> ran', cwd=tmp_path)
        assert (ticked.returncode, ticked.stdout, ticked.stderr) == (0, "", "")
    assert len((tmp_path / "ran").read_text().split()) == 1  # the second tick skipped
    assert int(raw.get(f"fencelock:{{{NAME}}}:once_per") or -1) >= 0  # the period's number
    assert not raw.exists(KEYS.lock)


def test_once_per_busy_exits_75_and_a_run_that_lost_its_lease_records_nothing(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, spawn: Spawn
) -> None:
    tick = ["--once-per", "1d", "--timeout", "0", "--url", server.url, NAME, "--", "sh", "-c"]
    with fencelock.LockClient.from_url(server.url) as client, client.lock(NAME):
        busy = run(*tick, "touch ran", cwd=tmp_path)
    assert (busy.returncode, busy.stderr) == (75, "")  # busy, not done: the next tick tries
    assert not (tmp_path / "ran").exists()

    proc = spawn("--ttl", "1", *tick, "touch started; sleep 60")
    sync_until(lambda: (tmp_path / "started").exists())
    assert raw.delete(KEYS.lock) == 1  # the lease vanishes under the run
    assert proc.wait(TIMEOUT) == 70
    assert raw.get(f"fencelock:{{{NAME}}}:once_per") is None  # the period is still to do


def test_command_not_found_exits_127(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    result = run("--url", server.url, NAME, "--", str(tmp_path / "missing"), cwd=tmp_path)
    assert result.returncode == 127
    assert "cannot run" in result.stderr
    assert not raw.exists(KEYS.lock)


# -- signals and loss ----------------------------------------------------------------------------


# Traps both signals, deterministically: a shell's trap can miss a signal that arrives while it
# forks its foreground child (the child, between fork and exec, swallows it).
TRAPPER = """
import pathlib, signal, sys

def stop(signum, frame):
    pathlib.Path("marker").write_text(signal.Signals(signum).name)
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
pathlib.Path("started").touch()
while True:
    signal.pause()
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_and_the_lock_released_after(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, spawn: Spawn, signum: int
) -> None:
    if signal.getsignal(signum) == signal.SIG_IGN:
        pytest.skip(f"{signal.Signals(signum).name} is ignored here, so it is for the command")
    proc = spawn("--ttl", "1", "--url", server.url, NAME, "--", sys.executable, "-c", TRAPPER)
    sync_until(lambda: (tmp_path / "started").exists())
    assert raw.exists(KEYS.lock)

    proc.send_signal(signum)

    assert proc.wait(TIMEOUT) == 0  # the command's status: it trapped the signal and exited 0
    assert (tmp_path / "marker").read_text() == signal.Signals(signum).name
    assert not raw.exists(KEYS.lock)


def test_lost_lock_terminates_the_command_and_exits_70(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, spawn: Spawn
) -> None:
    # The sleep runs in the background of the shell: the whole tree must be stopped, not only sh.
    script = "touch started; sleep 60 & echo $! > sleep.pid; wait"
    proc = spawn("--ttl", "1", "--url", server.url, NAME, "--", "sh", "-c", script)
    pid_file = tmp_path / "sleep.pid"
    sync_until(lambda: pid_file.exists() and pid_file.stat().st_size > 0)
    sleep_pid = int(pid_file.read_text())
    try:
        assert raw.delete(KEYS.lock) == 1  # the lease vanishes under the holder

        assert proc.wait(TIMEOUT) == 70
        stderr = proc.communicate()[1]
        assert "lost the lock 'nightly-report'" in stderr
        assert "SIGTERM" in stderr
        sync_until(lambda: _gone(sleep_pid))
    finally:
        if not _gone(sleep_pid):
            os.kill(sleep_pid, signal.SIGKILL)


def test_a_killed_runner_takes_its_command_with_it(
    server: EmbeddedServer, tmp_path: Path, spawn: Spawn
) -> None:
    """SIGKILL of ``fencelock run`` itself: its lease will run out, so the command (the whole
    tree) must not run on without the lock. It used to, re-parented to init."""
    script = "sleep 60 & echo $! > sleep.pid; wait"
    proc = spawn("--ttl", "5", "--url", server.url, NAME, "--", "sh", "-c", script)
    pid_file = tmp_path / "sleep.pid"
    sync_until(lambda: pid_file.exists() and pid_file.stat().st_size > 0)
    sleep_pid = int(pid_file.read_text())
    try:
        proc.kill()
        proc.wait(TIMEOUT)
        sync_until(lambda: _gone(sleep_pid))
    finally:
        if not _gone(sleep_pid):
            os.kill(sleep_pid, signal.SIGKILL)


def test_command_ignoring_sigterm_is_killed_after_the_grace_period(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path, spawn: Spawn
) -> None:
    script = "trap '' TERM; touch started; sleep 60"  # the sleep inherits the ignored TERM
    proc = spawn(
        "--ttl", "1", "--grace", "0.2", "--url", server.url, NAME, "--", "sh", "-c", script
    )
    sync_until(lambda: (tmp_path / "started").exists())
    raw.delete(KEYS.lock)

    assert proc.wait(TIMEOUT) == 70
    stderr = proc.communicate()[1]
    assert "sending SIGKILL" in stderr
    assert "status 137" in stderr


def test_several_urls_mean_redlock(tmp_path: Path, redlock: list[EmbeddedServer]) -> None:
    urls = [arg for srv in redlock for arg in ("--url", srv.url)]
    script = 'echo "$FENCELOCK_TOKEN" > token; test -n "$FENCELOCK_TOKEN"'
    before = []
    for srv in redlock:
        with srv.client() as probe:
            before.append(deleted(probe))
    result = run(*urls, NAME, "--", "sh", "-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    token = (tmp_path / "token").read_text().strip()
    assert int(token) > 0
    granted_and_released = 0
    for srv, dels in zip(redlock, before, strict=True):
        with srv.client() as probe:  # (a release deletes the lock where it was granted)
            granted_and_released += deleted(probe) > dels and not probe.exists(KEYS.lock)
    # on a majority at least: a node slower than the 50 ms node timeout (a loaded machine) may
    # have missed the grant, or may have answered it too late and hold it until the ttl
    assert granted_and_released >= 3
    # held elsewhere on a majority: busy
    for srv in redlock[:3]:
        with srv.client() as probe:
            probe.set(KEYS.lock, "someone-else", px=60_000)
    result = run(*urls, "--timeout", "0", NAME, "--", "touch", "ran", cwd=tmp_path)
    assert result.returncode == 75 and not (tmp_path / "ran").exists()


def test_redlock_without_a_majority_exits_69_and_with_a_busy_majority_75(
    tmp_path: Path, redlock: list[EmbeddedServer]
) -> None:
    nodes = redlock[:3]  # Redlock over 3 masters
    urls = [arg for srv in nodes for arg in ("--url", srv.url)]
    # 2 of 3 hold the name for another client: busy
    for srv in nodes[:2]:
        with srv.client() as probe:
            probe.set(KEYS.lock, "someone-else", px=60_000)
    for timeout in ("0", "0.3"):
        result = run(*urls, "--timeout", timeout, NAME, "--", "touch", "ran", cwd=tmp_path)
        assert result.returncode == 75, result.stderr
        assert result.stderr == ""  # silent, like flock -n
    # 2 of 3 down: an outage, not a busy lock
    for srv in nodes[:2]:
        srv.kill()
    for timeout in ("0", "1"):
        result = run(*urls, "--timeout", timeout, NAME, "--", "touch", "ran", cwd=tmp_path)
        assert result.returncode == 69, result.stderr
        assert result.stderr.startswith("fencelock run: no majority of the 3 servers reachable")
        assert "2 of 3 nodes unreachable" in result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "ran").exists()


def test_redlock_majority_lost_before_the_token_is_read_exits_69(
    tmp_path: Path,
    redlock: list[EmbeddedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In-process, to lose the majority between the grant and the first read of the token
    # (which writes it back to a majority, modes.md): COMMAND must not run without a token.
    # One node's counter ahead of every clock makes the nodes grant different tokens, so the
    # largest must be written back (a token the majority agreed on needs none: safety.md).
    nodes = redlock[:3]
    with nodes[2].client() as probe:
        probe.set(KEYS.fence, time.time_ns() // 1000 + 10**9)  # a thousand seconds ahead
    ran = tmp_path / "ran"
    runner = Runner(
        NAME, ["touch", str(ran)], ttl=10, timeout=0, grace=1, urls=[s.url for s in nodes]
    )
    acquire = Runner._acquire

    def acquire_then_lose_the_majority(self: Runner, lock: Lock) -> bool:
        acquired = acquire(self, lock)
        for srv in nodes[:2]:
            srv.kill()
        return acquired

    monkeypatch.setattr(Runner, "_acquire", acquire_then_lose_the_majority)
    assert runner.run() == 69
    stderr = capsys.readouterr().err
    assert "no majority of the 3 servers reachable" in stderr
    assert "COMMAND not run" in stderr
    assert not ran.exists()
