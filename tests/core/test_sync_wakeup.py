"""SyncWakeup, the threads' wake-up of a watch (a lock that ``set()`` releases), without a
server: it behaves as the event it replaces for its one waiter."""

from __future__ import annotations

import threading

from fencelock._backend import SyncWakeup


def test_set_clear_and_wait_as_an_event() -> None:
    wakeup = SyncWakeup()
    assert not wakeup.is_set() and not wakeup.wait(0)
    wakeup.set()
    assert wakeup.is_set() and wakeup.wait(0) and wakeup.wait(None)  # stays set when waited
    wakeup.set()  # set twice: still one event
    assert wakeup.wait(0)
    wakeup.clear()
    assert not wakeup.is_set() and not wakeup.wait(0)
    wakeup.clear()  # cleared twice
    assert not wakeup.wait(0.001) and not wakeup.wait(-1.0)
    wakeup.set()
    assert wakeup.wait(0)


def test_a_set_from_another_thread_ends_a_wait_without_a_timeout() -> None:
    wakeup, woken = SyncWakeup(), []
    waiting = threading.Thread(target=lambda: woken.append(wakeup.wait(None)))
    waiting.start()
    wakeup.set()
    waiting.join()
    assert woken == [True]


def test_a_set_before_the_wait_is_not_lost() -> None:
    wakeup = SyncWakeup()
    setter = threading.Thread(target=wakeup.set)
    setter.start()
    setter.join()
    assert wakeup.wait(None)


def test_a_set_the_clear_overtook_leaves_it_clear() -> None:
    """(The race of ``set()`` and ``clear()``, in the order that leaves the lock free.)"""
    wakeup = SyncWakeup()
    wakeup._set = True  # set() has stored its flag ...
    wakeup.clear()  # ... clear() stores its own and finds the lock held ...
    wakeup._lock.release()  # ... and set() releases it
    assert not wakeup.wait(None)  # returns at once, as if timed out, clear
    assert not wakeup.is_set() and not wakeup.wait(0)  # and is a clear event again
    wakeup.set()
    assert wakeup.wait(None)
