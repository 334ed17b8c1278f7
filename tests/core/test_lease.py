"""The lease rules of ``fencelock._core.lease``, one at a time, without a server.

Times are plain numbers passed as ``now``: no clock is read, nothing sleeps.
"""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from fencelock._core.kinds import (
    BARGED_TRIES,
    AllOf,
    LeaseSpec,
    Mutex,
    Permits,
    Reentrant,
    Released,
    renewal,
)
from fencelock._core.lease import (
    LOCK_WORDS,
    Exit,
    Grant,
    Words,
    arrived_late,
    exit_action,
    granted,
    handoff_within_block,
    loss_reason,
    reserve,
    should_cancel,
    time_left,
    trusted_release_grant,
)
from fencelock._core.natives import ServerCommands
from fencelock._core.replies import Granted
from fencelock._core.timing import lease_deadline
from fencelock._keys import POLICIES, LockKeys

TTL = 10.0
NOW = 1000.0


def spec(reentrant: bool = False, ttl: float = TTL, name: str = "job") -> LeaseSpec:
    return LeaseSpec.of(Reentrant() if reentrant else Mutex(), name, "fencelock:", ttl, LOCK_WORDS)


def grant(**fields: object) -> Grant:
    values: dict[str, object] = {"holder": "tok", "fence": 7, "pid": 1, "deadline": NOW + 5}
    values.update(fields)
    return Grant(**values)  # type: ignore[arg-type]


# -- LeaseSpec: keys, ARGV and the local queue's line ---------------------------------------------


def _documented(script: str, what: str) -> int:
    """How many KEYS / ARGV the header of ``script`` documents."""
    header = files("fencelock._scripts").joinpath(f"{script}.lua").read_text()
    return max(int(n) for n in re.findall(rf"^-- {what}\[(\d+)\]", header, re.MULTILINE))


@pytest.mark.parametrize(
    ("reentrant", "acquire", "release"),
    [(False, "acquire", "release"), (True, "reentrant_acquire", "reentrant_release")],
)
def test_spec_sends_what_each_script_documents(reentrant: bool, acquire: str, release: str) -> None:
    s = spec(reentrant)
    assert len(s.acquire_keys) == _documented(acquire, "KEYS")
    # on a Redlock quorum, a kind whose lock key holds its token proposes one (acquire.lua's last)
    proposal = 1 if s.kind.token_in_key else 0
    [sent], _ = s.kind.acquire_request(s, "tok", 0, 1, "w", ServerCommands(), proposal)
    assert len(sent) - 3 - len(s.acquire_keys) == _documented(acquire, "ARGV")  # (EVALSHA sha n)
    assert len(s.release_keys) == _documented(release, "KEYS")
    assert len(s.release_args("tok", "", "PUBLISH", 1)) == _documented(release, "ARGV")


def test_a_renewal_names_a_counter_only_where_the_lock_key_holds_no_token() -> None:
    # renew.lua's KEYS: a simple lock's key holds its token, and stands for its counter too (a
    # key named that does not exist would be refused during a Cluster's slot migration)
    simple, reentrant = LockKeys.for_name("job"), LockKeys.for_name("re")
    keys, args = renewal([spec(), spec(reentrant=True, name="re")], ["a", "b"], [100, 200])
    assert keys == [simple.lock, simple.lock, reentrant.lock, reentrant.fence]
    assert args == ["a", 100, "b", 200]


def test_acquire_keys_include_the_queue_of_waiters() -> None:
    keys = LockKeys.for_name("job")
    assert spec().acquire_keys == (keys.lock, keys.fence, keys.queue)
    # reentrant waiters are woken all together: '*' in the queue stands for them
    assert spec(reentrant=True).acquire_keys == (keys.lock, keys.fence, keys.queue)


@pytest.mark.parametrize("reentrant", [False, True])
def test_release_keys_are_lock_queue_fence_for_both_kinds(reentrant: bool) -> None:
    keys = LockKeys.for_name("job")
    assert spec(reentrant).release_keys == (keys.lock, keys.queue, keys.fence)


def test_semaphore_scripts_take_what_they_document() -> None:
    s = LeaseSpec.of(Permits.semaphore(2, 5), "job", "fencelock:", TTL, Words("semaphore"))
    assert len(s.acquire_keys) == _documented("semaphore_acquire", "KEYS")
    assert len(s.acquire_args("tok", 0, 1, "w", "PUBLISH")) == _documented(
        "semaphore_acquire", "ARGV"
    )
    assert len(s.release_keys) == _documented("semaphore_release", "KEYS")
    assert len(s.release_args("tok", "", "PUBLISH", 1)) == _documented("semaphore_release", "ARGV")


