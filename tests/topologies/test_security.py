"""Security checks (issue 6, item 5); docs/security.md describes what they show.

* holder tokens are 160 random bits from ``secrets``, and that is what lands in Redis;
* no user input reaches a script except as KEYS/ARGV (what the server receives, seen by MONITOR,
  and what it has cached);
* the library works under the ACL user of docs/security.md, and keys outside it give a
  ``LockError``;
* ``rediss://`` works against a server started with a self-signed certificate (skipped, with the
  reason, for a server built without TLS).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import random
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

import fencelock
import fencelock.asyncio
from fencelock import _scripts as scripts
from fencelock._core import replies
from fencelock._keys import LockKeys, fence_key_for, version_key_for
from fencelock._sync.client import LockClient
from fencelock_tools.servers.embedded import EmbeddedServer, ServerNotFound, find_server, free_port
from fencelock_tools.servers.topology import Cluster
from tests.concurrency import SyncCall, sync_until

ROOT = Path(__file__).resolve().parents[2]
HOLDER = re.compile(r"[A-Za-z0-9_-]{27,}")
KNOWN_SCRIPTS = [s for s in vars(scripts).values() if isinstance(s, scripts.Script)]
KNOWN_SHAS = {s.sha for s in KNOWN_SCRIPTS}
KNOWN_SOURCES = {s.source.encode() for s in KNOWN_SCRIPTS}

# Names, keys and values written to break out of a Lua string or comment, were they ever pasted
# into a script's source. Each would create the key "pwned".
EVIL = [
    "x') redis.call('SET', 'pwned', '1') --",
    ']] redis.call("SET", "pwned", "1") --[[',
    "\" .. redis.call('SET', 'pwned', '1') .. \"",
    "\n redis.call('SET', 'pwned', '1')\n",
    "{pwned}%7B\\\x00\r\t*?[a] KEYS[1] ARGV[1] é🔒",
]


def scripts_cached(client: redis.Redis) -> tuple[int, int]:
    """How many scripts the server has cached, and how many of them are fencelock's."""
    cached = int(client.info("memory")["number_of_cached_scripts"])
    known = sum(client.script_exists(*sorted(KNOWN_SHAS)))
    return cached, known


# -- holder tokens -------------------------------------------------------------------------------


def test_holder_tokens_are_160_bits_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert replies.HOLDER_TOKEN_BYTES >= 20
    samples = [replies.new_holder_token() for _ in range(4000)]
    assert len(set(samples)) == len(samples)
    decoded = []
    for token in samples:
        assert HOLDER.fullmatch(token), token
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) >= 20
        decoded.append(int.from_bytes(raw[:20], "big"))
    # every one of the 160 bits is a fair coin: within 6 sigma of half (about 1e-9 to fail)
    n, sigma = len(decoded), len(decoded) ** 0.5 / 2
    for bit in range(160):
        ones = sum((value >> bit) & 1 for value in decoded)
        assert abs(ones - n / 2) < 6 * sigma, f"bit {bit}: {ones} ones in {n}"
    # not the (seedable, predictable) random module ...
    random.seed(7)
    first = replies.new_holder_token()
    random.seed(7)
    assert replies.new_holder_token() != first
    # ... but secrets, i.e. os.urandom
    asked: list[int] = []

    def fake_token_bytes(nbytes: int | None = None) -> bytes:
        asked.append(nbytes or 0)
        return b"\x00" * (nbytes or 32)

    monkeypatch.setattr(secrets, "token_bytes", fake_token_bytes)
    assert replies.new_holder_token() == "A" * 27
    assert asked == [replies.HOLDER_TOKEN_BYTES]


def holder_of(value: str) -> str:
    """The holder token in a simple lock's key ('holder token': the fencing token beside it)."""
    holder, token = replies.lock_value(value)
    assert token is not None and value == f"{holder} {token}"
    return holder


