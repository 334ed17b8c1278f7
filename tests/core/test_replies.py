"""What the servers' replies mean (``fencelock._core.replies``) and the client's counters
(``fencelock._core.stats``), without a server. See also tests/core/test_core.py."""

from __future__ import annotations

import threading
from dataclasses import FrozenInstanceError, fields

import pytest
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ConnectionError,
    MovedError,
    ResponseError,
    TimeoutError,
)

from fencelock import LockConnectionError, LockError, LockLost, StaleToken
from fencelock._core.replies import (
    GONE,
    RENEWED,
    TAKEN,
    Busy,
    Granted,
    NoReply,
    acquire_reply,
    check_replicated,
    fenced_set_reply,
    holds,
    lock_value,
    new_waiter_id,
    queue_entry,
    release_grant,
    renew_reply,
    renewed_all,
    reserved_block,
    translate_error,
    unanswered,
)
from fencelock._core.stats import Counters, Statistics
from fencelock.errors import NotReplicated

# -- acquire ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        ([1, 7], Granted(7)),
        (["1", "7"], Granted(7)),  # decode_responses=True
        ([0, 1500], Busy(1.5)),
        ([0, 0], Busy(0.0)),  # the holder's lease ends this millisecond
        ([0, -1], Busy(None)),  # a key without expiry
        ([0, 1500, b""], Busy(1.5)),
    ],
)
def test_acquire_reply(reply: object, result: Granted | Busy) -> None:
    assert acquire_reply(reply) == result


@pytest.mark.parametrize("score", [b"1795332386523807", "1795332386523807"])
def test_acquire_reply_queued_score_decoded_or_not(score: object) -> None:
    result = acquire_reply([0, 1500, score])
    assert isinstance(result, Busy) and result.queued == "1795332386523807"


def test_reentry_with_a_foreign_hold_count_is_a_loss() -> None:
    with pytest.raises(LockLost, match="hold count 2"):
        acquire_reply([-1, 2])


def test_a_multi_lock_grant_has_a_token_per_name() -> None:
    result = acquire_reply([1, b"5", b"9", 12])
    assert result == Granted(5, more_fences=(9, 12))


@pytest.mark.parametrize("reply", [None, [], [1], [0, 2, 3, 4], b"OK", [1, None], [1, 2, None]])
def test_acquire_reply_of_another_shape_is_an_error(reply: object) -> None:
    with pytest.raises(LockError):
        acquire_reply(reply)


def test_a_non_numeric_reply_element_is_a_lock_error() -> None:
    with pytest.raises(LockError):
        acquire_reply([7, 1500])  # a status no script answers: not "busy"
    with pytest.raises(LockError):
        acquire_reply([b"x", 1])


# -- the grant a release makes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "block", "grant"),
    [
        (42, 1, Granted(42)),  # one token: nothing reserved
        (42, 3, Granted(40, reserved=42)),  # the first of the block; 41 and 42 for hand-offs
        (5, 5, Granted(1, reserved=5)),
    ],
)
def test_reserved_block(top: int, block: int, grant: Granted) -> None:
    assert reserved_block(top, block) == grant


def test_a_grant_by_release_uses_the_block_the_entry_asked_for() -> None:
    entry = queue_entry("ab12", "tok", 10_000, 4)
    waiter, ttl_ms, block, holder = entry.split(" ")
    assert (waiter, int(ttl_ms), int(block), holder) == ("ab12", 10_000, 4, "tok")
    assert release_grant("g17 100", "17", int(block)) == Granted(97, reserved=100)


def test_waiter_ids_are_unique_and_carry_no_space() -> None:
    ids = {new_waiter_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(" " not in i and ":" not in i for i in ids)  # a queue entry's / channel's part


# -- renew, hold checks, replication, fenced writes ------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "answers"),
    [
        ([1, 0, -1], [RENEWED, GONE, TAKEN]),
        ([b"1", b"0", b"-1"], [RENEWED, GONE, TAKEN]),
        ([], []),
    ],
)
def test_renew_reply_one_answer_per_lock(reply: list[object], answers: list[int]) -> None:
    assert renew_reply(reply, len(answers)) == answers


@pytest.mark.parametrize("reply", [[1, 1], [1, 1, 1, 1], None, 1, [1, 2, 1]])
def test_renew_reply_of_another_size_is_an_error(reply: object) -> None:
    with pytest.raises(LockError, match="renew reply"):
        renew_reply(reply, 3)


@pytest.mark.parametrize(
    ("reply", "held"),
    [
        ("tok", True),  # GET, decoded
        (b"tok", True),  # GET, raw
        (1, True),  # HEXISTS of a reentrant lock
        (0, False),
        (None, False),  # no key
        ("other", False),
        (b"other", False),
    ],
)
def test_holds(reply: object, held: bool) -> None:
    assert holds(reply, "tok") is held


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("tok 1795948106747642", ("tok", 1795948106747642)),  # a scripted grant's key
        (b"tok~host%3A1 17", ("tok~host%3A1", 17)),  # a labelled one, raw
        ("tok", ("tok", None)),  # taken without scripts: the counter has its token
        # anything else is all holder, as prelude.lua's lock_value reads it
        ("tok 17 18", ("tok 17 18", None)),
        ("tok \u00b2", ("tok \u00b2", None)),  # not an ASCII digit
        ("tok -1", ("tok -1", None)),
        ("tok ", ("tok ", None)),
    ],
)
def test_a_lock_value_is_read_as_the_scripts_read_it(
    value: str | bytes, read: tuple[str, int | None]
) -> None:
    assert lock_value(value) == read


