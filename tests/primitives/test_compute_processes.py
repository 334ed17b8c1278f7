"""compute_once against real builder processes: one SIGKILLed mid-build is replaced when its
lease ends; one SIGSTOPped past its lease, whose build was taken over meanwhile, cannot store
its late result over the newer one (fenced), and returns the newer one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import redis

import fencelock
from fencelock._core.compute import COMPUTE, ComputeKeys
from fencelock._core.replies import lock_value
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT, SyncCall, sync_until

BUILDER = """
import json, sys, fencelock
client = fencelock.LockClient.from_url(sys.argv[1])

def build():
    print("building", flush=True)
    sys.stdin.readline()  # killed or stopped here
    return "from the first builder"

print(json.dumps(client.compute_once("report", build, fresh_for=60, ttl=1)), flush=True)
client.close()
"""


def start(server: EmbeddedServer) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDER, server.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "building\n"
    return proc


def test_a_builder_killed_mid_build_is_replaced(server: EmbeddedServer, raw: redis.Redis) -> None:
    proc = start(server)
    try:
        with fencelock.LockClient.from_url(server.url) as client:
            waiter = SyncCall(
                lambda: client.compute_once("report", lambda: "from the second", fresh_for=60)
            )
            sync_until(lambda: client.statistics().waiting == 1)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(TIMEOUT)
            assert waiter.result() == "from the second"  # once the dead builder's lease ended
            stats = client.statistics()
            assert (stats.compute_takeovers, stats.compute_builds) == (1, 1)
        result = ComputeKeys.for_compute("report", "fencelock:", COMPUTE).result
        assert raw.hget(result, "v") == '"from the second"'
    finally:
        proc.kill()


def test_a_builder_paused_past_its_lease_cannot_store_over_a_newer_result(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    proc = start(server)
    keys = ComputeKeys.for_compute("report", "fencelock:", COMPUTE)
    try:
        paused_token = lock_value(raw.get(keys.lock))[1]  # its lease's key holds it
        assert paused_token is not None
        os.kill(proc.pid, signal.SIGSTOP)  # its watchdog stops too: the lease runs out
        with fencelock.LockClient.from_url(server.url) as client:
            got = client.compute_once("report", lambda: "from the second", fresh_for=60)
            assert got == "from the second"
            assert client.statistics().compute_takeovers == 1
        newer = int(raw.hget(keys.result, "f") or 0)
        assert newer > paused_token
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("done\n")  # its build ends now, long after its lease
        proc.stdin.flush()
        # its store refused, it returns the newer result
        assert json.loads(proc.stdout.readline()) == "from the second"
        assert proc.wait(TIMEOUT) == 0
        assert raw.hget(keys.result, "v") == '"from the second"'
        assert int(raw.hget(keys.result, "f") or 0) == newer
    finally:
        proc.kill()
