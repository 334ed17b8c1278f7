"""Plain unit tests of the sans-I/O decisions: no server needed."""

from __future__ import annotations

import math

import pytest
from redis.crc import key_slot
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from fencelock import LockConnectionError, LockError, StaleToken
from fencelock._core.kinds import Released
from fencelock._core.options import refuse_unknown
from fencelock._core.quorum import (
    NODE_TIMEOUT_MAX,
    NODE_TIMEOUT_MIN,
    acquire_outcome,
    decided,
    node_timeout,
    owned_answers,
    quorum,
    released,
    renew_answers,
    retry_jitter,
    tally,
    validity,
)
from fencelock._core.replies import (
    Busy,
    Granted,
    acquire_reply,
    fenced_set_reply,
    new_holder_token,
    queue_entry,
    release_grant,
    translate_error,
)
from fencelock._core.timing import drift, lease_deadline, remaining, retry_delay
from fencelock._keys import (
    LockKeys,
    escape,
    fence_key_for,
    validate_name,
    validate_prefix,
    validate_timeout,
    validate_ttl,
)


def test_keys_share_one_hash_slot() -> None:
    for name in ["job", "{job}", "a}b{c", "}", "{", "%", "ünï", "x" * 4096]:
        keys = LockKeys.for_name(name)
        slots = {key_slot(k.encode()) for k in (keys.lock, keys.fence, keys.channel)}
        assert len(slots) == 1, name
        assert keys.lock.startswith("fencelock:{")


def test_escaping_is_injective() -> None:
    names = ["{a}", "%7Ba%7D", "%7Ba}", "a", "%", "%25", "{", "%7B"]
    assert len({escape(n) for n in names}) == len(names)
    assert all("{" not in escape(n) and "}" not in escape(n) for n in names)


def test_custom_prefix() -> None:
    assert LockKeys.for_name("n", "app:").lock == "app:{n}:lock"
    with pytest.raises(ValueError, match="prefix"):
        validate_prefix("a{b")
    with pytest.raises(TypeError, match="prefix"):
        validate_prefix(3)


@pytest.mark.parametrize("resource", ["balance", "{user:1}:balance", "x{tag}y", "a{b"])
def test_fence_companion_in_resource_slot(resource: str) -> None:
    assert key_slot(fence_key_for(resource).encode()) == key_slot(resource.encode())


def test_validation() -> None:
    assert validate_ttl(1) == 1.0
    assert validate_timeout(None) is None and validate_timeout(0) == 0.0
    assert validate_timeout(math.inf) is None
    for bad in (0, -0.5, math.nan, math.inf, 10**9):
        with pytest.raises(ValueError, match="ttl"):
            validate_ttl(bad)
    for bad_type in ("1", None, True, [1]):
        with pytest.raises(TypeError, match="ttl"):
            validate_ttl(bad_type)
    with pytest.raises(ValueError, match="name"):
        validate_name("x" * 5000)


def test_holder_tokens_are_long_and_unique() -> None:
    tokens = {new_holder_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) >= 27 for t in tokens)  # 20 bytes of url-safe base64


def test_acquire_reply() -> None:
    assert acquire_reply([1, 7]) == Granted(7)
    assert acquire_reply([0, 1500]) == Busy(1.5)
    assert acquire_reply([0, -1]) == Busy(None)
    assert acquire_reply([b"1", b"3"]) == Granted(3)
    # a queued waiter: its entry's score comes back with the holder's remaining ttl
    assert acquire_reply([0, 1500, b"1795332386523807"]).queued == "1795332386523807"
    assert acquire_reply([0, 1500, ""]).queued is None  # not queued (wake="all")
    with pytest.raises(LockError):
        acquire_reply(None)


def test_queue_entry() -> None:
    assert queue_entry("ab12", "tok", 10_000, 3) == "ab12 10000 3 tok"