def test_stored_holder_tokens_have_that_form(sync_client: LockClient, raw: redis.Redis) -> None:
    keys = LockKeys.for_name("token-form")
    stored = []
    for _ in range(2):
        lock = sync_client.lock("token-form", 10)
        assert lock.acquire(timeout=0)
        stored.append(holder_of(raw.get(keys.lock)))
        lock.release()
    reentrant = sync_client.lock("token-form-r", 10, reentrant=True)
    assert reentrant.acquire(timeout=0) and reentrant.acquire(timeout=0)
    stored += raw.hkeys(LockKeys.for_name("token-form-r").lock)
    reentrant.release()
    reentrant.release()
    # the holder token of a lock handed on locally (it stays in this process)
    first, second = sync_client.lock("token-handoff", 10), sync_client.lock("token-handoff", 10)
    assert first.acquire(timeout=0)
    stored.append(holder_of(raw.get(LockKeys.for_name("token-handoff").lock)))
    waiting = SyncCall(lambda: second.acquire(timeout=10))
    sync_until(lambda: queued(sync_client) == 1)
    first.release()
    assert waiting.result()
    stored.append(holder_of(raw.get(LockKeys.for_name("token-handoff").lock)))
    second.release()
    assert sync_client.statistics().handoffs == 1
    assert len(stored) == 5
    assert len(set(stored[:4])) == 4  # every grant through Redis has a token of its own
    for token in stored:
        assert isinstance(token, str) and HOLDER.fullmatch(token), token


def queued(client: LockClient) -> int:
    return sum(len(line.tickets) for line in client._wiring.queues._lines.values())


# -- scripts: user input only as KEYS and ARGV ---------------------------------------------------

MONITOR_LINE = re.compile(rb"^\d+\.\d+ \[\d+ ([^\]]*)\] (.*)$", re.DOTALL)
MONITOR_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.DOTALL)
ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b", b'"': b'"'}


def unquote(arg: bytes) -> bytes:
    """Undo the quoting of a MONITOR argument (the server's sdscatrepr)."""
    out, i = bytearray(), 0
    while i < len(arg):
        if arg[i : i + 1] == b"\\":
            escaped = arg[i + 1 : i + 2]
            if escaped == b"x":
                out.append(int(arg[i + 2 : i + 4], 16))
                i += 4
                continue
            out += ESCAPES.get(escaped, escaped)
            i += 2
        else:
            out.append(arg[i])
            i += 1
    return bytes(out)


class Monitor:
    """Every command the server receives (and every command its scripts call), as a list of
    ``(source, [arguments])``: source is the client's address, or "lua"."""

    def __init__(self, server: EmbeddedServer) -> None:
        self._client = server.client()
        self._admin = server.client()
        self._marker = f"monitor-marker-{secrets.token_hex(8)}"
        self.lines: list[tuple[str, list[bytes]]] = []
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._admin.echo(f"{self._marker}-start")
        assert self._started.wait(5), "MONITOR saw nothing"

    def _read(self) -> None:
        while True:
            line = self._monitor.connection.read_response()
            assert isinstance(line, bytes | str)
            data = line.encode() if isinstance(line, str) else line
            match = MONITOR_LINE.match(data)
            assert match, data
            args = [unquote(a) for a in MONITOR_ARG.findall(match[2])]
            if args[:1] == [b"ECHO"] and args[1].startswith(self._marker.encode()):
                if args[1].endswith(b"-start"):
                    self._started.set()
                    continue
                return
            if self._started.is_set():
                self.lines.append((match[1].decode(), args))

    def stop(self) -> None:
        self._admin.echo(f"{self._marker}-end")
        self._thread.join(5)
        assert not self._thread.is_alive(), "MONITOR did not see the end marker"
        self._monitor.__exit__(None, None, None)
        self._client.close()
        self._admin.close()


