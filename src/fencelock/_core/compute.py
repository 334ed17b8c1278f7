"""Compute once across processes (``compute_once``, ``idempotent``), as plain values and rules
(no I/O): the keys of a computed key, the builder's lease as a kind, what a look at the server
finds, and what a caller does next (``next_step``). ``_async/compute.py`` does the I/O.

A result is built under a lease (a ``Builder``: a simple lock on keys of its own, renewed by the
watchdog) and stored with the lease's fencing token by one script (compute_store.lua), which
refuses a token older than the stored result's, the counter's or the build's under way: a
builder whose lease ran out cannot overwrite a newer build's result, nor store after a newer
build began or a ``forget`` came while it ran. The store publishes on the lease's channel, where
the lease's release publishes too (``Builder``: its waiters do not queue): the waiters look again
when either comes, and when the builder's lease would end (a builder that died). A small result
travels in the store's message (``told``), so its waiters need not read it.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import json
import string
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeAlias, TypeVar

from .._keys import DEFAULT_PREFIX, MAX_NAME_LENGTH, LockKeys, described, escape, validate_name
from .._scripts import load
from ..errors import LockError, ResultError
from .kinds import Kind, Mutex

COMPUTE: Final = "compute"  # compute_once: the metric label, and the family of its keys
IDEMPOTENT: Final = "idempotent"
MAX_SIZE: Final = 512 * 1024  # bytes of an encoded result, by default
MAX_SIZE_LIMIT: Final = 512 * 1024 * 1024  # a Redis string's
# the largest result (encoded) that its store's message carries to every waiting process: far
# below the server's output buffer limit for a subscriber (8 MiB soft, 32 MiB hard, by default)
TOLD_MAX: Final = 64 * 1024

T = TypeVar("T")
# ``compute``: an async callable in fencelock.asyncio, a plain one in fencelock
AsyncCompute: TypeAlias = Callable[[], Awaitable[T]]
SyncCompute: TypeAlias = Callable[[], T]
KeyOf: TypeAlias = str | Callable[..., str]  # ``computed``'s key: a template, or a function

COMPUTE_LOOK: Final = load("compute_look")
COMPUTE_STORE: Final = load("compute_store", "prelude")
COMPUTE_FORGET: Final = load("compute_forget", "prelude")


@dataclass(frozen=True, slots=True)
class ComputeKeys(LockKeys):
    """The keys of one computed key (compute_look.lua): the builder's lease keys (``lock``,
    ``fence``, ``channel``, ``queue``), the ``result`` and the last build's ``failure``."""

    result: str
    failure: str

    @classmethod
    def for_compute(cls, name: str, prefix: str, family: str) -> ComputeKeys:
        base = f"{prefix}{{{escape(name)}}}:{family}"  # (beside a lock of the same name, apart)
        return cls(
            lock=f"{base}:lock",
            fence=f"{base}:fence",
            channel=f"{base}:changed",  # a store and the lease's release publish here
            queue=f"{base}:waiters",  # (unused: a builder never queues)
            result=f"{base}:result",
            failure=f"{base}:failure",
        )

    def looked(self) -> tuple[str, str, str, str]:
        """KEYS of compute_look.lua (and, per family, of compute_forget.lua)."""
        return (self.result, self.lock, self.fence, self.failure)

    def stored(self) -> tuple[str, str, str, str]:
        """KEYS of compute_store.lua."""
        return (self.result, self.fence, self.failure, self.lock)


@dataclass(frozen=True, slots=True)
class Builder(Mutex):
    """The lease of a result's builder: a simple lock on the key's own keys (``family``:
    compute_once's or idempotent's), never handed between lock objects (a build is one
    caller's), on one server or a Cluster (the result needs one place to live)."""

    primitive: str = COMPUTE
    local_handoff: bool = False
    on_quorum: bool = False
    announces: bool = True  # its waiters listen on the channel without queueing
    why_scripts: str = "its result is stored with its fencing token by a script"

    def keys(self, name: str, prefix: str) -> ComputeKeys:
        return ComputeKeys.for_compute(name, prefix, self.primitive)

    def line_tag(self) -> str:
        return self.primitive

    def without_scripts(self) -> Kind | None:
        return None


BUILDERS: Final = MappingProxyType({f: Builder(primitive=f) for f in (COMPUTE, IDEMPOTENT)})


@dataclass(frozen=True, slots=True)
class Failure:
    """The last build that raised, kept a lease's time for its waiters."""

    token: int
    type_name: str
    message: str