def test_release_grant_is_trusted_only_for_the_entry_last_seen_queued() -> None:
    score = "1795332386523807"
    assert release_grant(f"g{score} 42", score, 1) == Granted(42)
    # a block reserved for local hand-offs: the grant's token is its first
    assert release_grant(f"g{score} 42", score, 3) == Granted(40, reserved=42)
    # a grant to an earlier entry of this waiter (popped before its last re-try ran)
    assert release_grant(f"g{score} 42", "1795332386523999", 1) is None
    assert release_grant(f"g{score} 42", None, 1) is None  # the last re-try was not queued
    assert release_grant("1", score, 1) is None  # a wake-up, not a grant
    assert release_grant(None, score, 1) is None
    assert release_grant(f"g{score}", score, 1) is None  # malformed
    assert release_grant(f"g{score} x", score, 1) is None


def test_owned_and_fenced_replies() -> None:
    fenced_set_reply([1, b"0"], "k", 3)
    with pytest.raises(StaleToken) as info:
        fenced_set_reply([0, b"9"], "k", 3)
    assert (info.value.token, info.value.seen) == (3, 9)


def test_translate_error() -> None:
    assert isinstance(translate_error(ConnectionError("x"), "k"), LockConnectionError)
    assert isinstance(translate_error(TimeoutError("x"), "k"), LockConnectionError)
    wrong = translate_error(ResponseError("WRONGTYPE Operation against a key"), "k")
    assert type(wrong) is LockError and "another Redis type" in str(wrong)


def test_retry_delay_never_past_deadline() -> None:
    assert retry_delay(0.3, 10.0, None, 5.0) == 0.3  # the holder's lease ends first
    assert retry_delay(30.0, None, None, 5.0) == 30.0  # no polling: the lease's end
    assert retry_delay(30.0, 10.0, 1.0, 5.0) == 1.0  # a poll the user asked for
    assert retry_delay(30.0, 0.05, None, 5.0) == 0.05  # never past the caller's deadline
    # the holder's lease counted from when the re-try left, not from its reply's arrival
    assert retry_delay(0.5, None, None, 5.0, 0.2) == pytest.approx(0.3)
    assert retry_delay(0.1, None, None, 5.0, 0.2) == 0.0  # it ended while the reply came
    assert retry_delay(None, None, None, 5.0) == 5.0  # a key without expiry: the fallback
    assert retry_delay(0.3, 0.0, None, 5.0) == 0.0
    assert (
        remaining(None, 5.0) is None and remaining(4.0, 5.0) == 0.0 and remaining(6.0, 5.0) == 1.0
    )


def test_lease_deadline_is_conservative() -> None:
    assert drift(10.0) == pytest.approx(0.102)
    assert lease_deadline(100.0, 10.0) == pytest.approx(109.898)
    assert lease_deadline(100.0, 10.0) < 100.0 + 10.0


# -- Redlock: quorum, validity and what N replies mean (fencelock._core.quorum) ---------------