def exercise(
    a: LockClient, b: LockClient, name: str, resource: str, value: str, renew: bool = True
) -> None:
    """Every kind of request the library makes on one server, with ``name``."""
    lock = a.lock(name, 10)
    assert lock.acquire(timeout=0)
    assert lock.token >= 1 and lock.held()
    lock.extend()
    a.fenced_set(resource, value, lock.token)
    assert a.fenced_get(resource, lock.token) == value.encode()
    assert a.fenced_update(resource, lock.token, lambda v: value) == value
    versioned = a.versioned(resource)  # the same key, now versioned (no version yet: 0)
    assert versioned.set(value, versioned.get()[1])
    assert versioned.update(lambda v: value) == (value, 2)
    lock.release()
    reentrant = a.lock(name + "-r", 10, reentrant=True)
    assert reentrant.acquire(timeout=0) and reentrant.acquire(timeout=0) and reentrant.held()
    reentrant.extend()
    reentrant.release()
    reentrant.release()
    # a waiter of another client, woken by pub/sub; then a local hand-off within that client
    holder = a.lock(name, 10)
    assert holder.acquire(timeout=0)
    waiter, next_in_line = b.lock(name, 10), b.lock(name, 10)
    waiting = SyncCall(lambda: waiter.acquire(timeout=10))
    sync_until(lambda: b.statistics().waiting == 1)
    queued_call = SyncCall(lambda: next_in_line.acquire(timeout=10))
    sync_until(lambda: queued(b) == 1)
    holder.release()
    assert waiting.result()
    waiter.release()  # handed to next_in_line
    assert queued_call.result()
    next_in_line.release()
    if not renew:
        return
    # the watchdog
    renewed = a.lock(name + "-w", 0.3, auto_renew=True)
    assert renewed.acquire(timeout=0)
    time.sleep(0.25)  # renewed at ttl/3
    renewed.check()
    renewed.release()


def script_keys(args: list[bytes]) -> list[bytes]:
    """The KEYS of an EVAL/EVALSHA command line."""
    return args[3 : 3 + int(args[2])]


def lua_groups(
    lines: list[tuple[str, list[bytes]]],
) -> Iterator[tuple[list[list[bytes]], list[bytes], list[bytes]]]:
    """Each run of commands called by a script, with the KEYS of the client command before it
    and after it (empty when that is not a script)."""

    def keys_at(i: int) -> list[bytes]:
        if 0 <= i < len(lines) and lines[i][0] != "lua":
            args = lines[i][1]
            if args[0].upper() in (b"EVAL", b"EVALSHA"):
                return script_keys(args)
        return []

    i = 0
    while i < len(lines):
        if lines[i][0] != "lua":
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i][0] == "lua":
            i += 1
        yield [args for _, args in lines[start:i]], keys_at(start - 1), keys_at(i)