def test_a_multi_lock_sends_what_its_scripts_document() -> None:
    """Per name: its lock key, counter and queue (KEYS[3i-2..3i]) and its channel (the last
    ARGV), in canonical order."""
    names = ("a", "b", "c")
    s = LeaseSpec.of(AllOf(names=names), "a", "fencelock:", TTL, Words("multi-lock"))
    members = [LockKeys.for_name(n) for n in names]
    assert s.acquire_keys == s.release_keys
    assert s.acquire_keys == tuple(k for m in members for k in (m.lock, m.fence, m.queue))
    acquire = s.acquire_args("tok", 0, 1, ">ch", "PUBLISH")
    release = s.release_args("tok", "", "PUBLISH", 1)
    assert len(acquire) == _documented("multi_acquire", "ARGV") + len(names)
    assert len(release) == _documented("multi_release", "ARGV") + len(names)
    assert acquire[-3:] == release[-3:] == tuple(m.channel for m in members)
    assert s.renewed_keys == tuple(m.lock for m in members)
    assert s.what == "multi-lock ['a', 'b', 'c']"
    assert s.kind.waiter_entry("w1", "chan:w1", "tok", 10, 1, True, 0) == ">chan:w1"


def test_messages_name_the_primitive_and_the_name_never_a_key() -> None:
    assert spec().what == "lock 'job'"
    assert LeaseSpec.of(Permits(), "s", "app:", TTL, Words("semaphore")).what == "semaphore 's'"


def test_simple_and_reentrant_locks_on_one_name_queue_apart() -> None:
    simple, reentrant = spec().line, spec(reentrant=True).line
    assert simple != reentrant
    assert simple.startswith(LockKeys.for_name("job").lock)
    assert spec(name="other").line != simple
    assert spec(ttl=3.0).line == simple  # the ttl is not part of the name


@pytest.mark.parametrize(("ttl", "ms"), [(10.0, 10_000), (0.0015, 2), (0.0001, 1), (2.5, 2500)])
def test_ttl_in_milliseconds_is_rounded_and_never_zero(ttl: float, ms: int) -> None:
    assert spec(ttl=ttl).ttl_ms == ms


def test_acquire_args_in_script_order() -> None:
    # acquire.lua: holder, ttl ms, block, waiter entry
    assert spec().acquire_args("tok", 0, 3, "w1", "PUBLISH") == ("tok", 10_000, 3, "w1")
    # reentrant_acquire.lua: holder, ttl ms, believed hold count, block, '*' (a waiter)
    assert spec(reentrant=True).acquire_args("tok", 2, 3, "*", "P") == ("tok", 10_000, 2, 3, "*")


def test_release_args_carry_a_simple_locks_waiter_entry_a_reentrant_locks_holds() -> None:
    channel = LockKeys.for_name("job").channel
    # release.lua: holder, channel, publish command, the waiter's entry, whether to announce,
    # whether it barges
    assert spec().release_args("tok", "w1", "SPUBLISH", 1) == (
        "tok",
        channel,
        "SPUBLISH",
        "w1",
        "",
        "",
    )
    barging = LeaseSpec.of(Mutex(fair=False), "job", "fencelock:", TTL, LOCK_WORDS)
    assert barging.release_args("tok", "", "PUBLISH", 1)[4:] == ("", "1")
    # reentrant_release.lua: holder, channel, publish command, the holds before this release
    assert spec(reentrant=True).release_args("tok", "w1", "PUBLISH", 3) == (
        "tok",
        channel,
        "PUBLISH",
        3,
    )


# -- Released: what a release reply code means -----------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "code", "freed"),
    [
        (0, Released.NOT_HELD, False),
        (1, Released.RELEASED, True),
        (2, Released.STILL_HELD, False),
        (3, Released.WOKE, True),
        (4, Released.GRANTED, True),
        (b"3", Released.WOKE, True),  # a client that does not decode
        ("4", Released.GRANTED, True),  # decode_responses=True
    ],
)
def test_release_reply_codes(reply: object, code: Released, freed: bool) -> None:
    assert Released.of(reply) is code
    assert code.freed is freed


@pytest.mark.parametrize("reply", [5, -1, None, True, False, b"x", "1.0", 1.0, [1], b""])
def test_release_reply_out_of_the_table_is_an_error(reply: object) -> None:
    with pytest.raises(ValueError, match="unexpected release reply"):
        Released.of(reply)