@dataclass(frozen=True, slots=True)
class Found:
    """What compute_look.lua found (one moment of the server)."""

    value: bytes | None  # the encoded result stored
    token: int  # its build's fencing token (0: none)
    age: float  # seconds since it was stored (the server's clock)
    fingerprint: bytes | None  # idempotent: the request's that the key was first used with
    building: int | None  # the token of the build under way (the counter); None: no build
    lease_left: float | None  # seconds left of that build's lease (None: no expiry)
    failure: Failure | None


def found_reply(reply: object) -> Found:
    if not isinstance(reply, list) or len(reply) != 9:
        raise LockError(f"unexpected compute look reply {reply!r}")
    value, token, age, fingerprint, pttl, counter, failed, type_name, message = reply
    left = _int(pttl)
    failure = None
    if failed is not None:
        failure = Failure(_int(failed), _text(type_name), _text(message))
    return Found(
        _bytes(value),
        _int(token),
        _int(age) / 1000,
        _bytes(fingerprint),
        None if left == -2 else _int(counter or 0),
        None if left < 0 else left / 1000,
        failure,
    )


def told(message: bytes | None, waited_for: int | None) -> Found | None:
    """The result a store's message carries (compute_store.lua: ``v<token>:<result>``), as it
    was when stored, if it is the result of the build ``waited_for`` or of a later one; None
    otherwise, and for any other message (a plain ``v``, a release's, a failure's): the waiter
    looks."""
    if message is None or not message.startswith(b"v"):
        return None
    token, colon, value = message[1:].partition(b":")
    if not colon or not token.isdigit() or int(token) < (waited_for or 0):
        return None
    return Found(value, int(token), 0.0, None, None, None, None)


def stored_reply(reply: object) -> tuple[bool, int, bytes | None]:
    """compute_store.lua's reply: (stored, the stored result's token, the stored result)."""
    if not isinstance(reply, list) or not reply or (reply[0] != 1 and len(reply) != 3):
        raise LockError(f"unexpected compute store reply {reply!r}")
    if reply[0] == 1:
        return True, 0, None
    return False, _int(reply[1]), _bytes(reply[2])


def _int(value: object) -> int:
    if isinstance(value, int | bytes | str):
        with contextlib.suppress(ValueError):
            return int(value)
    raise LockError(f"unexpected reply element {value!r}")


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Step(enum.Enum):
    """What a caller does with what it found (``next_step``)."""

    HIT = "hit"  # a fresh result: return it
    WAITED = "waited"  # the result of the build this call waited for: return it
    FAILED = "failed"  # the build this call waited for raised: ComputeFailed
    STALE = "stale"  # a stale result, which another caller refreshes: return it
    REFRESH = "refresh"  # a stale result nobody refreshes: refresh it (busy: return it)
    WAIT = "wait"  # another caller builds it: wait for its store or its lease's end
    BUILD = "build"  # nothing usable, and nobody builds it: build it (busy: wait)


def next_step(found: Found, fresh_for: float, stale_for: float, waited_for: int | None) -> Step:
    """What a caller that asks for a result fresh for ``fresh_for`` seconds (or stale for
    ``stale_for`` more) does next; ``waited_for``: the token of the build it has waited for
    (None: it has not waited), whose result it takes however old, and whose failure it shares."""
    stored = found.value is not None
    if stored and found.age < fresh_for:
        return Step.HIT
    if waited_for is not None:
        if stored and found.token >= waited_for:
            return Step.WAITED
        if found.failure is not None and found.failure.token >= waited_for:
            return Step.FAILED
    if stored and found.age < fresh_for + stale_for:
        return Step.STALE if found.building is not None else Step.REFRESH
    return Step.WAIT if found.building is not None else Step.BUILD


# -- what callers pass ------------------------------------------------------------------------


class Codec(Protocol):
    """How results are stored: ``dumps(value) -> bytes`` and ``loads(bytes) -> value`` (the
    ``json`` and ``pickle`` modules have them; a str from ``dumps`` is stored as UTF-8)."""

    def dumps(self, value: Any, /) -> bytes | str: ...

    def loads(self, data: bytes, /) -> Any: ...


class JsonCodec:
    """The default codec: compact JSON in UTF-8. Whoever can write to the server can make a
    reader decode what it wrote; JSON decodes to data only, where pickle would run code."""

    __slots__ = ()

    def dumps(self, value: Any, /) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

    def loads(self, data: bytes, /) -> Any:
        return json.loads(data)

    def __repr__(self) -> str:
        return "JSON"


JSON: Final = JsonCodec()


