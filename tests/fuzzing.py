"""What the fuzz tests of both APIs share (tests/engine/_async/test_fuzz.py, its generated sync
twin, and tests/core/test_fuzz.py): the sentinel keys, the snapshots, the strategies, and what
the documentation says each input should give.

Hypothesis reuses fixtures across the examples of one test, so every example resets the
database itself (``reset``).
"""

from __future__ import annotations

import itertools
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fencelock._keys import MAX_NAME_LENGTH, MAX_TTL, MIN_TTL

SYNC_FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# the asyncio pass: the same properties on fewer examples (the generator turns ASYNC_FUZZ in
# tests/engine/_async/test_fuzz.py into SYNC_FUZZ)
ASYNC_FUZZ = settings(SYNC_FUZZ, max_examples=40)
SMALL = settings(SYNC_FUZZ, max_examples=40)  # properties that wait

# A holder token as stored in Redis: 20 random bytes, url-safe base64 without padding.
HOLDER = re.compile(rb"[A-Za-z0-9_-]{27,}")

# -- the sentinel keys: present in every example, never to be touched --------------------------

SENTINELS: dict[str, tuple[str, Any]] = {
    # another lock, held (a simple one and a reentrant one), with their fencing counters
    "fencelock:{other}:lock": ("string", b"holder-of-another-lock"),
    "fencelock:{other}:fence": ("string", b"41"),
    "fencelock:{other-r}:lock": ("hash", {b"someone-else": b"2"}),
    "fencelock:{other-r}:fence": ("string", b"7"),
    # keys no name can map to (a raw brace inside the tag, no tag, an empty tag, a raw '%')
    "fencelock:{x}y}:lock": ("string", b"raw brace"),
    "fencelock:{{x}}:lock": ("string", b"double brace"),
    "fencelock:x:lock": ("string", b"no tag"),
    "fencelock:{}:fence": ("string", b"9"),
    "fencelock:{%}:lock": ("string", b"raw percent"),
    # a fenced resource and its companion, and the application's own keys of every type
    "other": ("string", b"resource value"),
    "{other}:fencelock:fence": ("string", b"5"),
    "queue": ("list", [b"a", b"b"]),
    "tags": ("set", [b"x", b"y"]),
    "ranks": ("zset", {b"m": 1.0}),
    "events": ("stream", {b"f": b"v"}),
}
SENTINEL_KEYS = frozenset(SENTINELS)
HELD_SENTINELS = ("fencelock:{other}:lock", "fencelock:{other-r}:lock")  # with a 10 min ttl


def put(pipe: Any, key: str, kind: str, payload: Any) -> None:
    """Write a value of Redis type ``kind`` at ``key``."""
    if kind == "string":
        pipe.set(key, payload)
    elif kind == "list":
        pipe.rpush(key, *payload)
    elif kind == "hash":
        pipe.hset(key, mapping=payload)
    elif kind == "set":
        pipe.sadd(key, *payload)
    elif kind == "zset":
        pipe.zadd(key, payload)
    elif kind == "stream":
        pipe.xadd(key, payload, id="1-1")
    else:
        raise AssertionError(kind)


def reset(store: redis.Redis) -> None:
    """An empty database but for the sentinels."""
    pipe = store.pipeline(transaction=False)
    pipe.flushdb()
    for key, (kind, payload) in SENTINELS.items():
        put(pipe, key, kind, payload)
    for key in HELD_SENTINELS:
        pipe.pexpire(key, 600_000)
    pipe.execute()


Snapshot = dict[bytes, tuple[bytes | None, bool]]


def snapshot(store: redis.Redis) -> Snapshot:
    """Every key: its serialized value and whether it has an expiry."""
    keys = store.keys("*")
    pipe = store.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    replies = pipe.execute()
    return {k: (replies[2 * i], replies[2 * i + 1] != -1) for i, k in enumerate(keys)}


def changed(before: Snapshot, after: Snapshot) -> set[bytes]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


# -- strategies ------------------------------------------------------------------------------

TRICKY_NAMES = [
    "{", "}", "{a}", "}{", "{}", "%", "%7B", "%7D", "%25", "%%7B", "a}b{c", "{{a}}",
    "other}:lock", "{other}", "fencelock:{other}:lock", ":", " ", "\x00", "\n", "*", "?",
    "[a-z]", "é", "🔒", "\u202e", "\ufeff", "\U0010ffff",
]  # fmt: skip