def test_scripts_see_user_input_only_as_keys_and_argv(
    server: EmbeddedServer,
    raw: redis.Redis,
    sync_client: LockClient,
    sync_client_b: LockClient,
) -> None:
    monitor = Monitor(server)
    declared: set[bytes] = set()
    for i, evil in enumerate(EVIL):
        exercise(sync_client, sync_client_b, evil, f"{evil}-resource-{i}", evil, renew=i == 0)
        for name in (evil, evil + "-r", evil + "-w"):
            keys = LockKeys.for_name(name)
            declared |= {keys.lock.encode(), keys.fence.encode(), keys.queue.encode()}
        resource = f"{evil}-resource-{i}"
        declared |= {
            r.encode() for r in (resource, fence_key_for(resource), version_key_for(resource))
        }
    monitor.stop()

    assert sync_client_b.statistics().handoffs == len(EVIL)
    client_commands, lua_commands = set(), set()
    scripts_run = 0
    for source, args in monitor.lines:
        command = args[0].upper().decode()
        if source == "lua":
            lua_commands.add(command)
            continue
        client_commands.add(command)
        if command in ("EVAL", "EVALSHA"):
            scripts_run += 1
            # the script is one of the fixed files, by its text or its SHA-1 ...
            if command == "EVAL":
                assert args[1] in KNOWN_SOURCES, args[1][:200]
            else:
                assert args[1].decode() in KNOWN_SHAS, args
            # ... and the names arrive as its KEYS
            assert set(script_keys(args)) <= declared
        else:  # a name is never a command; a plain command names one of our keys (SET and
            # PEXPIRE: one lock's extend, by SET IFEQ where the server has it)
            named = {"GET", "HEXISTS", "ZREM", "SET", "PEXPIRE"}
            others = {"SUBSCRIBE", "UNSUBSCRIBE", "PING", "HELLO", "CLIENT", "SELECT", "INFO"}
            assert command in named | others, args
            if command in named:
                assert args[1] in declared
    # every key a script touches is one of its KEYS (the commands a script calls are listed
    # right before or right after the script itself, depending on the server)
    checked = 0
    for group, before, after in lua_groups(monitor.lines):
        touched = {
            args[1]
            for args in group
            if len(args) > 1 and args[0].upper() not in (b"PUBLISH", b"SPUBLISH")
        }
        assert touched <= set(before) or touched <= set(after), (group, before, after)
        checked += bool(touched)
    assert checked > 10 * len(EVIL)
    assert scripts_run > 15 * len(EVIL)
    # what the server received is what docs/security.md's ACL line allows
    allowed = acl_commands()
    assert lua_commands <= allowed, lua_commands - allowed
    assert client_commands - {"HELLO", "CLIENT", "SELECT"} <= allowed

    # no script of anyone else's making is cached, and nothing was injected
    cached, known = scripts_cached(raw)
    assert cached == known >= 5
    assert not raw.exists("pwned")


def test_redlock_sends_only_the_known_scripts(redlock: list[EmbeddedServer]) -> None:
    nodes = [srv.client() for srv in redlock]
    try:
        with LockClient.from_url([srv.url for srv in redlock]) as client:
            for evil in EVIL:
                lock = client.lock(evil, 10)
                assert lock.acquire(timeout=0)
                assert lock.token >= 1 and lock.held()
                lock.extend()
                client.fenced_set(evil, evil, lock.token, redis=nodes[0])
                lock.release()
                reentrant = client.lock(evil, 10, reentrant=True)
                assert reentrant.acquire(timeout=0) and reentrant.acquire(timeout=0)
                assert reentrant.token >= 1
                reentrant.release()
                reentrant.release()
        for node in nodes:
            cached, known = scripts_cached(node)
            assert cached == known >= 4
            assert not node.exists("pwned")
    finally:
        for node in nodes:
            node.close()


# -- ACL -----------------------------------------------------------------------------------------


def acl_rule(which: str = "base") -> list[str]:
    """An ACL SETUSER line of docs/security.md, as the arguments after the user name: the user
    ("base"), or what a Cluster needs on top of it ("cluster")."""
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line.startswith("ACL SETUSER fencelock ")]
    base = [line for line in lines if " on >" in line]
    cluster = [line for line in lines if "+spublish" in line]
    assert len(base) == 1 and len(cluster) == 1, "docs/security.md: one line of each kind"
    return (base if which == "base" else cluster)[0].split()[3:]


def acl_commands() -> set[str]:
    return {rule[1:].upper() for rule in acl_rule() if rule.startswith("+")}


def create_user(admin: redis.Redis, rules: list[str]) -> None:
    admin.execute_command("ACL", "SETUSER", "fencelock", "reset", *rules)
    # redis-py sends CLIENT SETINFO on connect and ignores a refusal; allow it where the server
    # knows it (Redis >= 7.2, Valkey), so that ACL LOG only shows what fencelock is denied
    with contextlib.suppress(redis.exceptions.ResponseError):
        admin.execute_command("ACL", "SETUSER", "fencelock", "+client|setinfo")
    admin.execute_command("ACL", "LOG", "RESET")


