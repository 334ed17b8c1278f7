"""Leader election against real processes: a leader SIGKILLed, a leader frozen (SIGSTOP) past
its lease; each with a sync and an asyncio candidate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import redis

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer

# argv: url, name, ttl. Prints its term, then after a line on stdin: whether it learnt of the
# loss (on_lost, check()) and whether its term's fenced write was accepted. Each line in one
# write: on_lost prints from the watchdog's thread meanwhile.
SYNC_LEADER = textwrap.dedent(
    """
    import sys, fencelock
    client = fencelock.LockClient.from_url(sys.argv[1])
    el = client.election(sys.argv[2], ttl=float(sys.argv[3]), label="proc",
                         on_lost=lambda e: print("on_lost\\n", end="", flush=True))
    term = el.campaign()
    print(f"{term}\\n", end="", flush=True)
    sys.stdin.readline()
    try:
        el.check()
        print("check passed\\n", end="", flush=True)
    except fencelock.LockLost:
        print("check raised LockLost\\n", end="", flush=True)
    try:
        client.fenced_set("e-data", "written by the old leader", term)
        print("write accepted\\n", end="", flush=True)
    except fencelock.StaleToken:
        print("write refused\\n", end="", flush=True)
    """
)
ASYNC_LEADER = textwrap.dedent(
    """
    import asyncio, sys, fencelock.asyncio

    async def main():
        client = fencelock.asyncio.LockClient.from_url(sys.argv[1])
        el = client.election(sys.argv[2], ttl=float(sys.argv[3]), label="proc",
                             on_lost=lambda e: print("on_lost\\n", end="", flush=True))
        term = await el.campaign()
        print(f"{term}\\n", end="", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        try:
            el.check()
            print("check passed\\n", end="", flush=True)
        except fencelock.LockLost:
            print("check raised LockLost\\n", end="", flush=True)
        try:
            await client.fenced_set("e-data", "written by the old leader", term)
            print("write accepted\\n", end="", flush=True)
        except fencelock.StaleToken:
            print("write refused\\n", end="", flush=True)

    asyncio.run(main())
    """
)
LEADERS = {"sync": SYNC_LEADER, "asyncio": ASYNC_LEADER}


def start_leader(
    flavour: str, url: str, name: str, ttl: float
) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADERS[flavour], url, name, str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("flavour", LEADERS)
def test_a_killed_leaders_successor_leads_after_about_one_ttl(
    server: EmbeddedServer, flavour: str
) -> None:
    ttl = 1.0
    proc, old_term = start_leader(flavour, server.url, f"e-kill-{flavour}", ttl)
    with fencelock.LockClient.from_url(server.url) as client:
        changes = client.election(f"e-kill-{flavour}").observe()
        seen = next(changes)
        assert seen is not None and (seen.label, seen.term) == ("proc", old_term)
        successor = client.election(f"e-kill-{flavour}", ttl=5, label="next")
        proc.kill()  # SIGKILL: no release, no goodbye
        killed = time.monotonic()
        proc.wait()
        term = successor.campaign(timeout=30)
        elapsed = time.monotonic() - killed
        assert term > old_term
        # the dead leader's lease runs out within its ttl; the waiter re-tries at its end
        assert elapsed < ttl + 2.0  # (a bound, with a generous margin for a loaded machine)
        seen = next(changes)
        assert seen is not None and (seen.label, seen.term) == ("next", term)
        changes.close()
        successor.resign()


@pytest.mark.parametrize("flavour", LEADERS)
def test_a_frozen_leader_is_fenced_and_learns_it_lost(
    server: EmbeddedServer, raw: redis.Redis, flavour: str
) -> None:
    name = f"e-frozen-{flavour}"
    proc, old_term = start_leader(flavour, server.url, name, 1.0)
    os.kill(proc.pid, signal.SIGSTOP)  # a GC pause, a swap storm, a VM migration...
    try:
        with fencelock.LockClient.from_url(server.url) as client:
            successor = client.election(name, ttl=10)
            term = successor.campaign(timeout=30)  # once the frozen leader's lease runs out
            assert term > old_term
            client.fenced_set("e-data", "written by the new leader", term)
            os.kill(proc.pid, signal.SIGCONT)
            out, _ = proc.communicate("go\n", timeout=30)
            # on_lost runs once, from the watchdog or from check(): in either order
            assert sorted(out.splitlines()) == ["check raised LockLost", "on_lost", "write refused"]
            assert raw.get("e-data") == "written by the new leader"
            assert successor.leading and successor.held()
            successor.resign()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
