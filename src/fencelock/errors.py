"""The exception tree.

Every error fencelock raises on purpose is a ``LockError``; invalid arguments are plain
``ValueError``/``TypeError`` naming the argument. ``LockLost`` subclasses ``LockNotOwned`` so that
one ``except LockNotOwned`` covers "never had it" and "had it, lost it".
"""

from __future__ import annotations


class LockError(Exception):
    """Base class of every fencelock error."""


class LockTimeout(LockError):
    """The lock could not be acquired within the timeout (raised by ``with``)."""


class LockNotOwned(LockError):
    """This lock object does not hold the lock, so nothing was released or extended."""


class LockLost(LockNotOwned):
    """The lease was lost while the lock was believed held (expired, deleted or taken over)."""


class StaleToken(LockError):
    """A fenced write carried a token older than one the resource has already seen."""

    def __init__(self, key: str, token: int, seen: int) -> None:
        super().__init__(f"stale fencing token {token} for {key!r}: {seen} was already seen")
        self.key = key
        self.token = token
        self.seen = seen


class Conflict(LockError):
    """A conditional write was refused: the value changed since it was read (``fenced_update``:
    someone wrote it without a fencing token, or with this very token)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class TooManyConflicts(Conflict):
    """A versioned ``update`` lost the race on every one of its tries: nothing was written."""

    def __init__(self, key: str, tries: int) -> None:
        super().__init__(f"{key!r} changed under each of {tries} tries to update it", key)
        self.tries = tries


class NotReplicated(LockError):
    """Fewer replicas than ``min_replicas`` acknowledged a grant or extension in time (``WAIT``):
    a failover could lose it, so an acquire gave the lock back."""

    def __init__(self, message: str, acked: int, wanted: int) -> None:
        super().__init__(message)
        self.acked = acked
        self.wanted = wanted


class ClientClosed(LockError):
    """The client was closed: it, and every object it made, refuse every call (make a new
    client)."""


class LockConnectionError(LockError):
    """The server could not be reached, or did not answer in time."""


class DatabaseRefused(LockError, ValueError):
    """The server refused the client's database index (``redis://host/16`` on a server with 16
    databases). Only the server knows how many it has, so this comes with the first request,
    not when the client is made; a ``ValueError`` too, since the argument was wrong."""

    def __init__(self, db: int, reply: str) -> None:
        super().__init__(
            f"the server refused database index {db} ({reply}): it has fewer databases "
            "(16 unless its 'databases' setting says otherwise)"
        )
        self.db = db


class ScriptsRequired(LockError):
    """What was asked for needs Lua scripts, and this client runs none: it was made with
    ``scripts="never"``, or its server refused a script (docs/modes.md, "Without scripts"). Only
    plain locks are kept without scripts, and only on a server with a native compare-and-delete
    (Valkey >= 9.0, Redis >= 8.4)."""


class ComputeFailed(LockError):
    """The build of a result that this call waited for raised (``compute_once``,
    ``idempotent``): its own caller got the exception, and the callers that waited for it get
    this, with the exception's type name and message, instead of all building again at once.
    The next call builds afresh."""

    def __init__(self, key: str, type_name: str, message: str) -> None:
        super().__init__(f"the build of {key!r} this call waited for raised {type_name}: {message}")
        self.key = key
        self.type_name = type_name
        self.message = message


class ResultError(LockError, ValueError):
    """A result that cannot be stored (its codec refused it, or it is larger than
    ``max_size`` encoded: nothing is stored), or a stored result its codec cannot read back."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class FingerprintMismatch(LockError):
    """``idempotent``: the key was used by a request with another fingerprint (the request body's
    digest, say): a repeat must be the same request. Nothing was run."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was used with another fingerprint: a repeat must carry "
            "the same request"
        )
        self.key = key