def acl_url(server: EmbeddedServer) -> str:
    return f"redis://fencelock:CHANGE-ME@127.0.0.1:{server.port}/0"


def acl_denials(admin: redis.Redis) -> list[tuple[str, str, str]]:
    return [(e["reason"], e["context"], e["object"]) for e in admin.acl_log()]


@pytest.fixture
def acl_server(fresh_server: EmbeddedServer) -> Iterator[tuple[EmbeddedServer, redis.Redis]]:
    with fresh_server.client(decode_responses=True) as admin:
        create_user(admin, acl_rule())
        yield fresh_server, admin


async def exercise_async(url: str) -> None:
    async with (
        fencelock.asyncio.LockClient.from_url(url) as a,
        fencelock.asyncio.LockClient.from_url(url) as b,
    ):
        lock = a.lock("acl-async", 10)
        assert await lock.acquire(timeout=0)
        assert lock.token > 0
        waiting = asyncio.ensure_future(b.lock("acl-async", 10).acquire(timeout=5))
        deadline = time.monotonic() + 5
        while b.statistics().waiting != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        await lock.release()
        assert await waiting
        assert b.statistics().wakeups == 1
        reentrant = a.lock("acl-async-r", 10, reentrant=True)
        assert await reentrant.acquire(timeout=0) and await reentrant.acquire(timeout=0)
        await reentrant.release()
        await reentrant.release()
        await a.fenced_set("stock:async", "1", 1)


def test_library_works_under_the_acl_user(
    acl_server: tuple[EmbeddedServer, redis.Redis],
) -> None:
    server, admin = acl_server
    url = acl_url(server)
    with LockClient.from_url(url) as a, LockClient.from_url(url) as b:
        exercise(a, b, "acl-job", "stock:1", "42")
        assert admin.get("stock:1") == "42"
        assert int(admin.get("{stock:1}:fencelock:fence")) > 0  # the token that wrote
        a.fenced_set("stock:{2}", "7", 3)  # a tagged resource key: its companion is stock:{2}:...
        assert admin.get("stock:{2}:fencelock:fence") == "3"
        assert b.statistics().wakeups == 1 and b.statistics().handoffs == 1
        # once_per's record and its fence key are beside the lock's keys, under its pattern
        assert a.once_per("acl-daily", 86400).run(lambda: "ran") == "ran"
        assert admin.get("fencelock:{acl-daily}:once_per:fencelock:fence") is not None
    with LockClient.from_url(url, wake="all") as a, LockClient.from_url(url, wake="all") as b:
        exercise(a, b, "acl-job-all", "stock:3", "43")  # the lock's channel, no waiter queue
        assert b.statistics().wakeups == 1
    replicated = LockClient.from_url(url, min_replicas=1, replica_timeout=0.01)
    with replicated, pytest.raises(fencelock.NotReplicated):  # WAIT ran (found no replica)
        replicated.lock("acl-replicated", 10).acquire(timeout=0)
    asyncio.run(exercise_async(url))
    assert acl_denials(admin) == []


def test_operator_commands_under_the_acl_user(
    acl_server: tuple[EmbeddedServer, redis.Redis],
) -> None:
    """inspect, locks and force_release (the CLI's ls, inspect, release, top) under the user of
    docs/security.md with its operator line added."""
    server, admin = acl_server
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    [operator] = [
        line.split()[3:]
        for line in text.splitlines()
        if line.startswith("ACL SETUSER fencelock +scan")
    ]
    admin.execute_command("ACL", "SETUSER", "fencelock", *operator)
    url = acl_url(server)
    with LockClient.from_url(url, label="acl") as a, LockClient.from_url(url) as b:
        lock = a.lock("acl-job", 10)
        assert lock.acquire(timeout=0)
        waiting = threading.Thread(target=lambda: b.lock("acl-job", 10).acquire(timeout=5))
        waiting.start()
        sync_until(lambda: b.statistics().waiting == 1)
        info = a.inspect("acl-job")
        assert info is not None and info.label == "acl" and info.queued == 1
        assert [i.name for i in a.locks()] == ["acl-job"]
        assert a.force_release("acl-job", token=lock.token).outcome == "released"
        waiting.join()
    assert acl_denials(admin) == []


