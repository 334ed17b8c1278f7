"""A simulated Redis server, in process, for deterministic simulation of fencelock (issue 25).

It runs fencelock's real ``.lua`` scripts in Lua 5.1 (``lua.py``) over a small keyspace of
strings, hashes and sorted sets (lists and sets exist for WRONGTYPE), with the commands those
scripts and the library send, each answered as redis-py's parser answers (``protocol.py``).
What a test or a scheduler owns:

- **time**: ``now_us``, the server's clock (set it, jump it back or forth, or ``advance``). It
  stands still during a command, a script included, as on Valkey (Redis 7.0 reads its clock
  afresh at every TIME). A key expires once the clock has passed its expiry: it is gone for every
  command from then on (lazily, as Redis does; ``expire_due`` is the active sweep, and until then
  DBSIZE counts it, as Redis's does);
- **delivery**: a connection is any hashable id, made on first use (RESP2 until a ``HELLO 3``).
  Published messages (``Push``), and every reply of a subscribed connection (confirmations,
  pongs, errors), are queued on its ``inbox`` in the order the server sent them, for the caller
  to deliver, delay, drop or reorder; ``execute`` answers ``Queued`` for those;
- **faults**: ``reset`` (a connection lost: its subscriptions and undelivered messages go),
  ``restart_empty``, ``snapshot``/``failover`` (a replica that missed the writes since),
  ``replicas`` (what WAIT answers).

Anything the simulation does not have raises ``Unsupported`` rather than guess.
"""

from __future__ import annotations

import copy
import re
import zlib
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar, cast

from .lua import Lua
from .protocol import (
    REDIS_7,
    CommandError,
    Flavor,
    Push,
    Reply,
    Status,
    Unsupported,
    number_text,
    reply_error,
)

OK = Status(b"OK")
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
OVERFLOW = "ERR increment or decrement would overflow"
SYNTAX = "ERR syntax error"
INT64 = range(-(2**63), 2**63)
_INTEGER = re.compile(rb"0|-?[1-9][0-9]*")
SUBSCRIBED_ONLY = (
    "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
)


class ZSet(dict[bytes, float]):
    """A sorted set: member -> score (ordered by score, then member, when read)."""

    def ordered(self) -> list[tuple[bytes, float]]:
        return sorted(self.items(), key=lambda item: (item[1], item[0]))


Value = bytes | dict[bytes, bytes] | ZSet | list[bytes] | set[bytes]
V = TypeVar("V", bytes, dict[bytes, bytes], ZSet, list[bytes], set[bytes])
TYPE_NAMES = {bytes: b"string", dict: b"hash", ZSet: b"zset", list: b"list", set: b"set"}


@dataclass
class Entry:
    value: Value
    expires_at: int | None = None  # ms of the server's clock: alive while the clock is not past it


@dataclass(frozen=True)
class Queued:
    """``execute``'s answer when its replies went to the connection's inbox (``count`` of them)."""

    count: int


@dataclass
class Connection:
    id: int = 0  # (what HELLO shows)
    protocol: int = 2  # RESP2 or RESP3 (HELLO)
    channels: dict[bytes, None] = field(default_factory=dict)  # (ordered sets)
    shard_channels: dict[bytes, None] = field(default_factory=dict)
    inbox: deque[Reply] = field(default_factory=deque)

    @property
    def subscribed(self) -> bool:
        return bool(self.channels or self.shard_channels)


