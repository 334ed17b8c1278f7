"""Holder labels: a human name for who holds a lock, shown by ``inspect`` and ``fencelock ls``.

A label is a str, or a callable evaluated at each acquire in the acquiring thread or task
(``holder_label`` is one): the thread that takes a lock differs per acquire, while the lock
object and its client are made once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable

from ._core.replies import validate_label

Label = str | Callable[[], str] | None


def holder_label() -> str:
    """``host:pid:thread``, and ``:task`` inside an asyncio task: pass the function itself
    (``label=fencelock.holder_label``) so that it names whoever acquires."""
    label = f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        task = None
    return label if task is None else f"{label}:{task.get_name()}"


def check_label(label: object) -> Label:
    """A label argument: a str (checked now), a callable (checked at each acquire), or None."""
    if callable(label):
        return label
    return validate_label(label)


def label_now(label: Label) -> str | None:
    """The label to store with a grant being requested now."""
    if callable(label):
        try:
            return validate_label(label())
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"the label callable {label!r}: {exc}") from None
    return label