def test_keys_outside_the_acl_user_are_refused_with_a_lock_error(
    acl_server: tuple[EmbeddedServer, redis.Redis],
) -> None:
    server, admin = acl_server
    url = acl_url(server)
    with LockClient.from_url(url, prefix="other:") as elsewhere, LockClient.from_url(url) as own:
        for attempt in (
            lambda: elsewhere.lock("job", 10).acquire(timeout=0),
            lambda: elsewhere.lock("job", 10, reentrant=True).acquire(timeout=0),
            lambda: own.fenced_set("secret:1", "x", 1),
            lambda: own.fenced_set("{stock:1}", "x", 1),  # not stock:*, not a companion key
        ):
            with pytest.raises(fencelock.LockError, match=r"(?i)permission") as caught:
                attempt()
            assert type(caught.value) is fencelock.LockError
            assert isinstance(caught.value.__cause__, redis.exceptions.NoPermissionError)
        lock = own.lock("job", 10)  # the same name inside the prefix is fine
        assert lock.acquire(timeout=0)
        assert admin.keys("*") == ["fencelock:{job}:lock"]
        lock.release()
    assert admin.keys("*") == []  # a free name leaves no key
    assert {obj for _, _, obj in acl_denials(admin)} == {
        "other:{job}:lock",
        "secret:1",
        "{stock:1}",
    }


def test_missing_channel_permission_gives_a_clear_error(fresh_server: EmbeddedServer) -> None:
    rules = [r for r in acl_rule() if not r.startswith("&")]  # keys and commands, no channels
    with fresh_server.client(decode_responses=True) as admin:
        create_user(admin, rules)
    url = acl_url(fresh_server)
    with (
        LockClient.from_url(url, socket_timeout=1) as a,
        LockClient.from_url(url, socket_timeout=1) as b,
    ):
        holder = a.lock("no-channels", 30)
        assert holder.acquire(timeout=0)
        started = time.monotonic()
        try:
            with pytest.raises(fencelock.LockError, match=r"(?i)permission") as refused:
                b.lock("no-channels", 30).acquire(timeout=0.3)
            assert time.monotonic() - started < 0.8
            # what waits, not fencelock's channel (a key: the server's refusal names it)
            said = "lock 'no-channels', subscribing to its wake-ups: "
            assert str(refused.value).startswith(said), str(refused.value)
        finally:
            with contextlib.suppress(fencelock.LockError):
                holder.release()


def test_redlock_under_the_acl_user(redlock: list[EmbeddedServer]) -> None:
    admins = [srv.client(decode_responses=True) for srv in redlock]
    try:
        for admin in admins:
            create_user(admin, acl_rule())
        urls = [acl_url(srv) for srv in redlock]
        with LockClient.from_url(urls) as a, LockClient.from_url(urls) as b:
            lock = a.lock("acl-redlock", 10)
            assert lock.acquire(timeout=0)
            assert lock.token > 0 and lock.held()
            lock.extend()
            waiting = SyncCall(lambda: b.lock("acl-redlock", 10).acquire(timeout=5))
            sync_until(lambda: b.statistics().waiting == 1)
            lock.release()
            assert waiting.result()
            reentrant = a.lock("acl-redlock-r", 10, reentrant=True)
            assert (
                reentrant.acquire(timeout=0)
                and reentrant.acquire(timeout=0)
                and reentrant.token > 0
            )
            reentrant.release()
            reentrant.release()
        for admin in admins:
            assert acl_denials(admin) == []
    finally:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", "fencelock")
            admin.close()