# -- Grant: the lease value and its transitions ----------------------------------------------------


def test_granted_lease_runs_from_the_request_not_the_reply() -> None:
    g = granted(Granted(7), "tok", sent_at=NOW, ttl=TTL, pid=42)
    assert (g.holder, g.fence, g.pid, g.depth) == ("tok", 7, 42, 1)
    assert g.deadline == lease_deadline(NOW, TTL) < NOW + TTL
    assert not g.lost and not g.in_block and g.confirmed and g.reserved == 0


def test_granted_from_a_resent_request_counts_from_the_one_that_was_granted() -> None:
    g = granted(Granted(7, sent_at=NOW - 2), "tok", sent_at=NOW, ttl=TTL, pid=1)
    assert g.deadline == lease_deadline(NOW - 2, TTL)


def test_granted_keeps_confirmation_and_reserved_block() -> None:
    g = granted(Granted(7, confirmed=False, reserved=9), "tok", sent_at=NOW, ttl=TTL, pid=1)
    assert (g.confirmed, g.reserved) == (False, 9)


@pytest.mark.parametrize(
    ("deadline", "lost", "expired"),
    [
        (NOW + 1, False, False),
        (NOW, False, True),  # the deadline itself is already gone
        (NOW - 1, False, True),
        (NOW + 1, True, True),  # declared lost: gone whatever the deadline says
    ],
)
def test_expired(deadline: float, lost: bool, expired: bool) -> None:
    assert grant(deadline=deadline, lost=lost).expired(NOW) is expired


def test_renewed_restarts_the_lease_from_the_renewal_request() -> None:
    g = grant(deadline=NOW + 1)
    g.renewed(NOW + 0.5, TTL)
    assert g.deadline == lease_deadline(NOW + 0.5, TTL)
    assert not g.expired(NOW + 5) and g.expired(NOW + 0.5 + TTL)


def test_renewed_does_not_bring_a_lost_grant_back() -> None:
    g = grant(lost=True)
    g.renewed(NOW, TTL)
    assert g.expired(NOW)


def test_reentered_counts_a_hold_and_restarts_the_lease() -> None:
    g = grant(deadline=NOW + 1)
    g.reentered(NOW, TTL)
    g.reentered(NOW + 1, TTL)
    assert g.depth == 3
    assert g.deadline == lease_deadline(NOW + 1, TTL)


def test_a_loss_is_signalled_once_with_the_reason_found_first() -> None:
    g = grant()
    assert g.mark_lost("data_loss") is True
    # found again later (at release, past the deadline): the cause stays the one found first
    assert g.mark_lost("unreachable") is False
    assert g.lost and g.expired(NOW) and g.loss == "data_loss"


def test_grants_compare_by_identity() -> None:
    # the local queue tells owners apart with ``is``: two equal-looking grants are not one
    assert grant() != grant()


# -- the late-grant give-back ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "late"),
    [
        (NOW + 0.001, False),
        (lease_deadline(NOW, TTL) - 0.001, False),
        (lease_deadline(NOW, TTL), True),  # the local deadline reached: given back
        (NOW + TTL - 0.05, True),  # inside the server's lease, but past the drift allowance
        (NOW + 60, True),
    ],
)
def test_arrived_late(now: float, late: bool) -> None:
    assert arrived_late(NOW, TTL, now) is late


# -- local hand-off within a reserved block --------------------------------------------------------


def test_handoff_within_block_takes_the_next_token_on_the_same_lease() -> None:
    g = grant(fence=7, reserved=9, deadline=NOW + TTL, depth=1, in_block=True, task="t")
    g.cancelled = True
    handed = handoff_within_block(g, TTL, NOW)
    assert handed is not None and handed is not g
    assert handed.fence == 8 and handed.reserved == 9
    assert (handed.holder, handed.deadline, handed.pid) == (g.holder, g.deadline, g.pid)
    # the next holder's block state starts afresh
    assert (handed.task, handed.cancelled, handed.in_block, handed.lost) == (
        None,
        False,
        False,
        False,
    )
    assert g.fence == 7  # the releasing grant is left as it was


def test_handoff_streak_uses_the_whole_block_then_needs_the_script() -> None:
    g: Grant | None = grant(fence=5, reserved=8, deadline=NOW + TTL)
    fences = []
    while g is not None:
        fences.append(g.fence)
        g = handoff_within_block(g, TTL, NOW)
    assert fences == [5, 6, 7, 8]


