"""The Celery app of tests/integrations/test_celery.py, run by a real worker: broker, results
and locks on the test's Redis ($FENCELOCK_TEST_CELERY_URL).

Each task tells the test what it does through the list "events" (JSON: what, tag, pid, token)
and waits for the test's go-ahead on "go:<tag>", so the test synchronises on events, never on
sleeps.
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis
from celery import Celery

from fencelock.celery import ExclusiveTask, current_token

URL = os.environ.get("FENCELOCK_TEST_CELERY_URL", "redis://127.0.0.1:6379/0")
TTL = 2.0  # short, so that a killed worker's lock frees quickly

app = Celery("fencelock_tests", broker=URL, backend=URL)
app.conf.update(
    fencelock_url=URL,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    task_default_queue=os.environ.get("FENCELOCK_TEST_CELERY_QUEUE", "celery"),
)

_redis: dict[int, redis.Redis] = {}


def _events() -> redis.Redis:
    pid = os.getpid()
    if pid not in _redis:
        _redis[pid] = redis.Redis.from_url(URL, decode_responses=True, socket_timeout=60)
    return _redis[pid]


def _run(task: ExclusiveTask, tag: str) -> dict[str, Any]:
    r = _events()
    token = task.fencing_token
    r.rpush("events", json.dumps(["begin", tag, os.getpid(), token]))
    r.blpop([f"go:{tag}"], timeout=30)
    r.rpush("events", json.dumps(["end", tag, os.getpid(), token]))
    return {"token": token, "current": current_token(), "pid": os.getpid()}


_options: dict[str, Any] = {"base": ExclusiveTask, "bind": True, "lock_ttl": TTL}


@app.task(**_options, lock_key=["key"], lock_name="hold")
def hold(self: ExclusiveTask, key: str, tag: str) -> dict[str, Any]:
    return _run(self, tag)


@app.task(**_options, lock_key=["key"], lock_name="hold", lock_busy="wait", lock_timeout=30)
def hold_or_wait(self: ExclusiveTask, key: str, tag: str) -> dict[str, Any]:
    return _run(self, tag)


@app.task(**_options, lock_key=lambda key, _: json.dumps(key), lock_name="hold", lock_busy="raise")
def hold_or_raise(self: ExclusiveTask, key: str, tag: str) -> dict[str, Any]:
    return _run(self, tag)


@app.task(**_options, lock_key=["key"], lock_name="hold")
def boom(self: ExclusiveTask, key: str) -> None:
    raise ValueError(f"boom, token {self.fencing_token}")


@app.task
def ping() -> str:
    return "pong"