def test_cluster_under_the_acl_user(cluster: Cluster) -> None:
    admins = [node.client(decode_responses=True) for node in cluster.nodes]
    # names whose keys are served by each of the shards
    names, shards = [], set()
    for i in itertools.count():
        name = f"acl-cluster-{i}"
        slot = key_slot(LockKeys.for_name(name).lock.encode())
        shard = next(j for j, (lo, hi) in enumerate(cluster.slot_ranges) if lo <= slot <= hi)
        if shard not in shards:
            shards.add(shard)
            names.append(name)
        if len(shards) == len(cluster.slot_ranges):
            break
    try:
        for admin in admins:
            create_user(admin, acl_rule() + acl_rule("cluster"))
        options = {"username": "fencelock", "password": "CHANGE-ME", "socket_timeout": 5}
        first, second = cluster.client(**options), cluster.client(**options)
        with first, second, LockClient(first) as a, LockClient(second) as b:
            for name in names:
                lock = a.lock(name, 10)
                assert lock.acquire(timeout=0)
                assert lock.token >= 1 and lock.held()
                lock.extend()
                a.fenced_set(f"stock:{name}", "1", lock.token)
                waiting = SyncCall(lambda: b.lock(name, 10).acquire(timeout=5))  # noqa: B023
                sync_until(lambda: b.statistics().waiting == 1)
                lock.release()
                assert waiting.result()
                reentrant = a.lock(name + "-r", 10, reentrant=True)
                assert reentrant.acquire(timeout=0) and reentrant.acquire(timeout=0)
                reentrant.release()
                reentrant.release()
            assert b.statistics().wakeups == len(names)  # sharded pub/sub, on every shard
            renewed = a.lock(names[0] + "-w", 0.3, auto_renew=True)
            assert renewed.acquire(timeout=0)
            time.sleep(0.25)
            renewed.check()
            renewed.release()
        for admin in admins:
            assert acl_denials(admin) == []
    finally:
        for admin in admins:
            with contextlib.suppress(redis.exceptions.RedisError):
                admin.execute_command("ACL", "DELUSER", "fencelock")
            admin.close()


# -- TLS -----------------------------------------------------------------------------------------


def openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
        "-subj", f"/CN=fencelock test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed (for 127.0.0.1), and an unrelated CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    make_ca(directory, "ca")
    make_ca(directory, "other-ca")
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        "subjectKeyIdentifier=hash\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return {name: directory / name for name in ("ca.crt", "other-ca.crt", "server.crt")} | {
        "server.key": directory / "server.key"
    }


def tls_problem(binary: str, args: list[str], port: int) -> str | None:
    """Why ``binary`` cannot serve TLS with ``args``, or None when it can: a server built
    without TLS exits at once, saying so."""
    command = [binary, "--port", "0", "--save", "", "--appendonly", "no", *args]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    ) as process:
        deadline = time.monotonic() + 10
        try:
            while process.poll() is None:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.1),
                ):
                    return None  # it listens for TLS
                assert time.monotonic() < deadline, f"{binary} neither listened nor exited"
                time.sleep(0.01)
        finally:
            if process.poll() is None:
                process.kill()
            output = process.communicate()[0].decode(errors="replace")
    said = [line.split("# ")[-1].strip() for line in output.splitlines() if "TLS" in line]
    return said[-1] if said else output.strip()[-300:]


@pytest.fixture
def tls_server(
    server_kind: str, certificates: dict[str, Path]
) -> Iterator[tuple[EmbeddedServer, int]]:
    """A server that also listens with TLS: (server, TLS port)."""
    try:
        binary = find_server(server_kind)
    except ServerNotFound as exc:
        pytest.skip(f"{server_kind} server not available: {exc}")
    tls_port = free_port()
    args = [
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(certificates["server.crt"]),
        "--tls-key-file", str(certificates["server.key"]),
        "--tls-ca-cert-file", str(certificates["ca.crt"]),
        "--tls-auth-clients", "no",
    ]  # fmt: skip
    problem = tls_problem(binary, args, tls_port)
    if problem is not None:
        pytest.skip(f"{binary} is built without TLS: {problem!r}")
    with EmbeddedServer(binary, args=args) as server:
        yield server, tls_port


