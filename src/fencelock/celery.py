"""Celery tasks that run at most once at a time (per argument key), under a fenced lease.

::

    app.conf.fencelock_url = "redis://..."  # or fencelock_client = a factory

    @app.task(base=ExclusiveTask, bind=True, lock_key=["user_id"], lock_ttl=30)
    def sync_user(self, user_id):
        ...  # self.fencing_token (or current_token()) goes with every write

The lock is bound to the execution, not to the message: taken in the worker when the task
starts running, renewed while it runs (so a long task keeps it and a SIGKILLed worker stops
renewing it: it frees itself one ttl later), and released when the task ends, whatever the end.
docs/celery.md compares this with locks taken at enqueue time (tests/integrations/test_celery.py).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, ClassVar

from celery import Celery, Task

from ._context import current_token, running
from ._keys import MIN_LEASE, validate_timeout, validate_ttl
from ._sync.client import LockClient
from .errors import LockTimeout

__all__ = ["BUSY_MODES", "ExclusiveTask", "TaskBusy", "current_token", "worker_client"]

logger = logging.getLogger("fencelock.celery")

# skip: return None at once; raise: TaskBusy at once (for autoretry_for); wait: up to
# lock_timeout, then TaskBusy
BUSY_MODES = ("skip", "raise", "wait")

_clients: weakref.WeakKeyDictionary[Celery, LockClient] = weakref.WeakKeyDictionary()
_clients_guard = threading.Lock()


class TaskBusy(LockTimeout):
    """Another run of the task (with the same key) holds the lock: raised with
    ``lock_busy="raise"``, and with ``"wait"`` once ``lock_timeout`` has passed."""


def worker_client(app: Celery) -> LockClient:
    """This process's client for ``app``'s locks, made at its first use: in a prefork pool each
    child makes its own, and the main process, which runs no task, none.
    ``app.conf.fencelock_client``: a callable returning a ``LockClient``; else
    ``app.conf.fencelock_url``: a URL (a list of URLs: Redlock)."""
    with _clients_guard:
        client = _clients.get(app)
        if client is not None:
            return client
        factory = app.conf.get("fencelock_client")
        url = app.conf.get("fencelock_url")
        if factory is not None:
            if not callable(factory):
                raise TypeError(
                    f"fencelock_client must be a callable returning a LockClient, "
                    f"not {type(factory).__name__}"
                )
            client = factory()
            if not isinstance(client, LockClient):
                raise TypeError(
                    f"fencelock_client() must return a fencelock.LockClient, "
                    f"not {type(client).__name__}"
                )
        elif url is not None:
            client = LockClient.from_url(url)
        else:
            raise LookupError(
                "fencelock.celery needs app.conf.fencelock_url (a Redis URL) or "
                "app.conf.fencelock_client (a callable returning a LockClient)"
            )
        _clients[app] = client
        return client


def _option(cls: type, name: str) -> Any:
    """A task option as given: a function given as ``lock_key=`` is a class attribute, and
    reading it through the class or an instance would bind it."""
    value = inspect.getattr_static(cls, name)
    return value.__func__ if isinstance(value, staticmethod) else value


class ExclusiveTask(Task):  # type: ignore[misc]  # celery is untyped
    """A task base class: at most one run at a time of the task, or of each key of it.

    Options (``@app.task(base=ExclusiveTask, lock_ttl=..., ...)`` or a subclass's attributes):

    * ``lock_key``: None (one run of the task at a time), a list of argument names (one run per
      combination of their values), or a callable taking the task's arguments and returning a
      str;
    * ``lock_ttl``: the lease in seconds (default 30), renewed every ttl/3 while the task runs:
      how long a run's lock outlives a worker killed in the middle of it;
    * ``lock_busy``: what a run does when another holds the lock: ``"skip"`` (default; the task
      returns None and logs it), ``"raise"`` (``TaskBusy``), ``"wait"`` (up to ``lock_timeout``
      seconds, None: as long as it takes, holding a pool slot meanwhile; then ``TaskBusy``);
    * ``lock_name``: the lock's name before the key (default ``"celery:" + task name``).

    The body reads its fencing token as ``self.fencing_token`` (bound tasks) or
    ``fencelock.celery.current_token()``. A lease lost while the task ran (a worker paused
    past it, the server unreachable) fails the run with ``LockLost`` once the body is done.
    """

    abstract = True
    lock_key: ClassVar[Sequence[str] | Callable[..., str] | None] = None
    lock_ttl: ClassVar[float] = 30.0
    lock_busy: ClassVar[str] = "skip"
    lock_timeout: ClassVar[float | None] = None
    lock_name: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Checked when the task class is made (a worker makes them all at start), not when
        # its first run is due.
        validate_ttl(cls.lock_ttl, "lock_ttl", minimum=MIN_LEASE)
        validate_timeout(cls.lock_timeout, "lock_timeout")
        if cls.lock_busy not in BUSY_MODES:
            raise ValueError(f"lock_busy must be one of {BUSY_MODES}, got {cls.lock_busy!r}")
        if cls.lock_name is not None and not isinstance(cls.lock_name, str):
            raise TypeError(f"lock_name must be a str, not {type(cls.lock_name).__name__}")
        key = _option(cls, "lock_key")
        if key is None or callable(key):
            return
        if isinstance(key, str) or not isinstance(key, Sequence):
            raise TypeError(
                f"lock_key must be a list of argument names or a callable, not {type(key).__name__}"
            )
        if not key or not all(isinstance(name, str) for name in key):
            raise TypeError(f"lock_key must be a non-empty list of argument names, got {key!r}")
        run = cls.__dict__.get("run")
        if run is None:
            return  # an abstract subclass: checked in the task classes made from it
        params = inspect.signature(run.__func__ if isinstance(run, staticmethod) else run)
        known = set(params.parameters)
        if not any(p.kind is p.VAR_KEYWORD for p in params.parameters.values()):
            unknown = [name for name in key if name not in known]
            if unknown:
                raise ValueError(f"lock_key names no argument of the task: {unknown}")

    @property
    def fencing_token(self) -> int:
        """The fencing token of the run in progress (``LockError`` outside a run)."""
        return current_token()

    def lock_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The name of the lock a run with these arguments takes."""
        name = self.lock_name if self.lock_name is not None else f"celery:{self.name}"
        key = _option(type(self), "lock_key")
        if key is None:
            return name
        if callable(key):
            part = key(*args, **kwargs)
            if not isinstance(part, str):
                raise TypeError(f"lock_key must return a str, not {type(part).__name__}")
        else:
            signature = inspect.signature(self.run)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
            for param in signature.parameters.values():
                if param.kind is param.VAR_KEYWORD:  # (its names, checked only now)
                    values.update(values.pop(param.name, {}))
            missing = [n for n in key if n not in values]
            if missing:
                raise TypeError(f"{self.name}: lock_key arguments not given: {missing}")
            part = ",".join(json.dumps(values[n], sort_keys=True, default=str) for n in key)
        return f"{name}:{part}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.lock_for(args, kwargs)
        wait = self.lock_timeout if self.lock_busy == "wait" else 0
        lock = worker_client(self.app).lock(name, self.lock_ttl, timeout=wait, auto_renew=True)
        with ExitStack() as stack:
            try:
                stack.enter_context(lock)
            except LockTimeout:
                if self.lock_busy == "skip":
                    logger.info("fencelock: %s skipped: %r is held by another run", self.name, name)
                    return None
                raise TaskBusy(f"{self.name}: {name!r} is held by another run") from None
            with running(lock.token):
                return super().__call__(*args, **kwargs)
