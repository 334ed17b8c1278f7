"""What the servers' replies mean."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote, unquote

import redis.exceptions

from .._keys import encodable
from ..errors import (
    Conflict,
    DatabaseRefused,
    LockConnectionError,
    LockError,
    LockLost,
    NotReplicated,
    StaleToken,
)

# 20 random bytes = 160 bits from the OS CSPRNG: unguessable, and short in Redis memory.
HOLDER_TOKEN_BYTES = 20


# A holder's label rides in its holder token: ``<random>~<label, escaped>``. The random part is
# url-safe base64, so the first '~' ends it. The token stays one word (queue entries are
# space-separated, serve.lua) and the label needs no key or write of its own.
LABEL_SEPARATOR = "~"
MAX_LABEL_LENGTH = 200


def new_holder_token(label: str | None = None) -> str:
    """A fresh holder token, carrying ``label`` (already checked by ``validate_label``)."""
    token = secrets.token_urlsafe(HOLDER_TOKEN_BYTES)
    if label is None:
        return token
    return f"{token}{LABEL_SEPARATOR}{_escape_label(label)}"


def _escape_label(label: str) -> str:
    """``label`` with '%' (the escape character), white space and unprintable characters
    percent-encoded (UTF-8): one word, readable as it is in Redis."""
    return "".join(
        quote(c, safe="") if c == "%" or c.isspace() or not c.isprintable() else c for c in label
    )


def validate_label(label: object) -> str | None:
    """A holder label: a non-empty str of at most MAX_LABEL_LENGTH characters, or None."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise TypeError(f"label must be a str or None, not {type(label).__name__}")
    if not label:
        raise ValueError("label must not be empty (None: no label)")
    if len(label) > MAX_LABEL_LENGTH:
        raise ValueError(f"label must be at most {MAX_LABEL_LENGTH} characters, got {len(label)}")
    return encodable("label", label)


def split_holder(stored: str | bytes) -> tuple[str, str | None]:
    """A stored holder token as (holder id, label or None). The id is a digest of the token's
    random part: stable for the grant and opaque, and not the token itself (whoever reads an
    inspection does not learn what would release the lock by the holder's own scripts)."""
    if isinstance(stored, bytes):
        stored = stored.decode("utf-8", "replace")
    token, sep, label = stored.partition(LABEL_SEPARATOR)
    holder_id = hashlib.sha256(token.encode()).hexdigest()[:16]
    return holder_id, unquote(label) if sep else None


# The queue entry of the waiters woken together on a lock's channel (wake="all", a reentrant
# lock's, a client's without scripts): one for them all, served after every waiter woken alone
# (acquire.lua). A release that finds the queue empty publishes nothing.
CHANNEL_WAITERS = "*"


