"""How long each call takes when the server does not answer (issue 12, item 4).

    python -m bench.bounds [--faults hung,refused,paused] [--calls acquire0,acquire2,held,...]
                           [--clients sync-default,sync-url,async-default,async-url] [--cap 60]

For every fault, client and call: a fresh server (``EmbeddedServer``), a fresh fencelock client,
one lock acquired while the server is up (so held/extend/release have a grant to ask about, over
a connection already made), then the fault, then the call, timed. Faults:

* ``hung``: the server is stopped (SIGSTOP): connections stay open, nothing answers;
* ``refused``: the server is killed: every connection is refused;
* ``paused``: ``CLIENT PAUSE 12000`` (all commands held for 12 s, from another connection).

Clients: ``LockClient(redis.Redis(port=...))`` with redis-py's defaults (no socket timeout,
retries with backoff), ``LockClient.from_url(url)``, and the same two with ``fencelock.asyncio``
and ``redis.asyncio``. Calls: ``acquire(timeout=0)`` and ``acquire(timeout=2)`` of a free name,
``held()``, ``extend()``, ``release()``, ``fenced_set()``.

The bound fencelock promises (docs/api.md, docs/leases.md): the call's timeout plus one request
timeout (fencelock's default socket timeout, 5 s). A call still running at ``--cap`` seconds is
reported as ``>cap`` (the sync call is left running in a daemon thread).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any

import redis
import redis.asyncio

import fencelock
import fencelock.asyncio
from fencelock_tools.servers.embedded import EmbeddedServer

CALLS = ("acquire0", "acquire2", "held", "extend", "release", "fenced_set")
CLIENTS = ("sync-default", "sync-url", "async-default", "async-url")
FAULTS = ("hung", "refused", "paused")
# what each call may take: its timeout plus one request timeout (the default socket timeout)
BOUND = {"acquire2": 2.0 + 5.0}


def _call(lock: Any, client: Any, call: str) -> Any:
    if call == "acquire0":
        return client.lock("free", ttl=10).acquire(timeout=0)
    if call == "acquire2":
        return client.lock("free", ttl=10).acquire(timeout=2)
    if call == "held":
        return lock.held()
    if call == "extend":
        return lock.extend()
    if call == "release":
        return lock.release()
    return client.fenced_set("resource", "v", 1)


def _fault(server: EmbeddedServer, fault: str) -> None:
    if fault == "hung":
        server.pause()
    elif fault == "refused":
        server.kill()
    else:
        with server.client() as probe:
            probe.execute_command("CLIENT", "PAUSE", 12000)


def _outcome(started: float, result: list[Any]) -> str:
    elapsed = time.monotonic() - started
    what = type(result[0]).__name__ if result and isinstance(result[0], BaseException) else "ok"
    return f"{elapsed:6.1f} s {what}"


def measure_sync(server: EmbeddedServer, kind: str, fault: str, call: str, cap: float) -> str:
    if kind == "sync-default":
        client = fencelock.LockClient(redis.Redis(port=server.port))
    else:
        client = fencelock.LockClient.from_url(server.url)
    lock = client.lock("held", ttl=60)
    lock.acquire(timeout=0)
    _fault(server, fault)
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(_call(lock, client, call))
        except BaseException as exc:
            result.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(cap)
    if thread.is_alive():
        return f">{cap:.0f} s"
    return _outcome(started, result)


async def measure_async(
    server: EmbeddedServer, kind: str, fault: str, call: str, cap: float
) -> str:
    if kind == "async-default":
        client = fencelock.asyncio.LockClient(redis.asyncio.Redis(port=server.port))
    else:
        client = fencelock.asyncio.LockClient.from_url(server.url)
    lock = client.lock("held", ttl=60)
    await lock.acquire(timeout=0)
    _fault(server, fault)
    result: list[Any] = []
    started = time.monotonic()
    call_task: Awaitable[Any] = _call(lock, client, call)
    task = asyncio.ensure_future(call_task)
    done, _ = await asyncio.wait((task,), timeout=cap)
    if not done:
        task.cancel()
        return f">{cap:.0f} s"
    try:
        result.append(task.result())
    except BaseException as exc:
        result.append(exc)
    return _outcome(started, result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--calls", default=",".join(CALLS))
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--cap", type=float, default=60.0)
    args = parser.parse_args()
    print(f"fencelock {fencelock.__file__}, redis-py {redis.__version__}")
    for fault in args.faults.split(","):
        for kind in args.clients.split(","):
            for call in args.calls.split(","):
                with EmbeddedServer() as server:
                    if kind.startswith("async"):
                        outcome = asyncio.run(measure_async(server, kind, fault, call, args.cap))
                    else:
                        outcome = measure_sync(server, kind, fault, call, args.cap)
                    if server.process is not None:
                        server.resume()
                bound = BOUND.get(call, 5.0)
                print(
                    f"{fault:8} {kind:14} {call:11} {outcome}   (bound {bound:.0f} s)", flush=True
                )


if __name__ == "__main__":
    main()