names = st.one_of(
    st.text(),  # any str hypothesis makes (it makes no lone surrogates: see the tests below)
    st.text(alphabet="{}%7BDa25:", max_size=16),
    st.sampled_from(TRICKY_NAMES),
    st.builds(  # around the length limit, in characters of 1 to 4 UTF-8 bytes
        lambda c, n: c * n,
        st.sampled_from(["x", "{", "}", "%", "é", "🔒"]),
        st.integers(MAX_NAME_LENGTH - 2, MAX_NAME_LENGTH + 2),
    ),
)

# anything a user might pass where seconds are expected
anything = st.one_of(
    st.floats(),
    st.integers(-(10**30), 10**30),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.sampled_from(
        [
            0,
            -0.0,
            MIN_TTL,
            MIN_TTL / 2,
            MIN_TTL * 1.5,
            MAX_TTL,
            math.nextafter(MAX_TTL, math.inf),
            math.inf,
            -math.inf,
            math.nan,
            5e-324,
            2**63,
            2**64,
            "1",
            b"1",
            [1],
            1j,
        ]
    ),
    st.decimals(allow_nan=True),
    st.fractions(),
)

values = st.one_of(
    st.text(),
    st.binary(),
    st.integers(-(2**80), 2**80),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.sampled_from([bytearray(b"x"), Decimal(1), Fraction(1, 2)]),
)
tokens = st.one_of(
    st.integers(-3, 2**70),
    st.integers(1, 6),  # small ones, so that stale tokens are common
    st.booleans(),
    st.floats(),
    st.text(max_size=3),
    st.none(),
)
# valid arguments half of the time, so that writes and stale tokens are common
writes = st.one_of(
    st.tuples(
        st.one_of(st.text(), st.binary(), st.integers(), st.floats()),
        st.one_of(st.integers(1, 8), st.integers(1, 2**70)),
    ),
    st.tuples(values, tokens),
)
resource_keys = st.one_of(
    st.text(min_size=1, max_size=30),
    st.text(max_size=30),
    st.sampled_from(["{", "}", "{a}", "a{b}c", "}{", "{}", "%", "stock:1", "stock:{1}", "x}"]),
    st.binary(max_size=4),
    st.integers(),
)


def is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


COUNTER = itertools.count()


def fresh_name(stem: str) -> str:
    """A name no earlier example used (lock objects of one client queue locally per name)."""
    return f"{stem}-{next(COUNTER)}"


CLIENT_OPTIONS = ["max_poll", "min_replicas", "replica_timeout", "node_timeout", "max_handoffs"]

SURROGATE_NAME = "job-\ud800"


def fenced_set_problems(key: object, value: object, token: object) -> set[str]:
    """The arguments the documentation says are invalid."""
    problems = set()
    if not isinstance(key, str) or not key:
        problems.add("key")
    if isinstance(value, bool) or not isinstance(value, str | bytes | int | float):
        problems.add("value")
    if isinstance(token, bool) or not isinstance(token, int) or not 0 < token < 2**63:
        problems.add("token")
    return problems


def stored_form(value: str | bytes | int | float) -> bytes:
    """What GET returns after a write of ``value`` (redis-py's encoding)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return repr(value).encode()


LOCK_KEY_KINDS = ["none", "string", "list", "hash", "set", "zset", "stream"]


def payload_for(kind: str, blob: bytes) -> Any:
    return {
        "string": blob,
        "list": [blob],
        "hash": {b"field": blob},
        "set": [blob],
        "zset": {blob: 1.0},
        "stream": {b"field": blob},
    }[kind]


def counter_value(text: bytes) -> int | None:
    """The token a fencing counter holds (a decimal integer without sign or leading zeros that
    can still be counted on in 64 bits), or None if it holds none."""
    if not re.fullmatch(rb"0|[1-9][0-9]*", text) or int(text) >= 2**63 - 1:
        return None
    return int(text)


fence_states = st.one_of(
    st.just(("none", b"")),
    st.tuples(st.just("string"), st.integers(0, 2**63 - 1).map(lambda i: str(i).encode())),
    st.tuples(st.just("string"), st.binary(max_size=12)),  # mostly garbage
    st.tuples(st.just("string"), st.sampled_from([b"", b"01", b"-0", b" 1", b"1.5", b"1e3"])),
    st.tuples(st.sampled_from(["hash", "list"]), st.binary(max_size=4)),
)


def expected_acquire(lock_kind: str, fence: tuple[str, bytes], reentrant: bool) -> str:
    if lock_kind == "none":
        kind, text = fence
        if kind == "none" or (kind == "string" and counter_value(text) is not None):
            return "granted"
        return "error"
    # a lock of either kind (a string, a hash): somebody else's holder
    if lock_kind in ("string", "hash"):
        return "busy"
    return "error"