def new_waiter_id() -> str:
    """A waiter's name in a lock's queue and its wake-up channel: unique, not a secret (anyone
    allowed PUBSUB sees it), so not derived from the holder token."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Granted:
    fence: int
    confirmed: bool = True  # Redlock: False until a majority holds this token (fence_raise.lua)
    reserved: int = 0  # the last fencing token reserved for local hand-offs (0: none)
    # a multi-lock's grant: the tokens of its other names, in order (``fence`` is the first's)
    more_fences: tuple[int, ...] = ()
    # when the request that was granted left (a re-sent one: the lease runs from it); None: the
    # caller's own send time
    sent_at: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Busy:
    pttl: float | None  # the holder's remaining lease in seconds; None: the key has no expiry
    # the score of this waiter's entry in the lock's queue (wake="one"), None when not queued
    queued: str | None = field(default=None, compare=False)


def _int(value: object) -> int:
    if isinstance(value, bytes | str):
        try:
            return int(value)
        except ValueError:
            raise LockError(f"unexpected reply element {value!r}") from None
    if isinstance(value, int):
        return value
    raise LockError(f"unexpected reply element {value!r}")


def acquire_reply(reply: object) -> Granted | Busy:
    if not isinstance(reply, list) or len(reply) < 2:
        raise LockError(f"unexpected acquire reply {reply!r}")
    status, value = _int(reply[0]), _int(reply[1])
    if status == 1:  # {1, fence} ({1, fence, fence...}: a multi-lock's, one per name)
        if len(reply) == 2:
            return Granted(value)
        return Granted(value, more_fences=tuple(_int(r) for r in reply[2:]))
    if len(reply) > 3:
        raise LockError(f"unexpected acquire reply {reply!r}")
    if status == -1:
        # reentrant: the server's hold count is not ours, so our lease expired and was retaken
        raise LockLost(f"cannot re-enter: the lease had expired (server hold count {value})")
    if status != 0:
        raise LockError(f"unexpected acquire reply {reply!r}")
    score = reply[2] if len(reply) == 3 else None
    if isinstance(score, bytes):
        score = score.decode()
    return Busy(value / 1000 if value >= 0 else None, queued=score or None)


def queue_entry(waiter: str, holder: str, ttl_ms: int, block: int) -> str:
    """A waiter's entry in a lock's queue that lets a release grant it the lock directly
    (release.lua): its id, and the token, ttl and fencing block the grant is made with."""
    return f"{waiter} {ttl_ms} {block} {holder}"


def release_grant(
    message: str | None, queued: str | None, block: int, sent_at: float | None = None
) -> Granted | None:
    """The grant a release announced on a waiter's channel (``'g<score> <top>'``), if it was made
    to the queue entry this waiter's last re-try found in place (``queued``, its score).

    A grant to an earlier entry (popped before that re-try ran, and so expired or released by
    then, since the re-try did not find the lock ours) must not be trusted, nor a message that is
    not a grant. The token is the first of the ``block`` the release reserved; ``sent_at``: as
    ``Granted.sent_at``."""
    if message is None or queued is None or not message.startswith("g"):
        return None
    score, _, top = message[1:].partition(" ")
    if score != queued or not top.isdigit():
        return None
    return reserved_block(int(top), block, sent_at)


def reserved_block(top: int, block: int, sent_at: float | None = None) -> Granted:
    """A grant that moved the fencing counter up by ``block`` to ``top``: its token is the first
    of the block, the rest are reserved for local hand-offs (``sent_at``: as
    ``Granted.sent_at``)."""
    return Granted(top - block + 1, reserved=top if block > 1 else 0, sent_at=sent_at)


# What renew.lua answers per lock.
RENEWED = 1
GONE = 0  # nobody holds it
TAKEN = -1  # another holder holds it


def renew_reply(reply: object, count: int) -> list[int]:
    """One answer per lock of a renew batch: ``RENEWED``, ``GONE`` or ``TAKEN``."""
    if not isinstance(reply, list) or len(reply) != count:
        raise LockError(f"unexpected renew reply {reply!r}")
    answers = [_int(r) for r in reply]
    if not set(answers) <= {RENEWED, GONE, TAKEN}:
        raise LockError(f"unexpected renew reply {reply!r}")
    return answers


def renewed_all(answers: Sequence[int | LockError]) -> int | LockError:
    """One answer for a grant over several keys (a multi-lock's), from each key's: ``RENEWED``
    when all were; else ``TAKEN`` if another holder has one, ``GONE`` if one is gone; a key's
    ``LockError`` (no answer) first, as nothing is known then."""
    for answer in answers:
        if isinstance(answer, LockError):
            return answer
    if all(answer == RENEWED for answer in answers):
        return RENEWED
    return TAKEN if TAKEN in answers else GONE


# What prelude.lua's lock_value reads: a holder token (no space) and ASCII digits
_LOCK_VALUE: Final = re.compile(r"(\S+) ([0-9]+)", re.ASCII)


def lock_value(value: str | bytes) -> tuple[str, int | None]:
    """A simple lock's value as (holder token, fencing token): ``'holder token'``, or the
    holder token alone where it was taken without scripts (its token is the counter's: None).
    Read as the scripts read it (prelude.lua): any other value is all holder."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    found = _LOCK_VALUE.fullmatch(value)
    if found is None:
        return value, None
    return found[1], int(found[2])


def holds(reply: object, holder: str) -> bool:
    """Whether a read of the lock key (GET, or HEXISTS for a reentrant lock) shows ``holder``.
    (A Cluster request goes through the user's client, which may decode.)"""
    if isinstance(reply, str | bytes):
        return lock_value(reply)[0] == holder
    return reply == 1


def permit_held(score: object, time: object) -> bool:
    """Whether a semaphore holder's permit (its lease end, ``score``, in ms; None: none) is
    held at the server's ``time`` (TIME's reply)."""
    if not isinstance(score, bytes | str | int | float):
        return False  # None: no permit
    seconds, micros = (int(part) for part in time)  # type: ignore[attr-defined]
    return float(score) > seconds * 1000 + micros // 1000


def check_replicated(acked: int | None, wanted: int, what: str) -> None:
    """Raise ``NotReplicated`` when fewer than ``wanted`` replicas acknowledged a write (``acked``
    is None when no acknowledgement was asked for)."""
    if acked is not None and acked < wanted:
        raise NotReplicated(
            f"{what}: {acked} of {wanted} replicas acknowledged in time", acked, wanted
        )


def fenced_set_reply(reply: object, key: str, token: int) -> None:
    if not isinstance(reply, list) or len(reply) != 2:
        raise LockError(f"unexpected fenced_set reply {reply!r}")
    status = _int(reply[0])
    if status == 0:
        raise StaleToken(key, token, _int(reply[1]))
    if status == -1:
        raise Conflict(f"{key!r} changed since it was read: nothing was written", key)
    if status != 1:
        raise LockError(f"unexpected fenced_set reply {reply!r}")


def _value(value: object) -> bytes | None:
    """A stored value as bytes (a Cluster request goes through the user's client, which may
    decode: what it decoded from UTF-8 encodes back to the same bytes)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise LockError(f"unexpected reply element {value!r}")


def fenced_get_reply(reply: object, key: str, token: int) -> bytes | None:
    """The value of ``key`` a fenced read returned (None: no value); ``StaleToken`` if refused."""
    if not isinstance(reply, list) or len(reply) not in (2, 3):
        raise LockError(f"unexpected fenced_get reply {reply!r}")
    if _int(reply[0]) != 1:
        raise StaleToken(key, token, _int(reply[1]))
    return _value(reply[2]) if len(reply) == 3 else None


def digest(value: bytes | None) -> str:
    """What fenced_set.lua compares a value read with (ARGV[3]): its SHA1 in hex, '' for none."""
    return "" if value is None else hashlib.sha1(value).hexdigest()


def versioned_reply(reply: object) -> tuple[bytes | None, int]:
    """(value, version) from versioned_get.lua."""
    if not isinstance(reply, list) or len(reply) not in (1, 2):
        raise LockError(f"unexpected versioned get reply {reply!r}")
    return _value(reply[1]) if len(reply) == 2 else None, _int(reply[0])


def versioned_set_reply(reply: object) -> tuple[bool, bytes | None, int]:
    """From versioned_set.lua: (written, value now, version now). Written: the value is the one
    sent (None here: the caller has it)."""
    if not isinstance(reply, list) or len(reply) not in (2, 3):
        raise LockError(f"unexpected versioned set reply {reply!r}")
    written = _int(reply[0])
    if written == 1 and len(reply) == 2:
        return True, None, _int(reply[1])
    if written == 0:
        return False, _value(reply[2]) if len(reply) == 3 else None, _int(reply[1])
    raise LockError(f"unexpected versioned set reply {reply!r}")


class DatabaseRefusal(redis.exceptions.ResponseError):
    """The server's error reply to the ``SELECT`` of a new connection, with the index asked for
    (raised while connecting, ``_transport.py``: a redis-py error, so that redis-py cleans the
    connection up and every request path translates it)."""

    def __init__(self, db: int, reply: str) -> None:
        super().__init__(f"database index {db}: {reply}")
        self.db = db
        self.reply = reply


class NoReply(redis.exceptions.TimeoutError):
    """A request that was sent got no reply in time. The server may still run it: a paused one
    runs what waits in its sockets as soon as it resumes (raised by ``_async/transport.py``; an
    acquire's grant that may come so is given back late: ``_core/giveback.py``). A server that
    closed the connection instead ran it or not by then: what it granted is given back at once."""


def unanswered(error: BaseException) -> bool:
    """Whether ``error`` ended a call with a request of it left without a reply (``NoReply``,
    the cause of the call's ``LockConnectionError``)."""
    return isinstance(error.__cause__, NoReply)


def translate_error(exc: redis.exceptions.RedisError, what: str) -> LockError:
    """The typed error for a failure of a request about ``what`` (a key or a server)."""
    if isinstance(exc, DatabaseRefusal):  # the client's setting, whatever the request was about
        return DatabaseRefused(exc.db, exc.reply)
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        kind = "TimeoutError" if isinstance(exc, NoReply) else type(exc).__name__
        return LockConnectionError(f"{what}: {kind}: {exc}")
    message = str(exc)
    if isinstance(exc, redis.exceptions.AskError):  # MOVED/ASK: a Cluster node, with a plain client
        return LockError(
            f"{what}: the server is a Redis Cluster node (it answered {type(exc).__name__} "
            f"{message}): pass a RedisCluster client to the LockClient, not a Redis client"
        )
    if "WRONGTYPE" in message or "not an integer" in message:
        return LockError(f"{what}: a key holds a value of another Redis type: {message}")
    return LockError(f"{what}: {message}")