def test_a_lost_grant_is_never_handed_on() -> None:
    g = grant(fence=7, reserved=9, deadline=NOW + TTL, lost=True)
    assert handoff_within_block(g, TTL, NOW) is None


def test_handoff_without_a_reserved_block_needs_the_script() -> None:
    assert handoff_within_block(grant(fence=7, reserved=0, deadline=NOW + TTL), TTL, NOW) is None


@pytest.mark.parametrize(
    ("left", "to_ttl", "within"),
    [
        (TTL, TTL, True),
        (2.0, 3.0, True),  # exactly what the watchdog keeps a lease at (two thirds)
        (1.99, 3.0, False),  # less: restart the lease with the script
        (1.0, 1.5, True),  # a next holder with a shorter ttl needs less
        (5.0, 30.0, False),  # a next holder with a longer ttl needs more
        (0.0, TTL, False),
        (-1.0, TTL, False),  # past the deadline
    ],
)
def test_handoff_within_block_needs_two_thirds_of_the_next_ttl(
    left: float, to_ttl: float, within: bool
) -> None:
    g = grant(fence=7, reserved=9, deadline=NOW + left)
    assert (handoff_within_block(g, to_ttl, NOW) is not None) is within


# -- when a grant announced by a release may be used -----------------------------------------------

SCORE = "1795332386523807"


def test_release_grant_trusted_with_enough_lease_left() -> None:
    result = trusted_release_grant(f"g{SCORE} 42", SCORE, 1, NOW, TTL, NOW + 1)
    assert result == Granted(42)
    # the lease is counted from the re-try that found the entry queued (the grant came after)
    assert result is not None and result.sent_at == NOW


def test_release_grant_trusted_keeps_the_reserved_block() -> None:
    result = trusted_release_grant(f"g{SCORE} 42", SCORE, 3, NOW, TTL, NOW)
    assert result == Granted(40, reserved=42)
    assert result is not None and result.sent_at == NOW


@pytest.mark.parametrize(
    ("message", "queued"),
    [
        (f"g{SCORE} 42", "1795332386523999"),  # made to an earlier entry of this waiter
        (f"g{SCORE} 42", None),  # the last re-try was not queued
        ("1", SCORE),  # a wake-up, not a grant
        (None, SCORE),  # no message
        (f"g{SCORE}", SCORE),  # malformed
    ],
)
def test_release_grant_not_for_this_entry_is_not_trusted(
    message: str | None, queued: str | None
) -> None:
    assert trusted_release_grant(message, queued, 1, NOW, TTL, NOW) is None


@pytest.mark.parametrize(
    ("now", "trusted"),
    [
        (NOW, True),
        (lease_deadline(NOW, TTL) - TTL / 2, True),  # exactly half the ttl left
        (lease_deadline(NOW, TTL) - TTL / 2 + 0.001, False),  # less than half: re-try instead
        (NOW + TTL, False),
    ],
)
def test_release_grant_needs_half_the_ttl_left_from_the_retry(now: float, trusted: bool) -> None:
    result = trusted_release_grant(f"g{SCORE} 42", SCORE, 1, NOW, TTL, now)
    assert (result is not None) is trusted


# -- the exit policy table of __exit__ / __aexit__ -------------------------------------------------

_HOW = {"normally": (False, False), "cancelled by us": (True, True), "own error": (True, False)}
_EXIT_TABLE = [
    # the lease held: nothing to say, however the body ended
    *[(False, policy, how, Exit.NOTHING) for policy in POLICIES for how in _HOW],
    # lost, but the user asked to ignore it
    *[(True, "ignore", how, Exit.NOTHING) for how in _HOW],
    *[(True, policy, "normally", Exit.RAISE) for policy in ("raise", "cancel")],
    *[(True, policy, "cancelled by us", Exit.RAISE) for policy in ("raise", "cancel")],
    *[(True, policy, "own error", Exit.NOTE) for policy in ("raise", "cancel")],
]


@pytest.mark.parametrize(("lost", "policy", "how", "action"), _EXIT_TABLE)
def test_exit_policy_table(lost: bool, policy: str, how: str, action: Exit) -> None:
    body_raised, cancelled_by_us = _HOW[how]
    assert exit_action(lost, policy, body_raised, cancelled_by_us) is action


def test_exit_policy_table_covers_every_case() -> None:
    assert {(lost, p, how) for lost, p, how, _ in _EXIT_TABLE} == {
        (lost, p, how) for lost in (False, True) for p in POLICIES for how in _HOW
    }


