"""fencelock.celery against a real Celery worker (prefork, 2 processes) on the test's server:
the lock is taken when a run starts, held while it runs, freed when it ends, whatever the end,
and one ttl after its worker process is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fencelock import LockClient, LockError
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.conftest import _binary

celery = pytest.importorskip("celery")

from fencelock.celery import ExclusiveTask, TaskBusy, current_token, worker_client  # noqa: E402
from tests.celery_app import TTL  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60  # a generous bound on anything the worker is asked to do


class Worker:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=WAIT + 10)
        self.locks = LockClient.from_url(url)
        env = {**os.environ, "FENCELOCK_TEST_CELERY_URL": url}
        self.log = log.open("w")
        # its own session: the pool processes are stopped with it (killpg by its id)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker",
             "--pool=prefork", "-c", "2", "--loglevel=INFO", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        # the caller's side: an app of its own, sending the worker's tasks by name
        self.app = celery.Celery("caller", broker=url, backend=url)
        assert self.send("ping").get(timeout=WAIT) == "pong"

    def send(self, task: str, *args: object) -> Any:
        return self.app.send_task(f"tests.celery_app.{task}", args=args)

    def event(self) -> tuple[str, str, int, int]:
        """The next thing a task did (what, tag, pid, token)."""
        popped = self.r.blpop(["events"], timeout=WAIT)
        assert popped is not None, "no event from the worker"
        what, tag, pid, token = json.loads(popped[1])
        return what, tag, pid, token

    def go(self, tag: str) -> None:
        self.r.rpush(f"go:{tag}", 1)

    def close(self) -> None:
        self.locks.close()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.r.close()
        self.log.close()
        self.app.close()


@pytest.fixture(scope="module")
def worker(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    # a server of its own: the suite's `raw` fixture flushes its server, and the broker with it
    with EmbeddedServer(_binary(server_kind)) as srv:
        log = tmp_path_factory.mktemp("celery") / "worker.log"
        w = Worker(srv.url, log)
        try:
            yield w
        finally:
            w.close()


def _key() -> str:
    return uuid.uuid4().hex[:12]


def test_same_key_skips_while_a_run_holds_it(worker: Worker) -> None:
    key = _key()
    first = worker.send("hold", key, "a1")
    assert worker.event()[:2] == ("begin", "a1")
    assert worker.send("hold", key, "a2").get(timeout=WAIT) is None  # skipped, did not run
    with pytest.raises(TaskBusy, match="held by another run"):
        worker.send("hold_or_raise", key, "a3").get(timeout=WAIT)
    worker.go("a1")
    result = first.get(timeout=WAIT)
    assert worker.event()[:2] == ("end", "a1")
    assert result["token"] == result["current"] > 0  # self.fencing_token == current_token()
    assert worker.locks.inspect(f"hold:{json.dumps(key)}") is None  # released at the end


def test_different_keys_run_at_once(worker: Worker) -> None:
    runs = [worker.send("hold", _key(), tag) for tag in ("b1", "b2")]
    # both have begun before either is let go: they run at the same time
    assert {worker.event()[:2] for _ in runs} == {("begin", "b1"), ("begin", "b2")}
    for tag in ("b1", "b2"):
        worker.go(tag)
    pids = {run.get(timeout=WAIT)["pid"] for run in runs}
    assert len(pids) == 2
    assert {worker.event()[0] for _ in runs} == {"end"}


def _queued(worker: Worker, name: str) -> None:
    """Returns once a waiter is queued for ``name`` (a state polled, bounded by WAIT)."""
    deadline = time.monotonic() + WAIT
    while True:
        info = worker.locks.inspect(name)
        if info is not None and info.waiters:
            return
        assert time.monotonic() < deadline, f"no waiter queued for {name!r}"
        time.sleep(0.02)


def test_wait_runs_after_the_holder_with_a_larger_token(worker: Worker) -> None:
    key = _key()
    first = worker.send("hold", key, "c1")
    _, _, _, token1 = worker.event()
    second = worker.send("hold_or_wait", key, "c2")
    _queued(worker, f"hold:{json.dumps(key)}")
    worker.go("c1")
    worker.go("c2")
    assert first.get(timeout=WAIT)["token"] == token1
    assert second.get(timeout=WAIT)["token"] > token1
    order = [worker.event()[:2] for _ in range(3)]
    assert order == [("end", "c1"), ("begin", "c2"), ("end", "c2")]


def test_a_run_that_raises_releases_the_lock(worker: Worker) -> None:
    key = _key()
    with pytest.raises(ValueError, match="boom, token"):
        worker.send("boom", key).get(timeout=WAIT)
    assert worker.locks.inspect(f"hold:{json.dumps(key)}") is None
    run = worker.send("hold", key, "d1")  # not skipped: the lock is free
    assert worker.event()[:2] == ("begin", "d1")
    worker.go("d1")
    assert run.get(timeout=WAIT) is not None
    assert worker.event()[:2] == ("end", "d1")


def test_sigkilled_worker_frees_the_lock_after_one_ttl(worker: Worker) -> None:
    key = _key()
    name = f"hold:{json.dumps(key)}"
    doomed = worker.send("hold", key, "e1")
    _, _, pid, token1 = worker.event()
    os.kill(pid, signal.SIGKILL)  # the pool process running the task (the OOM killer's way)
    killed = time.monotonic()
    info = worker.locks.inspect(name)
    assert info is not None and info.token == token1  # the dead run's lease still holds...
    with pytest.raises(Exception, match=r"(?i)worker|signal|lost"):
        doomed.get(timeout=WAIT)
    after = worker.send("hold_or_wait", key, "e2")
    what, tag, _, token2 = worker.event()
    freed = time.monotonic() - killed
    assert (what, tag) == ("begin", "e2")
    assert token2 > token1
    # ...until its ttl (2 s) runs out unrenewed; a generous bound for a loaded machine
    assert freed < TTL + 15
    worker.go("e2")
    assert after.get(timeout=WAIT)["token"] == token2
    assert worker.event()[:2] == ("end", "e2")


# -- declaring tasks (no worker) ------------------------------------------------------------


def _task(name: str, fn: Any, *, conf: dict[str, Any] | None = None, **options: Any) -> Any:
    """``fn`` as an ExclusiveTask made now (a worker makes its tasks, and so checks them, at
    start) and of this app only (not shared with the apps made later)."""
    app = celery.Celery(name)
    app.conf.update(conf or {})
    app.finalize()
    return app.task(base=ExclusiveTask, shared=False, name=name, **options)(fn)


def test_options_are_checked_when_the_task_is_made() -> None:
    def job(user_id: int, region: str = "eu") -> None: ...

    with pytest.raises(ValueError, match="lock_busy"):
        _task("t.1", job, lock_busy="later")
    with pytest.raises(ValueError, match="lock_ttl"):
        _task("t.2", job, lock_ttl=0)
    with pytest.raises(TypeError, match="lock_timeout"):
        _task("t.3", job, lock_timeout="1")
    with pytest.raises(TypeError, match="lock_key"):
        _task("t.4", job, lock_key="user_id")
    with pytest.raises(TypeError, match="lock_key"):
        _task("t.6", job, lock_key=[1])
    with pytest.raises(ValueError, match="names no argument"):
        _task("t.5", job, lock_key=["user"])


def test_lock_names_per_key() -> None:
    def job(user_id: int, region: str = "eu", **extra: Any) -> None: ...

    by_names = _task("t.job", job, lock_key=["user_id", "region"])
    assert by_names.lock_for((7,), {}) == 'celery:t.job:7,"eu"'
    assert by_names.lock_for((), {"user_id": 7, "region": "us"}) == 'celery:t.job:7,"us"'
    whole = _task("t.whole", job)
    assert whole.lock_for((1,), {}) == "celery:t.whole"
    by_fn = _task("t.fn", job, lock_key=lambda user_id, **_: f"u{user_id}")
    assert by_fn.lock_for((3,), {}) == "celery:t.fn:u3"
    with pytest.raises(TypeError, match="must return a str"):
        _task("t.bad", job, lock_key=lambda *a: 3).lock_for((1,), {})


def test_no_token_outside_a_run() -> None:
    with pytest.raises(LockError, match="no fencelock run"):
        current_token()

    def job() -> None: ...

    task = _task("t.nourl", job)
    with pytest.raises(LookupError, match="fencelock_url"):
        task()


def test_a_direct_call_runs_under_the_lock_in_the_calling_process(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    def job(user_id: int) -> int:
        return current_token()

    task = _task("t.direct", job, conf={"fencelock_url": server.url}, lock_key=["user_id"])
    client = worker_client(task.app)
    assert worker_client(task.app) is client  # one per app and process
    first = task(1)
    assert first > 0 and task(1) > first
    with client.lock("celery:t.direct:1", ttl=10):
        assert task(1) is None  # skipped
        assert task(2) > first  # another key
    client.close()


def test_the_client_from_a_factory(server: EmbeddedServer, raw: redis.Redis) -> None:
    def job() -> int:
        return current_token()

    made: list[LockClient] = []

    def factory() -> LockClient:
        made.append(LockClient.from_url(server.url))
        return made[-1]

    task = _task("t.factory", job, conf={"fencelock_client": factory, "fencelock_url": "bad"})
    assert task() > 0 and task() > 0
    assert len(made) == 1 and worker_client(task.app) is made[0]
    made[0].close()
    with pytest.raises(TypeError, match="fencelock_client must be a callable"):
        _task("t.notcallable", job, conf={"fencelock_client": "redis://x"})()
    with pytest.raises(TypeError, match=r"fencelock_client\(\) must return"):
        _task("t.notclient", job, conf={"fencelock_client": lambda: "redis://x"})()