def check_codec(codec: object) -> Codec:
    if codec is None:
        return JSON
    for method in ("dumps", "loads"):
        if not callable(getattr(codec, method, None)):
            raise TypeError(
                f"codec must have dumps() and loads() (bytes), as the json and pickle modules "
                f"have: {described(codec)} has no {method}()"
            )
    return codec  # type: ignore[return-value]  # (its methods checked above)


def check_compute(compute: object, *, threads: bool) -> Callable[[], Any]:
    """``compute``, checked callable (``threads``: the sync API, where an ``async def`` could
    not be awaited)."""
    if not callable(compute):
        raise TypeError(f"compute must be callable, not {described(compute)}")
    if threads and inspect.iscoroutinefunction(compute):
        raise TypeError(
            "compute is an async def, which a thread cannot await: pass a plain function "
            "(or use fencelock.asyncio)"
        )
    return compute


def check_max_size(max_size: object) -> int:
    if isinstance(max_size, bool) or not isinstance(max_size, int):
        raise TypeError(f"max_size must be an int (bytes), not {type(max_size).__name__}")
    if not 1 <= max_size <= MAX_SIZE_LIMIT:
        raise ValueError(f"max_size must be from 1 to {MAX_SIZE_LIMIT} bytes, got {max_size}")
    return max_size


def check_fingerprint(fingerprint: object) -> bytes | None:
    if fingerprint is None:
        return None
    if isinstance(fingerprint, str):
        fingerprint = fingerprint.encode("utf-8", "surrogatepass")
    if not isinstance(fingerprint, bytes):
        raise TypeError(f"fingerprint must be a str, bytes or None, not {described(fingerprint)}")
    if not 1 <= len(fingerprint) <= MAX_NAME_LENGTH:
        shown = len(fingerprint)
        raise ValueError(f"fingerprint must be 1 to {MAX_NAME_LENGTH} bytes, got {shown}")
    return fingerprint


def encoded(codec: Codec, value: object, max_size: int, key: str) -> bytes:
    """``value`` as stored; ``ResultError`` when the codec refuses it or it is too large."""
    try:
        data = codec.dumps(value)
    except Exception as exc:
        raise ResultError(
            f"the result of {key!r} cannot be stored: {codec!r} refused "
            f"{type(value).__name__}: {type(exc).__name__}: {exc}",
            key,
        ) from exc
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ResultError(f"{codec!r}.dumps returned {described(data)}, not bytes", key)
    data = bytes(data)
    if len(data) > max_size:
        raise ResultError(
            f"the result of {key!r} is {len(data)} bytes encoded, over max_size "
            f"({max_size}): nothing is stored",
            key,
        )
    return data


def decoded(codec: Codec, data: bytes, key: str) -> Any:
    try:
        return codec.loads(data)
    except Exception as exc:
        raise ResultError(
            f"the result stored for {key!r} cannot be read by {codec!r}: "
            f"{type(exc).__name__}: {exc} (stored by a caller with another codec?)",
            key,
        ) from exc


def failure_args(exc: BaseException, limit: int = 1000) -> tuple[str, str]:
    """What the waiters of a build that raised ``exc`` learn of it: the type's qualified name
    and the message, cut to ``limit`` characters."""
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    return name, str(exc)[:limit]


def keys_of_families(name: str, prefix: str = DEFAULT_PREFIX) -> Sequence[str]:
    """KEYS of compute_forget.lua: every family's (one hash tag)."""
    return [key for b in BUILDERS.values() for key in b.keys(name, prefix).looked()]


def check_key_of(key: object, fn: Callable[..., Any]) -> inspect.Signature:
    """``computed``'s ``key`` for ``fn``: a function of its arguments, or a template whose
    fields name its parameters (``"user:{user_id}"``). Returns ``fn``'s signature."""
    signature = inspect.signature(fn)
    if callable(key):
        return signature
    if not isinstance(key, str):
        raise TypeError(f"key must be a str template or a function, not {described(key)}")
    parsed = string.Formatter().parse(key)
    fields = {f.split(".")[0].split("[")[0] for _, f, _, _ in parsed if f is not None}
    unknown = sorted(fields - set(signature.parameters))
    if unknown:
        raise ValueError(
            f"key {key!r}: each {{field}} must name a parameter of {fn.__qualname__} "
            f"{tuple(signature.parameters)}, not {', '.join(map(repr, unknown))}"
        )
    return signature


def key_for(key: KeyOf, signature: inspect.Signature, args: Any, kwargs: Any) -> str:
    """The key of one call of a ``computed`` function (``args``, ``kwargs``)."""
    if callable(key):
        return validate_name(key(*args, **kwargs), "key")
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return validate_name(key.format_map(bound.arguments), "key")