# -- should a loss cancel the task in the block ----------------------------------------------------

BODY, OTHER = object(), object()


@pytest.mark.parametrize(
    ("policy", "task", "current", "cancel"),
    [
        ("cancel", BODY, OTHER, True),  # the watchdog (or another task) declares the loss
        ("cancel", BODY, BODY, False),  # the body's own check(): it raises LockLost instead
        ("cancel", None, OTHER, False),  # not inside ``async with``: no task to cancel
        ("cancel", BODY, None, True),  # declared from a thread (no current task)
        ("raise", BODY, OTHER, False),
        ("ignore", BODY, OTHER, False),
    ],
)
def test_should_cancel(policy: str, task: object, current: object, cancel: bool) -> None:
    assert should_cancel(policy, task, current) is cancel


# -- how many fencing tokens a grant reserves ------------------------------------------------------


@pytest.mark.parametrize(
    ("one_at_a_time", "ahead", "block"),
    [
        (False, 0, 1),  # nobody queued behind: one token
        (False, 5, 6),  # the grant's own token, and one per hand-off the streak may make
        (True, 5, 1),  # Redlock / min_replicas: every grant goes to the servers
        (True, 0, 1),
    ],
)
def test_reserve(one_at_a_time: bool, ahead: int, block: int) -> None:
    assert reserve(one_at_a_time, ahead) == block


def test_reserved_block_covers_a_full_streak() -> None:
    """A block reserved for ``max_handoffs`` hand-offs lets the whole streak go without a
    request: the first holder takes the first token, each hand-off the next."""
    max_handoffs, top = 4, 20
    block = reserve(False, max_handoffs)
    g: Grant | None = granted(
        Granted(top - block + 1, reserved=top), "tok", sent_at=NOW, ttl=TTL, pid=1
    )
    handoffs = -1
    while g is not None:
        handoffs += 1
        g = handoff_within_block(g, TTL, NOW)
    assert handoffs == max_handoffs


# -- the bound of a call near its deadline ---------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline", "left"),
    [
        (None, 2.0),  # no deadline: one request timeout
        (NOW + 60, 2.0),  # far away: still one request timeout at most
        (NOW + 0.5, 2.0),  # near: the deadline plus one request timeout, capped
        (NOW, 2.0),
        (NOW - 0.5, 1.5),  # passed: what is left of the request timeout after it
        (NOW - 2.0, 0.0),  # no time left: the request is not sent
        (NOW - 3.0, -1.0),
    ],
)
def test_time_left(deadline: float | None, left: float) -> None:
    assert time_left(deadline, 2.0, NOW) == pytest.approx(left)


def test_a_loss_is_explained_by_what_was_seen() -> None:
    running = grant(deadline=NOW + 5)
    ran_out = grant(deadline=NOW - 1)
    # the server shows another holder: taken over, whenever
    assert loss_reason(running, NOW, other_holder=True) == "taken_over"
    assert loss_reason(ran_out, NOW, other_holder=True) == "taken_over"
    # nobody, before the lease could end on the server: it dropped the key
    assert loss_reason(running, NOW) == "data_loss"
    assert loss_reason(grant(deadline=NOW + 5, unanswered=True), NOW) == "data_loss"
    # the lease ran out: with a renewal unanswered, or none sent
    assert loss_reason(ran_out, NOW) == "expired"
    assert loss_reason(grant(deadline=NOW - 1, unanswered=True), NOW) == "unreachable"
    assert loss_reason(grant(deadline=NOW), NOW) == "expired"  # the deadline itself is out


def test_a_barging_waiter_queues_by_its_id_for_its_first_tries_then_in_order() -> None:
    in_order = "w1 10 1 tok"
    entries = [Mutex(fair=False).waiter_entry("w1", "c", "tok", 10, 1, True, n) for n in range(5)]
    assert entries == ["w1"] * BARGED_TRIES + [in_order] * (5 - BARGED_TRIES)
    # a fair lock's waiter queues in order from the start; where no release grants (Redlock,
    # min_replicas), either by its id alone
    assert Mutex().waiter_entry("w1", "c", "tok", 10, 1, True, 0) == in_order
    assert Mutex(fair=False).waiter_entry("w1", "c", "tok", 10, 1, False, 9) == "w1"
    assert Mutex().waiter_entry("w1", "c", "tok", 10, 1, False, 0) == "w1"
