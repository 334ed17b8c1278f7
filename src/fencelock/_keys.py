"""Lock names to Redis keys, and validation of the arguments users pass in.

Every key of one lock shares one hash tag, so that on Redis Cluster the lock key, its fencing
counter and its wake-up channel live in one slot (no CROSSSLOT errors, scripts can touch them all).
The name is escaped so that braces in it can never change which part of the key is the tag:
``%`` -> ``%25``, ``{`` -> ``%7B``, ``}`` -> ``%7D`` (an injective mapping, so two names never
share keys).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PREFIX = "fencelock:"
# Redis keys may be 512 MB, but a name that long is a bug; bound it so errors are clear.
MAX_NAME_LENGTH = 4096
# PX takes a 64-bit integer, but a lease beyond a year is certainly a unit mistake (ms vs s).
MAX_TTL = 365 * 24 * 3600.0
MIN_TTL = 0.001
# A lease must outlast its drift allowance (1% + 2 ms, _core/timing.py) and the grant's round trip
# with room to spare: shorter, the local deadline can pass before the grant's reply arrives.
MIN_LEASE = 0.1


def escape(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@dataclass(frozen=True, slots=True)
class LockKeys:
    """The Redis names that belong to one lock."""

    lock: str  # the holder token (string) or hold counts (hash, reentrant locks)
    # the last fencing token handed out: kept for the lease and until the server's clock has
    # passed it (_scripts/prelude.lua), so an idle name leaves no key
    fence: str
    channel: str  # pub/sub channel: a message on release wakes waiters
    queue: str  # waiters woken one at a time (wake="one"), each on channel + ":" + its id

    @classmethod
    def for_name(cls, name: str, prefix: str = DEFAULT_PREFIX) -> LockKeys:
        base = f"{prefix}{{{escape(name)}}}"
        return cls(
            lock=f"{base}:lock",
            fence=f"{base}:fence",
            channel=f"{base}:released",
            queue=f"{base}:waiters",
        )


@dataclass(frozen=True, slots=True)
class SemaphoreKeys(LockKeys):
    """The Redis names of one semaphore (_scripts/semaphore.lua): ``lock`` is its permits (a
    sorted set holder -> lease end), ``queue`` its waiters in order of arrival."""

    state: str  # hash: the limit (kept), permits per holder and per waiter when more than one
    alive: str  # sorted set: waiter -> the time it must re-try by
    kind: str  # "sem", or "rw": a read-write lock, a semaphore whose writers take every permit

    @classmethod
    def for_semaphore(
        cls, name: str, prefix: str = DEFAULT_PREFIX, kind: str = "sem"
    ) -> SemaphoreKeys:
        base = f"{prefix}{{{escape(name)}}}:{kind}"  # (beside a lock of the same name, apart)
        return cls(
            kind=kind,
            lock=f"{base}:lock",
            fence=f"{base}:fence",
            channel=f"{base}:released",
            queue=f"{base}:waiters",
            state=f"{base}:state",
            alive=f"{base}:alive",
        )


@dataclass(frozen=True, slots=True)
class MultiKeys(LockKeys):
    """The keys of several names taken together by a multi-lock: each name's own lock keys
    (``members``, in canonical order); ``lock``, ``fence``, ``channel`` and ``queue`` are the
    first name's, where one key stands for them all (a waiter's channel, the watchdog's slot)."""

    members: tuple[LockKeys, ...]
    locks: tuple[str, ...]  # each member's lock key
    channels: tuple[str, ...]  # each member's wake-up channel

    @classmethod
    def for_names(cls, names: Sequence[str], prefix: str = DEFAULT_PREFIX) -> MultiKeys:
        members = tuple(LockKeys.for_name(name, prefix) for name in names)
        first = members[0]
        return cls(
            first.lock,
            first.fence,
            first.channel,
            first.queue,
            members,
            tuple(m.lock for m in members),
            tuple(m.channel for m in members),
        )


def renew_keys(lock_keys: Sequence[str]) -> list[str]:
    """KEYS of renew.lua for a batch of lock keys: each lock key, then its fencing counter (the
    lease records only the lock key; the counter's name follows from it)."""
    keys: list[str] = []
    for key in lock_keys:
        base, suffix = key[: -len(":lock")], key[-len(":lock") :]
        assert suffix == ":lock", key
        keys += (key, f"{base}:fence")
    return keys


