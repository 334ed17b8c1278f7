"""celery-once, celery-singleton and fencelock.celery against real workers: a worker SIGKILLed
mid-task, and a task that runs longer than its lock's timeout.

    python -m bench.celery_peers               # about a minute
    python -m bench.celery_peers --wait 30     # give each peer longer to free its lock

A real worker (``celery worker --pool=prefork -c 2``, on a server started here: broker, results
and locks) runs each peer's task:

1. Killed: the task blocks; the pool process running it is SIGKILLed (the OOM killer's way), and
   the same task is sent again every 0.2 s until a new run begins, or for ``--wait`` seconds.
   Reported: the seconds until the next run began, and the lock key's remaining TTL at the end.
2. Too long: the task runs 4 s, its lock's timeout is 2 s (celery-once ``timeout``, fencelock
   ``lock_ttl``); it is sent every 0.2 s for 8 s. Reported: the most runs at once.

celery-once takes its lock when the task is sent (``SET NX`` with a fixed timeout, one hour by
default) and deletes it when the task returns, whoever holds it by then; celery-singleton takes
it when the task is sent (``SETNX``, no expiry by default) and deletes it when the task succeeds
or fails. A killed run returns nothing, so neither deletes it. fencelock.celery takes the lock
when the run starts and renews it while the run lasts; the dead run's lease runs out one ttl
after the kill. (celery-singleton has no timeout, so it does not take part in 2.)

Needs the ``bench`` extra (celery_once, celery-singleton, celery). The app below is also what the
worker loads (``-A bench.celery_peers``), configured from $FENCELOCK_BENCH_URL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery_once import AlreadyQueued, QueueOnce
from celery_singleton import Singleton

from fencelock._keys import LockKeys
from fencelock.celery import ExclusiveTask
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

URL = os.environ.get("FENCELOCK_BENCH_URL", "redis://127.0.0.1:6379/0")
TTL = 2.0
ROOT = Path(__file__).resolve().parent.parent
NAME = "bench.celery_peers"  # the tasks' names, also when run as __main__

app = Celery("celery_peers", broker=URL, backend=URL)
app.conf.update(
    fencelock_url=URL,
    ONCE={"backend": "celery_once.backends.Redis", "settings": {"url": URL}},
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


def _run(name: str, seconds: float) -> None:
    """Say it has begun, run ``seconds`` (the workload), and record its span."""
    r = redis.Redis.from_url(URL, socket_timeout=seconds + 60)
    began = time.time()
    r.rpush("begun", f"{name} {os.getpid()}")
    r.blpop(["never"], timeout=seconds)
    r.rpush(f"spans:{name}", f"{began} {time.time()}")


@app.task(base=QueueOnce, name=f"{NAME}.with_celery_once")  # type: ignore[untyped-decorator]
def with_celery_once(seconds: float) -> None:
    _run("celery-once", seconds)


@app.task(  # type: ignore[untyped-decorator]
    base=QueueOnce, name=f"{NAME}.with_celery_once_short", once={"timeout": TTL}
)
def with_celery_once_short(seconds: float) -> None:
    _run("celery-once", seconds)


@app.task(base=Singleton, name=f"{NAME}.with_celery_singleton")  # type: ignore[untyped-decorator]
def with_celery_singleton(seconds: float) -> None:
    _run("celery-singleton", seconds)


@app.task(base=ExclusiveTask, name=f"{NAME}.with_fencelock", lock_ttl=TTL, lock_key=["seconds"])  # type: ignore[untyped-decorator]
def with_fencelock(seconds: float) -> None:
    _run("fencelock", seconds)


def _begun(r: redis.Redis, timeout: float) -> int | None:
    """The pid of the next run that begins within ``timeout`` seconds, else None."""
    popped = r.blpop(["begun"], timeout=timeout)
    return None if popped is None else int(popped[1].split()[1])


def _killed(r: redis.Redis, name: str, task: Any, key: str, wait: float) -> tuple[str, str, str]:
    task.delay(300)
    pid = _begun(r, 60)
    assert pid is not None, f"{name}: the first run did not begin"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    again: float | None = None
    while again is None and time.monotonic() - killed < wait:
        # celery-once raises; celery-singleton hands back the dead run's result; a fencelock
        # run begins, or skips while the dead run's lease holds
        with contextlib.suppress(AlreadyQueued):
            task.delay(300)
        if (pid := _begun(r, 0.2)) is not None:
            again = time.monotonic() - killed
            os.kill(pid, signal.SIGKILL)  # (its pool slot is needed next)
    keys = r.keys(key)
    ttl = r.pttl(keys[0]) if keys else None
    return (
        name,
        f"{again:.1f} s" if again is not None else f"not within {wait:.0f} s",
        "no key" if ttl is None else "no expiry" if ttl == -1 else f"expires in {ttl / 1000:.0f} s",
    )


def _too_long(r: redis.Redis, name: str, task: Any) -> int:
    """The most runs at once of a task of 2 ttl sent every 0.2 s for 4 ttl."""
    sent = []
    start = time.monotonic()
    while time.monotonic() - start < 4 * TTL:
        with contextlib.suppress(AlreadyQueued):
            sent.append(task.delay(2 * TTL))
        time.sleep(0.2)  # the sender's pace, not a synchronisation
    for result in sent:
        result.get(timeout=120)
    spans = [tuple(map(float, span.split())) for span in r.lrange(f"spans:{name}", 0, -1)]
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery_peers", description=__doc__)
    parser.add_argument("--wait", type=float, default=10.0, help="seconds per peer (default 10)")
    parser.add_argument("--log", type=Path, help="the worker's log (default: discarded)")
    args = parser.parse_args(argv)
    peers = [
        ("celery-once", with_celery_once, "qo_*"),
        ("celery-singleton", with_celery_singleton, "SINGLETONLOCK_*"),
        ("fencelock", with_fencelock, LockKeys.for_name(with_fencelock.lock_for((300,), {})).lock),
    ]
    rows = []
    with EmbeddedServer(find_server("redis")) as srv:
        app.conf.update(broker_url=srv.url, result_backend=srv.url, fencelock_url=srv.url)
        app.conf.ONCE["settings"]["url"] = srv.url
        env = {**os.environ, "FENCELOCK_BENCH_URL": srv.url}
        log = args.log.open("w") if args.log else subprocess.DEVNULL
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", NAME, "worker",
             "--pool=prefork", "-c", "2", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        r = redis.Redis.from_url(srv.url, decode_responses=True, socket_timeout=120)
        try:
            for name, task, key in peers:
                rows.append(_killed(r, name, task, key, args.wait))
            overlaps = [
                (name, _too_long(r, name, task))
                for name, task in [
                    ("celery-once", with_celery_once_short),
                    ("fencelock", with_fencelock),
                ]
            ]
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    print(f"1. A worker SIGKILLed mid-task (fencelock lock_ttl={TTL} s):\n")
    print("| peer | the task ran again after | its lock key at the end |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n2. A 4 s task, its lock's timeout {TTL} s, sent every 0.2 s for 8 s:\n")
    print("| peer | most runs at once |")
    print("|---|---|")
    for name, most in overlaps:
        print(f"| {name} | {most} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