Snapshot = dict[bytes, Entry]
Handler = Callable[["SimServer", Connection, list[bytes]], "Reply | Queued"]
NO_SCRIPT, IN_SUBSCRIBED = "no-script", "subscribed"  # command flags
_COMMANDS: dict[str, tuple[Handler, int, tuple[str, ...]]] = {}
_PUSHING = {"SUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "SUNSUBSCRIBE"}


def command(name: str, arity: int, *flags: str) -> Callable[[Handler], Handler]:
    """Register a command; ``arity`` counts the name, as Redis's does (negative: at least)."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = (handler, arity, flags)
        return handler

    return register


def integer(word: bytes, error: str = NOT_INTEGER) -> int:
    """A 64-bit integer as Redis reads one (string2ll: no sign +, no spaces, no leading zeros)."""
    if _INTEGER.fullmatch(word) and int(word) in INT64:
        return int(word)
    raise CommandError(error)


def double(word: bytes, error: str = "ERR value is not a valid float") -> float:
    """A double as Redis reads one (strtod of the whole word, never NaN)."""
    text = word.decode(errors="replace")
    try:
        if text != text.strip() or "_" in text:
            raise ValueError(text)
        x = float(text)
    except ValueError:
        raise CommandError(error) from None
    if x != x:
        raise CommandError(error)
    return x


def score_bound(word: bytes) -> tuple[float, bool]:
    """A ZRANGEBYSCORE bound: its score, and whether it is exclusive ('(')."""
    exclusive = word.startswith(b"(")
    return double(word[exclusive:], "ERR min or max is not a float"), exclusive


def glob(pattern: bytes) -> re.Pattern[bytes]:
    """Redis's glob (stringmatchlen): ``*``, ``?``, ``[...]`` with ``^`` and ranges, ``\\``."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i : i + 1]
        if c == b"\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i : i + 1]))
        elif c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"[" and (end := pattern.find(b"]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith(b"^")
            parts, j = [], int(negate)
            while j < len(body):
                if body[j : j + 1] == b"\\" and j + 1 < len(body):
                    j += 1
                if j + 2 < len(body) and body[j + 1 : j + 2] == b"-":
                    low, high = sorted((body[j : j + 1], body[j + 2 : j + 3]))
                    parts.append(re.escape(low) + b"-" + re.escape(high))
                    j += 3
                else:
                    parts.append(re.escape(body[j : j + 1]))
                    j += 1
            out.append(b"[" + (b"^" if negate else b"") + b"".join(parts) + b"]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile(b"".join(out), re.DOTALL)


class SimServer:
    """One simulated server. ``execute(conn, *args)`` runs one command as if sent on the
    connection ``conn`` and answers its reply (or ``Queued``)."""

    def __init__(self, flavor: Flavor = REDIS_7, now_us: int = 1_700_000_000_000_000) -> None:
        self.flavor = flavor
        self.now_us = now_us
        self.keys: dict[bytes, Entry] = {}
        self.connections: dict[Hashable, Connection] = {}
        self.replicas = 0  # replicas that acknowledge every write: what WAIT answers
        self.maxmemory_policy = b"noeviction"  # what INFO memory shows
        self.lua = Lua(flavor)
        self.clients = 0  # connections made so far

    # -- the caller's controls ---------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        return self.now_us // 1000

    def advance(self, seconds: float) -> None:
        """Move the clock by ``seconds`` (backwards too: a clock jump)."""
        self.now_us += round(seconds * 1_000_000)

    def expire_due(self) -> list[bytes]:
        """Redis's active expiry, all at once: delete the keys whose time has passed."""
        return [key for key in list(self.keys) if self._entry(key) is None]

    def reset(self, conn_id: Hashable) -> None:
        """The connection is lost: its subscriptions and undelivered messages with it (the next
        command on ``conn_id`` opens a new one)."""
        self.connections.pop(conn_id, None)

    def restart_empty(self) -> None:
        """A restart without persistence: no keys, no scripts, every connection lost."""
        self.failover({})

    def snapshot(self) -> Snapshot:
        """The keyspace as a replica would have it now (``failover`` promotes it later)."""
        return copy.deepcopy(self.keys)

    def failover(self, replica: Snapshot) -> None:
        """A failover to a replica that has ``replica`` (it missed every write since): its keys
        (expiries are absolute: they run on this clock), no scripts cached, every connection
        lost."""
        self.keys = copy.deepcopy(replica)
        self.lua = Lua(self.flavor)
        self.connections.clear()

    def execute(self, conn_id: Hashable, *args: bytes | str | int | float) -> Reply | Queued:
        """Run one command as sent on ``conn_id``: its reply, or ``Queued`` when the replies
        went to the connection's inbox (SUBSCRIBE and the like, anything on a subscribed
        connection)."""
        words = [_encode(arg) for arg in args]
        conn = self.connections.get(conn_id)
        if conn is None:
            self.clients += 1
            conn = self.connections[conn_id] = Connection(id=self.clients)
        pushing = conn.subscribed or words[0].upper().decode(errors="replace") in _PUSHING
        try:
            reply: Reply | Queued = self._run(conn, words, in_script=False)
        except CommandError as exc:
            reply = reply_error(exc.message)
        if pushing and not isinstance(reply, Queued):
            conn.inbox.append(reply)
            reply = Queued(1)
        return reply

    # -- dispatch -----------------------------------------------------------------------------

    def _run(self, conn: Connection, words: list[bytes], in_script: bool) -> Reply | Queued:
        name = words[0].upper().decode(errors="replace")
        spec = _COMMANDS.get(name)
        if spec is None:
            if in_script:
                raise CommandError(f"ERR {self.flavor.unknown_in_script}")
            args = "".join(f"'{arg.decode(errors='replace')}' " for arg in words[1:])
            raise CommandError(
                f"ERR unknown command '{words[0].decode(errors='replace')}', "
                f"with args beginning with: {args}"
            )
        handler, arity, flags = spec
        if len(words) != arity if arity > 0 else len(words) < -arity:
            if in_script:
                raise CommandError(f"ERR {self.flavor.arity_in_script}")
            raise _arity(name)
        if in_script and (
            NO_SCRIPT in flags or (name == "WAIT" and not self.flavor.wait_in_scripts)
        ):
            raise CommandError(f"ERR {self.flavor.not_allowed_in_script}")
        if conn.subscribed and conn.protocol == 2 and IN_SUBSCRIBED not in flags:
            raise CommandError(f"ERR Can't execute '{name.lower()}': {SUBSCRIBED_ONLY}")
        return handler(self, conn, words[1:])

    def _entry(self, key: bytes) -> Entry | None:
        """The live entry at ``key``; one whose expiry has passed is deleted here."""
        entry = self.keys.get(key)
        if entry is not None and entry.expires_at is not None and entry.expires_at < self.now_ms:
            del self.keys[key]
            return None
        return entry

    def _value(self, key: bytes, kind: type[V]) -> V | None:
        entry = self._entry(key)
        if entry is None:
            return None
        if type(entry.value) is not kind:
            raise CommandError(WRONGTYPE)
        return entry.value

    def _created(self, key: bytes, kind: type[V]) -> V:
        value = self._value(key, kind)
        if value is None:
            value = kind()
            self.keys[key] = Entry(value)
        return value

    def _emptied(self, key: bytes, value: Value) -> None:
        if not value:
            del self.keys[key]

    def _expire_at(self, key: bytes, when: int) -> None:
        """Set the expiry of a live key; one at or before the clock deletes it (Redis's
        checkAlreadyExpired)."""
        if when <= self.now_ms:
            del self.keys[key]
        else:
            self.keys[key].expires_at = when

    def _score(self, conn: Connection, x: float) -> Reply:
        """A score: a double in RESP3, its text in RESP2."""
        return x if conn.protocol == 3 else number_text(x, self.flavor)

    # -- keys and strings --------------------------------------------------------------------

    @command("GET", 2)
    def _get(self, conn: Connection, args: list[bytes]) -> Reply:
        return self._value(args[0], bytes)

    @command("SET", -3)
    def _set(self, conn: Connection, args: list[bytes]) -> Reply:
        key, value, options = args[0], args[1], [word.upper() for word in args[2:]]
        condition = expiry = None
        get = keep_ttl = False
        when: int | None = None
        i = 0
        while i < len(options):
            option = options[i]
            if option in (b"NX", b"XX") and condition in (None, option):
                condition = option
            elif option == b"GET":
                get = True
            elif option == b"KEEPTTL" and expiry is None:
                keep_ttl = True
            elif option in (b"EX", b"PX", b"EXAT", b"PXAT") and not keep_ttl and expiry is None:
                if i + 1 == len(options):
                    raise CommandError(SYNTAX)
                expiry, i = option, i + 1
                n = integer(args[2 + i])
                if n <= 0:
                    raise CommandError("ERR invalid expire time in 'set' command")
                n *= 1000 if option in (b"EX", b"EXAT") else 1
                when = n if option.endswith(b"AT") else self.now_ms + n
            else:
                raise CommandError(SYNTAX)
            i += 1
        entry = self._entry(key)
        old = self._value(key, bytes) if get else None
        if (condition == b"NX" and entry) or (condition == b"XX" and not entry):
            return old
        if keep_ttl and entry:
            when = entry.expires_at
        self.keys[key] = Entry(value, when)
        if when is not None and self.flavor.set_deletes_past_expiry:
            self._expire_at(key, when)
        return old if get else OK

    @command("INCRBY", 3)
    def _incrby(self, conn: Connection, args: list[bytes]) -> Reply:
        by = integer(args[1])
        current = self._value(args[0], bytes)
        total = (0 if current is None else integer(current)) + by
        if total not in INT64:
            raise CommandError(OVERFLOW)
        if current is None:
            self.keys[args[0]] = Entry(b"%d" % total)
        else:
            self.keys[args[0]].value = b"%d" % total
        return total

    @command("DEL", -2)
    def _del(self, conn: Connection, args: list[bytes]) -> Reply:
        found = [key for key in dict.fromkeys(args) if self._entry(key) is not None]
        for key in found:
            del self.keys[key]
        return len(found)

    @command("EXISTS", -2)
    def _exists(self, conn: Connection, args: list[bytes]) -> Reply:
        return sum(self._entry(key) is not None for key in args)

    @command("PEXPIRE", -3)
    def _pexpire(self, conn: Connection, args: list[bytes]) -> Reply:
        return self._set_expiry(args, self.now_ms)

    @command("PEXPIREAT", -3)
    def _pexpireat(self, conn: Connection, args: list[bytes]) -> Reply:
        return self._set_expiry(args, 0)

    def _set_expiry(self, args: list[bytes], base: int) -> Reply:
        if len(args) > 2:
            raise Unsupported("PEXPIRE options")
        when = base + integer(args[1])
        if self._entry(args[0]) is None:
            return 0
        self._expire_at(args[0], when)
        return 1

    @command("PTTL", 2)
    def _pttl(self, conn: Connection, args: list[bytes]) -> Reply:
        entry = self._entry(args[0])
        if entry is None:
            return -2
        return -1 if entry.expires_at is None else max(0, entry.expires_at - self.now_ms)

    @command("TYPE", 2)
    def _type(self, conn: Connection, args: list[bytes]) -> Reply:
        entry = self._entry(args[0])
        return Status(b"none" if entry is None else TYPE_NAMES[type(entry.value)])

    @command("RPUSH", -3)
    def _rpush(self, conn: Connection, args: list[bytes]) -> Reply:
        items = self._created(args[0], list)
        items.extend(args[1:])
        return len(items)

    @command("SADD", -3)
    def _sadd(self, conn: Connection, args: list[bytes]) -> Reply:
        members = self._created(args[0], set)
        size = len(members)
        members.update(args[1:])
        return len(members) - size

    # -- hashes -------------------------------------------------------------------------------

    @command("HGET", 3)
    def _hget(self, conn: Connection, args: list[bytes]) -> Reply:
        return (self._value(args[0], dict) or {}).get(args[1])

    @command("HMGET", -3)
    def _hmget(self, conn: Connection, args: list[bytes]) -> Reply:
        fields = self._value(args[0], dict) or {}
        return [fields.get(name) for name in args[1:]]

    @command("HSET", -4)
    def _hset(self, conn: Connection, args: list[bytes]) -> Reply:
        if len(args) % 2 == 0:
            raise _arity("HSET")
        fields = self._created(args[0], dict)
        size = len(fields)
        fields.update(zip(args[1::2], args[2::2], strict=True))
        return len(fields) - size

    @command("HDEL", -3)
    def _hdel(self, conn: Connection, args: list[bytes]) -> Reply:
        fields = self._value(args[0], dict)
        if fields is None:
            return 0
        gone = [name for name in dict.fromkeys(args[1:]) if fields.pop(name, None) is not None]
        self._emptied(args[0], fields)
        return len(gone)

    @command("HEXISTS", 3)
    def _hexists(self, conn: Connection, args: list[bytes]) -> Reply:
        return int(args[1] in (self._value(args[0], dict) or {}))

    @command("HINCRBY", 4)
    def _hincrby(self, conn: Connection, args: list[bytes]) -> Reply:
        by = integer(args[2])
        fields = self._created(args[0], dict)
        current = fields.get(args[1], b"0")
        total = integer(current, "ERR hash value is not an integer") + by
        if total not in INT64:
            raise CommandError(OVERFLOW)
        fields[args[1]] = b"%d" % total
        return total

    @command("HGETALL", 2)
    def _hgetall(self, conn: Connection, args: list[bytes]) -> Reply:
        fields = self._value(args[0], dict) or {}
        if conn.protocol == 3:
            return dict(fields)
        return [word for pair in fields.items() for word in pair]

    # -- sorted sets --------------------------------------------------------------------------

    @command("ZADD", -4)
    def _zadd(self, conn: Connection, args: list[bytes]) -> Reply:
        i, options = 1, set()
        while i < len(args) and args[i].upper() in (b"NX", b"XX", b"CH", b"GT", b"LT", b"INCR"):
            options.add(args[i].upper())
            i += 1
        pairs = args[i:]
        if not pairs or len(pairs) % 2:
            raise CommandError(SYNTAX)
        if options & {b"GT", b"LT", b"INCR"}:
            raise Unsupported("ZADD GT, LT, INCR")
        if {b"NX", b"XX"} <= options:
            raise CommandError("ERR XX and NX options at the same time are not compatible")
        scores = [double(word) for word in pairs[::2]]
        current = self._value(args[0], ZSet)
        if current is None and b"XX" in options:
            return 0
        zset = self._created(args[0], ZSet)
        added = changed = 0
        for score, member in zip(scores, pairs[1::2], strict=True):
            old = zset.get(member)
            if (old is None and b"XX" in options) or (old is not None and b"NX" in options):
                continue
            added += old is None
            changed += old is not None and old != score
            zset[member] = score
        return added + changed if b"CH" in options else added

    @command("ZREM", -3)
    def _zrem(self, conn: Connection, args: list[bytes]) -> Reply:
        zset = self._value(args[0], ZSet)
        if zset is None:
            return 0
        gone = [m for m in dict.fromkeys(args[1:]) if zset.pop(m, None) is not None]
        self._emptied(args[0], zset)
        return len(gone)

    @command("ZSCORE", 3)
    def _zscore(self, conn: Connection, args: list[bytes]) -> Reply:
        score = (self._value(args[0], ZSet) or ZSet()).get(args[1])
        return None if score is None else self._score(conn, score)

    @command("ZCARD", 2)
    def _zcard(self, conn: Connection, args: list[bytes]) -> Reply:
        return len(self._value(args[0], ZSet) or ())

    def _listed(self, conn: Connection, items: list[tuple[bytes, float]], scores: bool) -> Reply:
        """Members, or members with their scores: in pairs in RESP3, one flat array in RESP2."""
        if not scores:
            return [m for m, _ in items]
        if conn.protocol == 3:
            return [[m, self._score(conn, s)] for m, s in items]
        return [word for m, s in items for word in (m, self._score(conn, s))]

    @command("ZRANGE", -4)
    def _zrange(self, conn: Connection, args: list[bytes]) -> Reply:
        start, stop = integer(args[1]), integer(args[2])
        options = [word.upper() for word in args[3:]]
        if set(options) - {b"WITHSCORES", b"REV"}:
            raise Unsupported("ZRANGE BYSCORE, BYLEX, LIMIT")
        items = (self._value(args[0], ZSet) or ZSet()).ordered()
        if b"REV" in options:
            items.reverse()
        n = len(items)
        start, stop = max(start + n if start < 0 else start, 0), stop + n if stop < 0 else stop
        items = items[start : stop + 1] if start <= stop else []
        return self._listed(conn, items, b"WITHSCORES" in options)

    @command("ZRANGEBYSCORE", -4)
    def _zrangebyscore(self, conn: Connection, args: list[bytes]) -> Reply:
        (low, low_open), (high, high_open) = score_bound(args[1]), score_bound(args[2])
        scores, offset, count, i = False, 0, -1, 3
        while i < len(args):
            if args[i].upper() == b"WITHSCORES":
                scores, i = True, i + 1
            elif args[i].upper() == b"LIMIT" and i + 2 < len(args):
                offset, count, i = integer(args[i + 1]), integer(args[i + 2]), i + 3
            else:
                raise CommandError(SYNTAX)
        items = [
            (m, s)
            for m, s in (self._value(args[0], ZSet) or ZSet()).ordered()
            if (low < s if low_open else low <= s) and (s < high if high_open else s <= high)
        ]
        if offset < 0:
            return []
        items = items[offset:] if count < 0 else items[offset : offset + count]
        return self._listed(conn, items, scores)

    @command("ZPOPMIN", -2)
    def _zpopmin(self, conn: Connection, args: list[bytes]) -> Reply:
        if len(args) > 2:
            raise CommandError(SYNTAX)
        count = integer(args[1], "ERR value is out of range, must be positive") if args[1:] else 1
        if count < 0:
            raise CommandError("ERR value is out of range, must be positive")
        zset = self._value(args[0], ZSet)
        if zset is None:
            return []
        popped = zset.ordered()[:count]
        for member, _ in popped:
            del zset[member]
        self._emptied(args[0], zset)
        if conn.protocol == 3 and not args[1:]:  # one member, without a count: not in a pair
            return [popped[0][0], popped[0][1]]
        return self._listed(conn, popped, True)

    # -- server -------------------------------------------------------------------------------

    @command("TIME", 1)
    def _time(self, conn: Connection, args: list[bytes]) -> Reply:
        return [b"%d" % (self.now_us // 1_000_000), b"%d" % (self.now_us % 1_000_000)]

    @command("HELLO", -1)
    def _hello(self, conn: Connection, args: list[bytes]) -> Reply:
        if len(args) > 1:
            raise Unsupported("HELLO AUTH, SETNAME")
        if args:
            version = integer(args[0], "ERR Protocol version is not an integer or out of range")
            if version not in (2, 3):
                raise CommandError("NOPROTO unsupported protocol version")
            conn.protocol = version
        server: dict[bytes, Reply] = {
            b"server": self.flavor.name.encode(),
            b"version": self.flavor.version.encode(),
            b"proto": conn.protocol,
            b"id": conn.id,
            b"mode": b"standalone",
            b"role": b"master",
            b"modules": [],
        }
        if conn.protocol == 3:
            return server
        return [word for pair in server.items() for word in pair]

    @command("PING", -1, IN_SUBSCRIBED)
    def _ping(self, conn: Connection, args: list[bytes]) -> Reply:
        if len(args) > 1:
            raise _arity("PING")
        if conn.subscribed and conn.protocol == 2:
            return [b"pong", args[0] if args else b""]
        return args[0] if args else Status(b"PONG")

    @command("WAIT", 3)
    def _wait(self, conn: Connection, args: list[bytes]) -> Reply:
        integer(args[0])
        if integer(args[1]) < 0:
            raise CommandError("ERR timeout is negative")
        return self.replicas  # at once: how long a missing replica takes is the caller's to model

    @command("INFO", -1)
    def _info(self, conn: Connection, args: list[bytes]) -> Reply:
        if args and not {a.lower() for a in args} & {b"memory", b"all", b"default", b"everything"}:
            return b""
        return b"# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:%s\r\n" % self.maxmemory_policy

    @command("DBSIZE", 1)
    def _dbsize(self, conn: Connection, args: list[bytes]) -> Reply:
        return len(self.keys)  # as Redis's: a key expired but not yet deleted still counts

    @command("FLUSHALL", -1)
    def _flushall(self, conn: Connection, args: list[bytes]) -> Reply:
        if len(args) > 1 or (args and args[0].upper() not in (b"ASYNC", b"SYNC")):
            raise CommandError(SYNTAX)
        self.keys.clear()
        return OK

    @command("SCAN", -2)
    def _scan(self, conn: Connection, args: list[bytes]) -> Reply:
        """The cursor is a position in a fixed order of keys (crc32): a key present for the
        whole scan is returned exactly once, whatever changes meanwhile."""
        cursor = integer(args[0], "ERR invalid cursor")
        pattern, count = None, 10
        for option, value in zip(args[1::2], args[2::2], strict=False):
            if option.upper() == b"MATCH":
                pattern = glob(value)
            elif option.upper() == b"COUNT":
                count = integer(value)
            elif option.upper() == b"TYPE":
                raise Unsupported("SCAN TYPE")
            else:
                raise CommandError(SYNTAX)
        if len(args) % 2 == 0 or count < 1:
            raise CommandError(SYNTAX)
        positions = sorted((zlib.crc32(key) + 1, key) for key in self.keys)
        pending = [(at, key) for at, key in positions if at >= cursor]
        page = pending[:count]
        while len(page) < len(pending) and pending[len(page)][0] == page[-1][0]:
            page.append(pending[len(page)])  # (keys of one position come together)
        found: list[Reply] = []
        for _, key in page:
            if self._entry(key) is not None and (pattern is None or pattern.fullmatch(key)):
                found.append(key)
        following = pending[len(page)][0] if len(page) < len(pending) else 0
        return [b"%d" % following, found]

    # -- pub/sub ------------------------------------------------------------------------------

    def _publish_to(self, channel: bytes, message: bytes, shard: bool) -> int:
        listeners = 0
        for conn in self.connections.values():
            if channel in (conn.shard_channels if shard else conn.channels):
                conn.inbox.append(Push([b"smessage" if shard else b"message", channel, message]))
                listeners += 1
        return listeners

    @command("PUBLISH", 3)
    def _publish(self, conn: Connection, args: list[bytes]) -> Reply:
        return self._publish_to(args[0], args[1], shard=False)

    @command("SPUBLISH", 3)
    def _spublish(self, conn: Connection, args: list[bytes]) -> Reply:
        return self._publish_to(args[0], args[1], shard=True)

    def _subscribe_to(self, conn: Connection, channels: list[bytes], shard: bool) -> Queued:
        subscribed = conn.shard_channels if shard else conn.channels
        for channel in channels:
            subscribed[channel] = None
            kind = b"ssubscribe" if shard else b"subscribe"
            conn.inbox.append(Push([kind, channel, len(subscribed)]))
        return Queued(len(channels))

    def _unsubscribe_from(self, conn: Connection, channels: list[bytes], shard: bool) -> Queued:
        subscribed = conn.shard_channels if shard else conn.channels
        kind = b"sunsubscribe" if shard else b"unsubscribe"
        channels = channels or list(subscribed)
        if not channels:
            conn.inbox.append(Push([kind, None, 0]))
            return Queued(1)
        for channel in channels:
            subscribed.pop(channel, None)
            conn.inbox.append(Push([kind, channel, len(subscribed)]))
        return Queued(len(channels))

    @command("SUBSCRIBE", -2, NO_SCRIPT, IN_SUBSCRIBED)
    def _subscribe(self, conn: Connection, args: list[bytes]) -> Queued:
        return self._subscribe_to(conn, args, shard=False)

    @command("SSUBSCRIBE", -2, NO_SCRIPT, IN_SUBSCRIBED)
    def _ssubscribe(self, conn: Connection, args: list[bytes]) -> Queued:
        return self._subscribe_to(conn, args, shard=True)

    @command("UNSUBSCRIBE", -1, NO_SCRIPT, IN_SUBSCRIBED)
    def _unsubscribe(self, conn: Connection, args: list[bytes]) -> Queued:
        return self._unsubscribe_from(conn, args, shard=False)

    @command("SUNSUBSCRIBE", -1, NO_SCRIPT, IN_SUBSCRIBED)
    def _sunsubscribe(self, conn: Connection, args: list[bytes]) -> Queued:
        return self._unsubscribe_from(conn, args, shard=True)

    # -- scripts ------------------------------------------------------------------------------

    def _script_args(self, args: list[bytes]) -> tuple[list[bytes], list[bytes]]:
        numkeys = integer(args[0])
        if numkeys > len(args) - 1:
            raise CommandError("ERR Number of keys can't be greater than number of args")
        if numkeys < 0:
            raise CommandError("ERR Number of keys can't be negative")
        return args[1 : 1 + numkeys], args[1 + numkeys :]

    def _call(self, conn: Connection, sha: str, args: list[bytes]) -> Reply:
        keys, argv = self._script_args(args)
        # Redis runs a script's commands as a client of its own, in RESP2 (and none of the
        # commands that queue their replies may run in a script)
        run = cast(Callable[[list[bytes]], Reply], partial(self._run, Connection(), in_script=True))
        return self.lua.run(sha, keys, argv, run)

    @command("EVAL", -3, NO_SCRIPT)
    def _eval(self, conn: Connection, args: list[bytes]) -> Reply:
        self._script_args(args[1:])  # (checked before the script is compiled, as Redis does)
        return self._call(conn, self.lua.load(args[0]), args[1:])

    @command("EVALSHA", -3, NO_SCRIPT)
    def _evalsha(self, conn: Connection, args: list[bytes]) -> Reply:
        self._script_args(args[1:])
        sha = args[0].decode(errors="replace").lower()
        if not self.lua.has(sha):
            raise CommandError(self.flavor.noscript)
        return self._call(conn, sha, args[1:])

    @command("SCRIPT", -2, NO_SCRIPT)
    def _script(self, conn: Connection, args: list[bytes]) -> Reply:
        sub = args[0].upper().decode(errors="replace")
        arity = {"LOAD": 2, "EXISTS": -2, "FLUSH": -1}.get(sub)
        if arity is None:
            raise CommandError(f"ERR unknown subcommand '{args[0].decode()}'. Try SCRIPT HELP.")
        if len(args) != arity if arity > 0 else len(args) < -arity:
            raise _arity(f"SCRIPT|{sub}")
        if sub == "LOAD":
            return self.lua.load(args[1]).encode()
        if sub == "EXISTS":
            return [int(self.lua.has(sha.decode(errors="replace").lower())) for sha in args[1:]]
        self.lua = Lua(self.flavor)
        return OK


def _arity(name: str) -> CommandError:
    return CommandError(f"ERR wrong number of arguments for '{name.lower()}' command")


def _encode(arg: bytes | str | int | float) -> bytes:
    """An argument as redis-py's Encoder sends it."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, bool) or not isinstance(arg, int | float):
        raise TypeError(f"cannot send a {type(arg).__name__}")
    return repr(arg).encode()