def encodable(arg: str, value: str) -> str:
    """``value``, checked to be sendable: a lone surrogate has no UTF-8 encoding."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{arg} is not valid Unicode (no UTF-8 encoding): {exc.reason}") from None
    return value


def nonempty_str(arg: str, value: object) -> str:
    """``value``, checked to be a non-empty, sendable ``str`` (the message names ``arg``)."""
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{arg} must not be empty")
    return encodable(arg, value)


def validate_name(name: object, arg: str = "name") -> str:
    name = nonempty_str(arg, name)
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{arg} must be at most {MAX_NAME_LENGTH} characters, got {len(name)}")
    return name


def validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
    if "{" in prefix or "}" in prefix:
        raise ValueError("prefix must not contain '{' or '}' (the hash tag is the library's)")
    return prefix


def _number(arg: str, value: object) -> float:
    # bool is an int subclass, but ttl=True is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{arg} must be a number of seconds, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float (10**400)
        raise ValueError(f"{arg} is out of range: {described(value)}") from None
    if math.isnan(number):
        raise ValueError(f"{arg} must not be NaN")
    return number


def described(value: object, limit: int = 80) -> str:
    """``value`` for an error message: its type, and its repr cut to ``limit`` characters (the
    repr of a client or a pool runs to a thousand)."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(value).__name__} {text}"


def validate_db(db: object) -> int:
    """The database index of a client given to fencelock: checked before any request, since a
    wrong one would only fail at the first lock call (or, from a URL path, not at all). Whether
    the server has that many databases only the server can say (``DatabaseRefused``)."""
    if isinstance(db, str) and db.isdigit():
        db = int(db)
    if isinstance(db, bool) or not isinstance(db, int):
        raise TypeError(f"the client's db must be an int, not {described(db)}")
    if db < 0:
        raise ValueError(f"the client's db must be >= 0, got {db}")
    return db


def validate_url(url: str) -> str:
    """A server URL's database index (its path), which redis-py ignores when it is not a
    number (``redis://host/abc`` would use database 0)."""
    parts = urlsplit(url)
    path = parts.path.lstrip("/")
    if parts.scheme in ("redis", "rediss") and path and not path.isdigit():
        raise ValueError(
            f"url {url!r}: the path must be a database index (a number >= 0), got {path!r}"
        )
    return url


def validate_ttl(ttl: object, arg: str = "ttl", minimum: float = MIN_TTL) -> float:
    """A duration in seconds: finite, at least ``minimum`` (1 ms), at most a year."""
    value = _number(arg, ttl)
    if not minimum <= value <= MAX_TTL:
        raise ValueError(f"{arg} must be between {minimum} and {MAX_TTL} seconds, got {value!r}")
    return value


def validate_timeout(timeout: object, arg: str = "timeout") -> float | None:
    """A wait in seconds: None waits forever, 0 tries once, > 0 waits that long."""
    if timeout is None:
        return None
    value = _number(arg, timeout)
    if value < 0:
        raise ValueError(f"{arg} must be >= 0 or None, got {timeout!r}")
    if math.isinf(value):
        return None
    return value


POLICIES = ("raise", "ignore", "cancel")


def validate_on_lost(on_lost: object, policy: object, *, threads: bool) -> None:
    """The loss signals of a lock: ``threads``, for the sync API, where an ``async def``
    callback cannot be awaited and a thread cannot be cancelled."""
    if on_lost is not None and not callable(on_lost):
        raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
    if threads and on_lost is not None and inspect.iscoroutinefunction(on_lost):
        raise TypeError(
            "on_lost is an async def, which a thread cannot await: pass a plain function "
            "(or use fencelock.asyncio)"
        )
    allowed = POLICIES[:2] if threads else POLICIES
    if policy not in allowed:
        raise ValueError(f"on_lost_policy must be one of {allowed}, got {policy!r}")


def validate_flag(arg: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be a bool, not {type(value).__name__}")
    return value


def ttl_to_ms(ttl: float) -> int:
    return max(1, round(ttl * 1000))


Value = str | bytes | int | float  # what a resource key may be given (redis-py's encoding)


def validate_value(value: object, arg: str = "value") -> Value:
    if not isinstance(value, str | bytes | int | float) or isinstance(value, bool):
        raise TypeError(f"{arg} must be str, bytes, int or float, not {type(value).__name__}")
    if isinstance(value, str):
        encodable(arg, value)
    return value


def validate_resource_key(key: object) -> str:
    return nonempty_str("key", key)


def _hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes, if the key has a valid hash tag."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:  # no closing brace, or an empty tag: the whole key is hashed
        return None
    return key[start + 1 : end]


def _companion(resource: str, role: str) -> str:
    """A key of fencelock's that goes with ``resource``, in the resource's Cluster slot whenever
    that can be expressed: a tagged key keeps its tag; an untagged key becomes the tag. (An
    untagged key containing '}' cannot be a tag; its companions then only work on a single
    server.)"""
    if _hash_tag(resource) is not None or "}" in resource:
        return f"{resource}:fencelock:{role}"
    return f"{{{resource}}}:fencelock:{role}"


def fence_key_for(resource: str) -> str:
    """The companion key that remembers the highest token a fenced resource has seen."""
    return _companion(resource, "fence")


def version_key_for(resource: str) -> str:
    """The companion key that counts the versioned writes of ``resource`` (``versioned``)."""
    return _companion(resource, "version")