def test_holds_compares_the_holder_token_of_a_value_with_a_token() -> None:
    assert holds("tok 17", "tok") and holds(b"tok 17", "tok")
    assert not holds("tok 17", "tok 17") and not holds("tok2 17", "tok")


@pytest.mark.parametrize(("acked", "wanted"), [(None, 2), (2, 2), (3, 2), (0, 0)])
def test_enough_replicas_acknowledged(acked: int | None, wanted: int) -> None:
    check_replicated(acked, wanted, "acquire")  # does not raise


def test_too_few_replicas_acknowledged() -> None:
    with pytest.raises(NotReplicated, match=r"acquire: 1 of 2 replicas") as info:
        check_replicated(1, 2, "acquire")
    assert (info.value.acked, info.value.wanted) == (1, 2)
    assert isinstance(info.value, LockError)


def test_fenced_set_reply() -> None:
    fenced_set_reply([b"1", b"5"], "k", 5)  # written
    with pytest.raises(StaleToken) as info:
        fenced_set_reply(["0", "9"], "balance", 3)
    assert (info.value.token, info.value.seen) == (3, 9)
    with pytest.raises(LockError, match="fenced_set reply"):
        fenced_set_reply([1], "k", 5)


# -- translating redis-py's errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind", "says"),
    [
        (ConnectionError("refused"), LockConnectionError, "ConnectionError: refused"),
        (TimeoutError("timed out"), LockConnectionError, "TimeoutError"),
        (NoReply("no reply in time"), LockConnectionError, "TimeoutError: no reply in time"),
        (BusyLoadingError("loading"), LockConnectionError, "loading"),  # still starting up
        (MovedError("3999 127.0.0.1:6381"), LockError, "pass a RedisCluster client"),
        (AskError("3999 127.0.0.1:6381"), LockError, "pass a RedisCluster client"),
        (ResponseError("WRONGTYPE Operation against a key"), LockError, "another Redis type"),
        (ResponseError("ERR value is not an integer"), LockError, "another Redis type"),
        (ResponseError("NOSCRIPT no such script"), LockError, "NOSCRIPT"),
    ],
)
def test_translate_error(error: Exception, kind: type[LockError], says: str) -> None:
    translated = translate_error(error, "fencelock:{job}:lock")  # type: ignore[arg-type]
    assert type(translated) is kind
    assert str(translated).startswith("fencelock:{job}:lock: ")
    assert says in str(translated)


def test_a_call_is_unanswered_when_its_error_comes_of_a_request_without_a_reply() -> None:
    silent = NoReply("no reply in time")
    failure = translate_error(silent, "lock 'job'")
    assert not unanswered(failure)
    failure.__cause__ = silent  # (raise ... from: the topology's)
    assert unanswered(failure)
    failure.__cause__ = ConnectionError("refused")  # nothing was sent
    assert not unanswered(failure)


# -- counters and statistics -----------------------------------------------------------------------


def test_counters_start_at_zero_and_add() -> None:
    counters = Counters()
    assert counters.snapshot() == Statistics()
    counters.add(renewals=3, renewal_calls=1)
    counters.add(renewals=2)
    assert (counters["renewals"], counters["renewal_calls"]) == (5, 1)
    assert counters.snapshot().renewals == 5


def test_snapshot_fills_in_the_gauges_and_is_frozen() -> None:
    counters = Counters()
    counters.add(acquired=4)
    stats = counters.snapshot(held=2, waiting=1, queued=3)
    assert (stats.held, stats.waiting, stats.queued, stats.acquired) == (2, 1, 3, 4)
    with pytest.raises(FrozenInstanceError):
        stats.held = 0  # type: ignore[misc]
    counters.add(acquired=1)
    assert stats.acquired == 4  # a snapshot does not move


def test_unknown_counter_is_an_error() -> None:
    with pytest.raises(KeyError):
        Counters().add(handoff=1)  # a typo must not count silently


def test_every_statistic_is_a_counter() -> None:
    names = [f.name for f in fields(Statistics)]
    counters = Counters()
    counters.add(**dict.fromkeys(names, 1))
    assert counters.snapshot() == Statistics(**dict.fromkeys(names, 1))


def test_counters_add_up_across_threads() -> None:
    counters = Counters()

    def add() -> None:
        for _ in range(2000):
            counters.add(wakeups=1, polls=1)

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (counters["wakeups"], counters["polls"]) == (16_000, 16_000)


@pytest.mark.parametrize(
    ("answers", "combined"),
    [
        ([RENEWED, RENEWED, RENEWED], RENEWED),
        ([RENEWED, GONE, RENEWED], GONE),
        ([GONE, TAKEN, RENEWED], TAKEN),  # another holder has one: the reason to give
        ([RENEWED], RENEWED),
    ],
)
def test_a_grant_over_several_keys_is_renewed_only_when_every_key_is(
    answers: list[int], combined: int
) -> None:
    assert renewed_all(answers) == combined


def test_a_key_without_an_answer_leaves_the_renewal_unanswered() -> None:
    error = LockError("no reply")
    assert renewed_all([RENEWED, error, GONE]) is error