def rediss_url(port: int, ca: Path) -> str:
    query = urllib.parse.urlencode({"ssl_cert_reqs": "required", "ssl_ca_certs": str(ca)})
    return f"rediss://127.0.0.1:{port}/0?{query}"


def test_rediss_url(tls_server: tuple[EmbeddedServer, int], certificates: dict[str, Path]) -> None:
    server, port = tls_server
    plain = redis.Redis(port=port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    with plain, pytest.raises((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        plain.ping()  # the port speaks only TLS
    url = rediss_url(port, certificates["ca.crt"])
    with LockClient.from_url(url) as a, LockClient.from_url(url) as b:
        assert (
            a._wiring.topology.route.redis.connection_pool.connection_class
            is redis.connection.SSLConnection
        )
        lock = a.lock("tls", 10)
        assert lock.acquire(timeout=0)
        assert lock.token > 0 and lock.held()
        lock.extend()
        a.fenced_set("tls-resource", "v", lock.token)
        waiting = SyncCall(lambda: b.lock("tls", 10).acquire(timeout=5))  # pub/sub over TLS too
        sync_until(lambda: b.statistics().waiting == 1)
        lock.release()
        assert waiting.result()
        assert b.statistics().wakeups == 1
        renewed = a.lock("tls-renewed", 0.3, auto_renew=True)
        assert renewed.acquire(timeout=0)
        time.sleep(0.25)
        renewed.check()
        renewed.release()
    with server.client(decode_responses=True) as check:
        assert check.get("tls-resource") == "v"


def test_tls_client_passed_in_without_timeouts(
    tls_server: tuple[EmbeddedServer, int], certificates: dict[str, Path]
) -> None:
    _, port = tls_server
    given = redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=None,
        socket_connect_timeout=None,
        ssl=True,
        ssl_cert_reqs="required",
        ssl_ca_certs=str(certificates["ca.crt"]),
    )
    with given, LockClient(given) as client:
        assert client._wiring.topology.route.redis is not given  # its own pool, with timeouts ...
        assert (
            client._wiring.topology.route.redis.connection_pool.connection_kwargs["socket_timeout"]
            == 5
        )
        assert (
            client._wiring.topology.route.redis.connection_pool.connection_class
            is redis.connection.SSLConnection
        )
        lock = client.lock("tls-given", 10)  # ... that still speaks TLS
        assert lock.acquire(timeout=0)
        lock.release()


def test_tls_with_an_unknown_ca_is_a_connection_error(
    tls_server: tuple[EmbeddedServer, int], certificates: dict[str, Path]
) -> None:
    _, port = tls_server
    client = LockClient.from_url(rediss_url(port, certificates["other-ca.crt"]))
    with client, pytest.raises(fencelock.LockConnectionError, match=r"(?i)certificate"):
        client.lock("tls-untrusted", 10).acquire(timeout=0)


async def test_async_rediss_url(
    tls_server: tuple[EmbeddedServer, int], certificates: dict[str, Path]
) -> None:
    _, port = tls_server
    url = rediss_url(port, certificates["ca.crt"])
    async with (
        fencelock.asyncio.LockClient.from_url(url) as a,
        fencelock.asyncio.LockClient.from_url(url) as b,
    ):
        lock = a.lock("tls-async", 10)
        assert await lock.acquire(timeout=0)
        assert lock.token > 0 and await lock.held()
        waiting = asyncio.ensure_future(b.lock("tls-async", 10).acquire(timeout=5))
        deadline = time.monotonic() + 5
        while b.statistics().waiting != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        await lock.release()
        assert await waiting
        assert b.statistics().wakeups == 1
        await a.fenced_set("tls-async-resource", "v", 1)
