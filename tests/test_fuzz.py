"""Fuzzing the inputs against a real server (issue 6, item 4).

Names (any ``str``: unicode, empty, very long, braces and percent signs that look like hash tags
or like escapes), ttls, timeouts, client options, fencing tokens, values, resource keys, and keys
that hold a value of another Redis type. The properties:

* only the documented errors: ``ValueError``/``TypeError`` naming the argument, or a
  ``fencelock.LockError`` (never a raw redis-py exception);
* nothing of another lock or key is touched: every example starts from the same set of sentinel
  keys (among them keys that look like another lock's keys), and a snapshot of every key, its
  value (``DUMP``) and whether it has an expiry is compared before and after;
* a lock leaves nothing behind but its fencing counter;
* two different names never share a key.

Hypothesis reuses fixtures across the examples of one test, so every example resets the
database itself. The asyncio API gets a smaller pass of the same properties at the end.

Tests at the end pin what this pass found (and what was fixed): lone surrogates in names, keys
and values; ``socket_timeout`` validated; a companion key of ``fenced_set`` holding garbage;
fencing counters beyond 2**53.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._sync.client import LockClient
from fencelock.keys import (
    MAX_NAME_LENGTH,
    MAX_TTL,
    MIN_TTL,
    LockKeys,
    escape,
    fence_key_for,
    ttl_to_ms,
)
from fencelock_tools.servers.embedded import EmbeddedServer

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SMALL = settings(FUZZ, max_examples=40)  # the asyncio pass, and properties that wait

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


def release_quietly(*locks: Any) -> None:
    """Leave every hold of ``locks`` (after a failed check: so the next example starts clean)."""
    for lock in locks:
        with contextlib.suppress(Exception):
            for _ in range(10):
                lock.release()


@contextlib.contextmanager
def cleanup(*locks: Any) -> Iterator[None]:
    try:
        yield
    except BaseException:
        release_quietly(*locks)
        raise


@contextlib.asynccontextmanager
async def async_cleanup(*locks: Any) -> AsyncIterator[None]:
    try:
        yield
    except BaseException:
        for lock in locks:
            with contextlib.suppress(Exception):
                for _ in range(10):
                    await lock.release()
        raise


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


# -- fixtures: one server per kind, one client for the whole module --------------------------


@pytest.fixture(scope="module")
def store(server: EmbeddedServer) -> Iterator[redis.Redis]:
    """Raw access (bytes) for setting up and inspecting the server."""
    client = server.client()
    yield client
    client.flushall()
    client.close()


@pytest.fixture(scope="module")
def locks(server: EmbeddedServer) -> Iterator[LockClient]:
    with LockClient.from_url(server.url) as client:
        yield client


@pytest.fixture(scope="module")
def rival(server: EmbeddedServer) -> Iterator[LockClient]:
    """Another client: another process, as far as the locks can tell."""
    with LockClient.from_url(server.url) as client:
        yield client


COUNTER = itertools.count()


def fresh_name(stem: str) -> str:
    """A name no earlier example used (lock objects of one client queue locally per name)."""
    return f"{stem}-{next(COUNTER)}"


# -- names ---------------------------------------------------------------------------------


@FUZZ
@given(name=names, reentrant=st.booleans(), depth=st.integers(1, 3), ttl=st.floats(1, 60))
def test_any_name_round_trip_touches_only_its_own_keys(
    store: redis.Redis,
    locks: LockClient,
    rival: LockClient,
    name: str,
    reentrant: bool,
    depth: int,
    ttl: float,
) -> None:
    reset(store)
    before = snapshot(store)
    if not name or len(name) > MAX_NAME_LENGTH:
        with pytest.raises(ValueError, match=r"^name "):
            locks.lock(name, ttl)
        assert snapshot(store) == before
        return
    keys = LockKeys.for_name(name)
    assume(not {keys.lock, keys.fence} & SENTINEL_KEYS)
    holds = depth if reentrant else 1
    lock = locks.lock(name, ttl, reentrant=reentrant)
    with cleanup(lock):
        for _ in range(holds):
            assert lock.acquire(timeout=0)
        token = lock.token
        assert token == int(store.get(keys.fence))
        stored = store.hkeys(keys.lock) if reentrant else [store.get(keys.lock)]
        assert len(stored) == 1
        assert stored[0] is not None and HOLDER.fullmatch(stored[0])
        assert 0 < store.pttl(keys.lock) <= ttl_to_ms(ttl)
        assert lock.held()
        assert not rival.lock(name, ttl, reentrant=reentrant).acquire(timeout=0)
        assert changed(before, snapshot(store)) == {keys.lock.encode(), keys.fence.encode()}
        for _ in range(holds):
            lock.release()
    # the counter: the last token, kept for the lease and until the server's clock passed it
    assert changed(before, snapshot(store)) <= {keys.fence.encode()}
    assert store.get(keys.fence) in (str(token).encode(), None)


@settings(FUZZ, max_examples=500)
@given(data=st.data(), prefix=st.text(max_size=8).filter(lambda p: "{" not in p and "}" not in p))
def test_two_names_never_share_a_key(data: st.DataObject, prefix: str) -> None:
    a = data.draw(names, label="a")
    mutations = [
        escape(a),
        a.replace("%25", "%"),
        a.replace("{", "%7B").replace("}", "%7D"),
        a.replace("%7B", "{").replace("%7D", "}"),
        "{" + a,
        a + "}",
        a + "}:lock",
        a + "}:fence",
        a[:-1],
    ]
    b = data.draw(st.one_of(names, st.sampled_from(mutations)), label="b")
    assume(a != b)
    ka, kb = LockKeys.for_name(a, prefix), LockKeys.for_name(b, prefix)
    family_a, family_b = {ka.lock, ka.fence, ka.channel}, {kb.lock, kb.fence, kb.channel}
    assert len(family_a) == 3
    assert not family_a & family_b
    # the whole escaped name is the hash tag: one Cluster slot for the family, braces or not
    # (the empty name, refused by lock(), would make an empty tag, which Redis ignores)
    for key in family_a:
        start = key.index("{")
        assert key[start + 1 : key.index("}", start)] == escape(a)
    assert len({key_slot(k.encode()) for k in family_a}) == 1 or not a
    # and the escaping can be undone, so it is injective
    unescaped = re.sub("%(25|7B|7D)", lambda m: {"25": "%", "7B": "{", "7D": "}"}[m[1]], escape(a))
    assert unescaped == a


# -- ttls and timeouts ------------------------------------------------------------------------


@FUZZ
@given(ttl=anything)
def test_any_ttl_is_used_or_refused_naming_it(
    store: redis.Redis, locks: LockClient, ttl: Any
) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("ttl")
    keys = LockKeys.for_name(name)
    try:
        lock = locks.lock(name, ttl)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("ttl ")
        wrong_type = isinstance(ttl, bool) or not isinstance(ttl, int | float)
        assert isinstance(exc, TypeError) == wrong_type
        assert snapshot(store) == before
        return
    assert is_seconds(ttl) and MIN_TTL <= ttl <= MAX_TTL  # only sane leases get this far
    with cleanup(lock):
        assert lock.acquire(timeout=0)
        pttl = store.pttl(keys.lock)
        assert pttl <= ttl_to_ms(ttl) and (pttl > 0 or ttl < 1)  # (a short lease may be gone)
        try:
            lock.release()
        except fencelock.LockNotOwned:
            assert ttl < 1  # a lease of a few milliseconds can run out before the release
    assert changed(before, snapshot(store)) == {keys.fence.encode()}


@FUZZ
@given(ttl=anything)
def test_extend_with_any_ttl(store: redis.Redis, locks: LockClient, ttl: Any) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("extend")
    keys = LockKeys.for_name(name)
    lock = locks.lock(name, 600)
    with cleanup(lock):
        assert lock.acquire(timeout=0)
        try:
            lock.extend(ttl)
        except (ValueError, TypeError) as exc:
            assert str(exc).startswith("ttl ")
            assert store.pttl(keys.lock) > 590_000  # the lease was left alone
        else:
            if ttl is None:  # documented: the lock's own ttl
                ttl = lock.ttl
            assert is_seconds(ttl) and MIN_TTL <= ttl <= MAX_TTL
            assert store.pttl(keys.lock) <= ttl_to_ms(ttl)
        with contextlib.suppress(fencelock.LockNotOwned):  # a lease extended to 1 ms
            lock.release()
    assert changed(before, snapshot(store)) == {keys.fence.encode()}


@FUZZ
@given(timeout=anything, where=st.sampled_from(["lock", "acquire"]))
def test_any_timeout_is_used_or_refused_naming_it(
    store: redis.Redis, locks: LockClient, timeout: Any, where: str
) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("timeout")
    try:
        if where == "lock":
            lock = locks.lock(name, 30, timeout=timeout)
            got = lock.acquire()
        else:
            lock = locks.lock(name, 30)
            got = lock.acquire(timeout=timeout)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("timeout ")
        assert snapshot(store) == before
        return
    assert timeout is None or (is_seconds(timeout) and timeout >= 0)
    assert got is True  # uncontended: granted at once, whatever the wait allowed
    lock.release()
    assert changed(before, snapshot(store)) == {LockKeys.for_name(name).fence.encode()}


@SMALL
@given(timeout=st.one_of(st.just(0), st.just(5e-324), st.floats(0, 0.05)))
def test_a_busy_lock_is_given_up_in_time(
    store: redis.Redis, locks: LockClient, rival: LockClient, timeout: float
) -> None:
    reset(store)
    name = fresh_name("busy")
    holder = rival.lock(name, 30)
    assert holder.acquire(timeout=0)
    with cleanup(holder):
        before = snapshot(store)
        started = time.monotonic()
        assert locks.lock(name, 30).acquire(timeout=timeout) is False
        assert time.monotonic() - started < timeout + 1
        assert snapshot(store) == before
        holder.release()


CLIENT_OPTIONS = ["max_poll", "min_replicas", "replica_timeout", "node_timeout", "max_handoffs"]


@FUZZ
@given(option=st.sampled_from([*CLIENT_OPTIONS, "prefix"]), value=st.one_of(anything, st.text()))
def test_client_options_are_used_or_refused_naming_them(
    server: EmbeddedServer, store: redis.Redis, option: str, value: Any
) -> None:
    reset(store)
    before = snapshot(store)
    extra: dict[str, Any] = {"replica_timeout": 0.01} if option == "min_replicas" else {}
    with redis.Redis(port=server.port, socket_timeout=5, socket_connect_timeout=5) as r:
        try:
            client = LockClient(r, **{option: value, **extra})
        except (ValueError, TypeError) as exc:
            assert str(exc).startswith(option)
            return
        with client:
            if option == "prefix":
                assert isinstance(value, str) and "{" not in value and "}" not in value
            elif not (option == "node_timeout" and value is None):  # None: derived per lock
                assert is_seconds(value)
            lock = client.lock("options", 30)
            try:
                got = lock.acquire(timeout=0)
            except fencelock.LockError:  # NotReplicated, or WAIT refusing a huge count
                assert option == "min_replicas" and value > 0
            else:
                assert got
                assert store.exists(f"{client.prefix}{{options}}:lock")
                lock.release()
    keys = LockKeys.for_name("options", client.prefix)
    assert changed(before, snapshot(store)) <= {keys.fence.encode()}


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "5"], ids=repr)
def test_socket_timeout_is_refused_naming_it(server: EmbeddedServer, value: Any) -> None:
    client = None
    try:
        with pytest.raises((ValueError, TypeError), match="socket_timeout"):
            client = LockClient.from_url(server.url, socket_timeout=value)
            client.lock(fresh_name("socket-timeout"), 5).acquire(timeout=0)
    finally:
        if client is not None:
            client.close()


# -- names that cannot be sent: lone surrogates ----------------------------------------------

SURROGATE_NAME = "job-\ud800"


def test_a_name_that_cannot_be_encoded_is_refused_naming_it(server: EmbeddedServer) -> None:
    with LockClient.from_url(server.url) as client, pytest.raises(ValueError, match="name"):
        client.lock(SURROGATE_NAME, 5).acquire(timeout=0)


def test_a_name_that_cannot_be_encoded_fails_fast_every_time(server: EmbeddedServer) -> None:
    with LockClient.from_url(server.url) as client:
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(ValueError):
                client.lock(SURROGATE_NAME, 5).acquire(timeout=0.3)
            assert time.monotonic() - started < 0.25


@pytest.mark.parametrize("argument", ["key", "value"])
def test_fenced_set_refuses_unencodable_text_naming_it(locks: LockClient, argument: str) -> None:
    key, value = ("res-\udcff", "v") if argument == "key" else ("res", "v-\udcff")
    with pytest.raises(ValueError, match=f"^{argument} "):
        locks.fenced_set(key, value, 1)


# -- fenced writes ----------------------------------------------------------------------------


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


@FUZZ
@given(key=resource_keys, sequence=st.lists(writes, min_size=1, max_size=6))
def test_fenced_set_writes_iff_the_token_is_not_stale(
    store: redis.Redis, locks: LockClient, key: Any, sequence: list[tuple[Any, Any]]
) -> None:
    reset(store)
    companion = fence_key_for(key) if isinstance(key, str) and key else None
    assume(key not in SENTINEL_KEYS and companion not in SENTINEL_KEYS)
    before = snapshot(store)
    highest, current = 0, None
    for value, token in sequence:
        problems = fenced_set_problems(key, value, token)
        try:
            locks.fenced_set(key, value, token)
        except (ValueError, TypeError) as exc:
            assert str(exc).split()[0] in problems, (exc, problems)
            event("refused")
            continue
        except fencelock.StaleToken as exc:
            assert not problems and token < highest
            assert (exc.key, exc.token, exc.seen) == (key, token, highest)
            event("stale")
            continue
        assert not problems and token >= highest
        event("written")
        assert isinstance(key, str) and companion is not None
        highest, current = token, stored_form(value)
        assert store.get(key) == current
        assert store.get(companion) == str(token).encode()
    touched = changed(before, snapshot(store))
    assert touched <= ({key.encode(), companion.encode()} if companion else set())
    if current is not None:
        assert store.get(key) == current


# -- keys of the wrong type -------------------------------------------------------------------

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


@FUZZ
@given(
    lock_kind=st.sampled_from(LOCK_KEY_KINDS),
    fence=fence_states,
    blob=st.binary(max_size=16),
    reentrant=st.booleans(),
    timeout=st.sampled_from([0, 0.02]),
)
def test_keys_of_the_wrong_type_give_a_lock_error_and_stay_as_they_were(
    store: redis.Redis,
    locks: LockClient,
    lock_kind: str,
    fence: tuple[str, bytes],
    blob: bytes,
    reentrant: bool,
    timeout: float,
) -> None:
    reset(store)
    name = fresh_name("wrong")
    keys = LockKeys.for_name(name)
    pipe = store.pipeline(transaction=False)
    if lock_kind != "none":
        put(pipe, keys.lock, lock_kind, payload_for(lock_kind, blob))
    if fence[0] != "none":
        put(pipe, keys.fence, fence[0], payload_for(fence[0], fence[1]))
    pipe.execute()
    before = snapshot(store)
    lock = locks.lock(name, 30, reentrant=reentrant)
    outcome = "busy"
    with cleanup(lock):
        try:
            if lock.acquire(timeout=timeout):
                outcome = "granted"
        except fencelock.LockError as exc:
            assert type(exc) is fencelock.LockError  # not a timeout, not a connection error
            assert isinstance(exc.__cause__, redis.exceptions.ResponseError)
            assert keys.lock in str(exc)
            outcome = "error"
        assert outcome == expected_acquire(lock_kind, fence, reentrant)
        event(outcome)
        if outcome == "granted":
            counter = counter_value(fence[1]) if fence[0] == "string" else 0
            assert counter is not None
            token, (seconds, micros) = lock.token, store.time()
            # counted on from the counter, or the server's clock in microseconds when ahead
            assert token == counter + 1 or counter < token <= seconds * 10**6 + micros
            lock.release()
            assert changed(before, snapshot(store)) == {keys.fence.encode()}
            assert store.get(keys.fence) == str(token).encode()
        else:
            assert snapshot(store) == before


@pytest.mark.parametrize("reentrant", [False, True], ids=["simple", "reentrant"])
def test_tokens_stay_exact_beyond_2_to_the_53(
    store: redis.Redis, locks: LockClient, reentrant: bool
) -> None:
    reset(store)
    name = fresh_name("big-counter")
    keys = LockKeys.for_name(name)
    store.set(keys.fence, 2**53)
    tokens = []
    for _ in range(2):
        lock = locks.lock(name, 30, reentrant=reentrant)
        assert lock.acquire(timeout=0)
        tokens.append(lock.token)
        lock.release()
    assert store.get(keys.fence) == str(2**53 + 2).encode()
    assert tokens == [2**53 + 1, 2**53 + 2]


@FUZZ
@given(
    kind=st.sampled_from([k for k in LOCK_KEY_KINDS if k != "none"] + ["deleted"]),
    reentrant=st.booleans(),
    operation=st.sampled_from(["release", "extend", "held", "acquire-again"]),
)
def test_a_lock_key_replaced_by_another_type_while_held(
    store: redis.Redis, locks: LockClient, kind: str, reentrant: bool, operation: str
) -> None:
    """Somebody overwrote the lock key while it was held: every operation reports it as a
    LockError (``LockNotOwned``/``LockLost`` included) or as not held, and leaves the foreign
    value alone."""
    reset(store)
    name = fresh_name("replaced")
    keys = LockKeys.for_name(name)
    lock = locks.lock(name, 30, reentrant=reentrant)
    assert lock.acquire(timeout=0)
    with cleanup(lock):
        store.delete(keys.lock)
        if kind != "deleted":
            pipe = store.pipeline(transaction=False)
            put(pipe, keys.lock, kind, payload_for(kind, b"foreign"))
            pipe.execute()
        before = snapshot(store)
        try:
            if operation == "release":
                lock.release()
            elif operation == "extend":
                lock.extend()
            elif operation == "held":
                assert lock.held() is False
            elif reentrant:
                lock.acquire(timeout=0)  # a re-entry that finds the count gone
            else:
                with pytest.raises(fencelock.LockError, match="already held"):
                    lock.acquire(timeout=0)
        except fencelock.LockError:
            pass
        release_quietly(lock)
        assert snapshot(store) == before


@pytest.mark.parametrize("token", [1, 12345])
def test_fenced_set_with_a_garbage_companion_key(
    store: redis.Redis, locks: LockClient, token: int
) -> None:
    reset(store)
    companion = fence_key_for("res")
    store.set(companion, b"abc")
    before = snapshot(store)
    with pytest.raises(fencelock.LockError):
        locks.fenced_set("res", "value", token)
    assert snapshot(store) == before


@FUZZ
@given(
    what=st.sampled_from(["resource", "companion"]),
    kind=st.sampled_from(["list", "hash", "set", "zset", "stream"]),
    token=st.integers(1, 2**63 - 1),
)
def test_fenced_set_on_keys_of_the_wrong_type(
    store: redis.Redis, locks: LockClient, what: str, kind: str, token: int
) -> None:
    reset(store)
    key = fresh_name("res")
    pipe = store.pipeline(transaction=False)
    put(pipe, key if what == "resource" else fence_key_for(key), kind, payload_for(kind, b"x"))
    pipe.execute()
    before = snapshot(store)
    with pytest.raises(fencelock.LockError, match=re.escape(repr(key))) as caught:
        locks.fenced_set(key, "value", token)
    assert type(caught.value) is fencelock.LockError
    assert snapshot(store) == before


# -- the asyncio API: a smaller pass -----------------------------------------------------------


@SMALL
@given(name=names, reentrant=st.booleans())
async def test_async_any_name_round_trip_touches_only_its_own_keys(
    store: redis.Redis, async_client: AsyncLockClient, name: str, reentrant: bool
) -> None:
    reset(store)
    before = snapshot(store)
    if not name or len(name) > MAX_NAME_LENGTH:
        with pytest.raises(ValueError, match=r"^name "):
            async_client.lock(name, 30)
        return
    keys = LockKeys.for_name(name)
    assume(not {keys.lock, keys.fence} & SENTINEL_KEYS)
    lock = async_client.lock(name, 30, reentrant=reentrant)
    async with async_cleanup(lock):
        assert await lock.acquire(timeout=0)
        if reentrant:
            assert await lock.acquire(timeout=0)
        assert lock.token == int(store.get(keys.fence))
        assert await lock.held()
        await lock.release()
        if reentrant:
            await lock.release()
    assert changed(before, snapshot(store)) == {keys.fence.encode()}


@SMALL
@given(ttl=anything, timeout=anything)
async def test_async_any_ttl_and_timeout_are_used_or_refused_naming_them(
    store: redis.Redis, async_client: AsyncLockClient, ttl: Any, timeout: Any
) -> None:
    reset(store)
    name = fresh_name("async-ttl")
    try:
        lock = async_client.lock(name, ttl)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("ttl ")
        return
    assert is_seconds(ttl) and MIN_TTL <= ttl <= MAX_TTL
    try:
        got = await lock.acquire(timeout=timeout)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("timeout ")
        assert not store.exists(LockKeys.for_name(name).lock)
        return
    assert timeout is None or (is_seconds(timeout) and timeout >= 0)
    assert got
    with contextlib.suppress(fencelock.LockNotOwned):  # a lease of a few ms
        await lock.release()


@SMALL
@given(key=resource_keys, value=values, token=tokens)
async def test_async_fenced_set_gives_only_documented_errors(
    store: redis.Redis, async_client: AsyncLockClient, key: Any, value: Any, token: Any
) -> None:
    reset(store)
    companion = fence_key_for(key) if isinstance(key, str) and key else None
    assume(key not in SENTINEL_KEYS and companion not in SENTINEL_KEYS)
    before = snapshot(store)
    problems = fenced_set_problems(key, value, token)
    try:
        await async_client.fenced_set(key, value, token)
    except (ValueError, TypeError) as exc:
        assert str(exc).split()[0] in problems
        assert snapshot(store) == before
        return
    assert not problems and companion is not None
    assert store.get(key) == stored_form(value)
    assert changed(before, snapshot(store)) == {key.encode(), companion.encode()}
    if token > 1:
        with pytest.raises(fencelock.StaleToken):
            await async_client.fenced_set(key, "stale", token - 1)
        assert store.get(key) == stored_form(value)


@SMALL
@given(lock_kind=st.sampled_from(LOCK_KEY_KINDS), fence=fence_states, reentrant=st.booleans())
async def test_async_keys_of_the_wrong_type(
    store: redis.Redis,
    async_client: AsyncLockClient,
    lock_kind: str,
    fence: tuple[str, bytes],
    reentrant: bool,
) -> None:
    reset(store)
    name = fresh_name("async-wrong")
    keys = LockKeys.for_name(name)
    pipe = store.pipeline(transaction=False)
    if lock_kind != "none":
        put(pipe, keys.lock, lock_kind, payload_for(lock_kind, b"foreign"))
    if fence[0] != "none":
        put(pipe, keys.fence, fence[0], payload_for(fence[0], fence[1]))
    pipe.execute()
    before = snapshot(store)
    lock = async_client.lock(name, 30, reentrant=reentrant)
    async with async_cleanup(lock):
        try:
            outcome = "granted" if await lock.acquire(timeout=0) else "busy"
        except fencelock.LockError as exc:
            assert type(exc) is fencelock.LockError
            outcome = "error"
        assert outcome == expected_acquire(lock_kind, fence, reentrant)
        if outcome == "granted":
            await lock.release()
            assert changed(before, snapshot(store)) == {keys.fence.encode()}
        else:
            assert snapshot(store) == before