@pytest.mark.parametrize(("nodes", "majority"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_strict_majority(nodes: int, majority: int) -> None:
    assert quorum(nodes) == majority
    assert 2 * quorum(nodes) > nodes  # two majorities always share a node


def test_validity_is_ttl_less_elapsed_less_drift() -> None:
    assert validity(10.0, 0.5) == pytest.approx(10.0 - 0.5 - (0.1 + 0.002))
    assert validity(1.0, 0.99) < 0


def test_node_timeout_is_a_small_bounded_share_of_the_ttl() -> None:
    assert node_timeout(10.0) == pytest.approx(0.05)
    assert node_timeout(30.0) == NODE_TIMEOUT_MAX  # never more than 50 ms
    assert node_timeout(0.1) == NODE_TIMEOUT_MIN  # never less than 5 ms
    assert node_timeout(2.0) == pytest.approx(0.01)


def test_retry_jitter_is_random_and_bounded() -> None:
    delays = {retry_jitter(1.0) for _ in range(50)}
    assert len(delays) > 1 and all(0.0 <= d <= 0.05 for d in delays)
    assert all(0.0 <= retry_jitter(0.01) <= 0.01 for _ in range(20))


def read(replies: list[object]) -> list[Granted | Busy | BaseException]:
    """Each node's reply as its kind reads it (``acquire_reply``), or its failure."""
    results: list[Granted | Busy | BaseException] = []
    for reply in replies:
        try:
            results.append(reply if isinstance(reply, BaseException) else acquire_reply(reply))
        except LockError as exc:
            results.append(exc)
    return results


def test_one_server_is_a_majority_of_one() -> None:
    down = LockConnectionError("down")
    assert decided([True], "held") is True and decided([False], "held") is False
    with pytest.raises(LockConnectionError, match=r"^down$"):  # its own failure, as it is
        decided([down], "held")
    assert released([Released.STILL_HELD], "release") is Released.STILL_HELD
    with pytest.raises(LockConnectionError, match=r"^down$"):
        released([down], "release")


def test_a_release_on_several_servers_is_decided_by_a_majority() -> None:
    down = LockConnectionError("down")
    held = [Released.WOKE, Released.STILL_HELD, Released.NOT_HELD]
    assert released(held, "release") is Released.RELEASED
    gone = [Released.NOT_HELD, Released.NOT_HELD, Released.RELEASED]
    assert released(gone, "release") is Released.NOT_HELD
    with pytest.raises(LockConnectionError, match="1 of 3 nodes confirmed, 2 unreachable"):
        released([Released.RELEASED, down, down], "release")


def test_acquire_outcome_needs_a_majority() -> None:
    granted = [[1, 4], [1, 7], [1, 5], [0, 900], LockConnectionError("down")]
    outcome = acquire_outcome(read(granted), ttl=10.0, elapsed=0.01)
    # the token is the largest among the granting nodes, not yet confirmed: one node has it
    assert outcome.result == Granted(7, confirmed=False)
    split = [[1, 4], [1, 7], [0, 900], [0, 800], LockConnectionError("down")]
    outcome = acquire_outcome(read(split), ttl=10.0, elapsed=0.01)
    assert isinstance(outcome.result, Busy) and outcome.touched  # give back the two grants
    # the lock frees itself on a majority no later than the longest remaining busy lease
    assert outcome.result.pttl == pytest.approx(0.9)


def test_acquire_outcome_is_confirmed_when_a_majority_granted_the_largest_token() -> None:
    # the proposal granted by a majority (a node with a clock behind by more than the lease
    # ignored it): every later majority shares a node that holds it, nothing to write back
    agreed = [[1, 9], [1, 9], [1, 4], [1, 9], LockConnectionError("down")]
    assert acquire_outcome(read(agreed), ttl=10.0, elapsed=0.01).result == Granted(9)
    # a node ahead (its counter, or its clock): the largest, which one node holds, is to be
    # written back to a majority before it is used
    ahead = [[1, 9], [1, 9], [1, 12], [1, 9], [1, 9]]
    outcome = acquire_outcome(read(ahead), ttl=10.0, elapsed=0.01)
    assert outcome.result == Granted(12, confirmed=False)
    split = [[1, 9], [1, 12], [1, 12], [1, 9], [0, 900]]  # 12 by two of five: no majority
    assert acquire_outcome(read(split), ttl=10.0, elapsed=0.01).result == Granted(12, False)


def test_acquire_outcome_refuses_a_grant_without_validity() -> None:
    replies = [[1, 1]] * 5
    outcome = acquire_outcome(read(replies), ttl=1.0, elapsed=1.0)
    assert isinstance(outcome.result, Busy) and outcome.touched
    assert outcome.result.pttl == 0.0  # given back, nobody else holds it: re-try at once


def test_acquire_outcome_of_a_busy_lock_touches_nothing() -> None:
    outcome = acquire_outcome(read([[0, 500]] * 3), ttl=10.0, elapsed=0.0)
    assert outcome.result == Busy(0.5) and not outcome.touched
    no_expiry = acquire_outcome(read([[0, 500], [0, -1], [0, 10]]), ttl=10.0, elapsed=0.0)
    assert no_expiry.result == Busy(None)


def test_acquire_outcome_with_every_node_failed_raises_the_telling_error() -> None:
    down = LockConnectionError("refused")
    wrong_type = LockError("fencelock:{x}:lock holds a value of another Redis type")
    with pytest.raises(LockConnectionError):
        acquire_outcome(read([down, down, down]), ttl=10.0, elapsed=0.0)
    with pytest.raises(LockError, match="another Redis type"):
        acquire_outcome(read([down, wrong_type, down]), ttl=10.0, elapsed=0.0)
    # a majority answered: not granted (the caller retries until its timeout)
    outcome = acquire_outcome(read([down, [0, 100], [0, 100]]), ttl=10.0, elapsed=0.0)
    assert isinstance(outcome.result, Busy) and outcome.touched


def test_acquire_outcome_without_a_majority_answering_is_an_outage() -> None:
    down = LockConnectionError("fencelock:{x}:lock: ConnectionError: refused")
    # busy, granted or not: too few nodes answered to tell a held lock from a down majority
    for answered in ([0, 100], [1, 5]):
        with pytest.raises(LockConnectionError, match="2 of 3 nodes unreachable, a majority is 2"):
            acquire_outcome(read([down, down, answered]), ttl=10.0, elapsed=0.0)
    # an error reply is an answer: a majority reached is no outage
    wrong_type = LockError("a key holds a value of another Redis type")
    outcome = acquire_outcome(read([down, wrong_type, [0, 100]]), ttl=10.0, elapsed=0.0)
    assert isinstance(outcome.result, Busy)


def test_acquire_outcome_counts_a_foreign_hold_count_as_a_failure() -> None:
    # a reentrant re-entry: {-1, count} means this node's hold count is not ours
    outcome = acquire_outcome(read([[1, 3], [-1, 2], [-1, 0]]), ttl=10.0, elapsed=0.0)
    assert isinstance(outcome.result, Busy)


def test_tally_decides_yes_no_or_unknown() -> None:
    down = LockConnectionError("down")
    assert tally([True, True, True, False, down]).outcome(5, "release") is True
    assert tally([False, False, False, True, True]).outcome(5, "release") is False
    with pytest.raises(LockConnectionError, match="2 of 5 nodes confirmed, 2 unreachable"):
        tally([True, True, False, down, down]).outcome(5, "release")


def test_owned_and_renew_answers_per_node() -> None:
    down = LockConnectionError("down")
    assert owned_answers([1, 2, 0, down], (1, 2)) == [True, True, False, down]
    assert isinstance(owned_answers(["odd"], (1,))[0], LockError)
    per_lock = renew_answers([[1, 0], [1, 1], down], 2)
    assert per_lock == [[True, True, down], [False, True, down]]
    assert isinstance(renew_answers([[1]], 2)[0][0], LockError)  # a reply of the wrong size


def test_an_unknown_keyword_is_refused_in_the_words_of_the_call_made() -> None:
    accepted = ("ttl", "offset", "timeout", "redis")
    refuse_unknown("once_per", ["ttl", "redis"], accepted)  # all known: nothing to say
    with pytest.raises(TypeError) as near:
        refuse_unknown("once_per", ["ttl", "ofset"], accepted)
    assert str(near.value) == (
        "once_per() got an unexpected keyword argument 'ofset'; did you mean 'offset'? "
        "(its keywords: ttl, offset, timeout, redis)"
    )
    with pytest.raises(TypeError) as far:
        refuse_unknown("once_per", ["colour"], accepted)
    assert "did you mean" not in str(far.value)
    assert str(far.value).startswith("once_per() got an unexpected keyword argument 'colour' (")
