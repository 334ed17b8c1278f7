"""``fencelock elect`` and ``fencelock leader`` end to end: the real commands against a real
server, with real child processes and signals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

import fencelock
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from tests.cli.test_cli_run import _env
from tests.concurrency import TIMEOUT

NAME = "scheduler"
KEYS = LockKeys.for_name(NAME)
# prints its term and token, then runs until told to stop (its SIGTERM handler says so)
LEADING = (
    'echo "$FENCELOCK_TERM $FENCELOCK_TOKEN"; trap "echo stopped; exit 0" TERM; '
    "while :; do sleep 0.05; done"
)


def fencelock_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fencelock", *args]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        fencelock_cmd(*args), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )


def spawn(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        fencelock_cmd(*args),
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()  # forwarded to COMMAND
    return proc.communicate(timeout=TIMEOUT)


def test_runs_the_command_as_leader_and_resigns(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    script = 'echo "$FENCELOCK_TERM $FENCELOCK_TOKEN $FENCELOCK_NAME"; exit 3'
    result = run("elect", "--url", server.url, NAME, "--", "sh", "-c", script, cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    term, token, name = result.stdout.split()
    assert term == token and int(term) > 0 and name == NAME
    assert raw.exists(KEYS.lock) == 0  # resigned when COMMAND exited


def test_leader_shows_the_running_leader(server: EmbeddedServer, tmp_path: Path) -> None:
    proc = spawn("elect", "--url", server.url, "--label", "box-1", NAME, "--",
                 "sh", "-c", LEADING, cwd=tmp_path)  # fmt: skip
    try:
        assert proc.stdout is not None
        term = int(proc.stdout.readline().split()[0])
        shown = run("leader", "--url", server.url, NAME, "--json", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        now = json.loads(shown.stdout)
        assert (now["label"], now["term"]) == ("box-1", term)
        assert 0 < now["ttl"] <= 10
        text = run("leader", "--url", server.url, NAME, cwd=tmp_path)
        assert "box-1" in text.stdout and str(term) in text.stdout
        # a second candidate that will not wait: not elected, COMMAND not run
        busy = run("elect", "--url", server.url, "--timeout", "0", NAME, "--", "echo", "ran",
                   cwd=tmp_path)  # fmt: skip
        assert busy.returncode == 75 and busy.stdout == ""
    finally:
        out, _ = stop(proc)
    assert proc.returncode == 0 and "stopped" in out
    gone = run("leader", "--url", server.url, NAME, cwd=tmp_path)
    assert gone.returncode == 1 and "no leader" in gone.stdout
    assert (
        json.loads(run("leader", "--url", server.url, NAME, "--json", cwd=tmp_path).stdout) is None
    )


def test_a_standby_takes_over_when_the_leader_ends(server: EmbeddedServer, tmp_path: Path) -> None:
    first = spawn("elect", "--url", server.url, NAME, "--", "sh", "-c", LEADING, cwd=tmp_path)
    assert first.stdout is not None
    first_term = int(first.stdout.readline().split()[0])
    standby = spawn("elect", "--url", server.url, NAME, "--", "sh", "-c", LEADING, cwd=tmp_path)
    try:
        stop(first)
        assert standby.stdout is not None
        assert int(standby.stdout.readline().split()[0]) > first_term
    finally:
        stop(standby)


def test_losing_the_leadership_stops_the_command_and_exits_70(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    proc = spawn("elect", "--url", server.url, "--ttl", "0.6", NAME, "--",
                 "sh", "-c", LEADING, cwd=tmp_path)  # fmt: skip
    assert proc.stdout is not None
    term = int(proc.stdout.readline().split()[0])
    with fencelock.LockClient.from_url(server.url) as client:
        client.force_release(NAME)  # deposed: the next renewal finds it gone
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 70, err
    assert "stopped" in out  # COMMAND got SIGTERM
    # in the election's words, with the cause the library found (it said "lost the lock ...:
    # its lease expired or was taken over", neither true of a deposed leader; issue 29)
    said = f"fencelock elect: lost the leadership of {NAME!r} (term {term}) while COMMAND was "
    assert (
        said + f"running: candidate {NAME!r}: the lease is lost: the server no longer had it" in err
    )
    assert "the only leader" in err and "(leadership lost)" in err
    assert "lock" not in err.replace("fencelock", ""), err


def test_usage_and_unreachable(tmp_path: Path) -> None:
    missing = run("elect", NAME, cwd=tmp_path)
    assert missing.returncode == 64 and "missing COMMAND" in missing.stderr
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert run("elect", "--url", url, NAME, "--", "true", cwd=tmp_path).returncode == 69
    assert run("leader", "--url", url, NAME, cwd=tmp_path).returncode == 69
    assert run("leader", NAME, "--", "x", cwd=tmp_path).returncode == 64
