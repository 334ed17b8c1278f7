"""What an operator sees, without a server: holder labels in holder tokens, inspect.lua's reply,
the Redlock majority's view, SCAN patterns over names
(``fencelock._core.inspection``, ``fencelock._core.replies``)."""

from __future__ import annotations

import pytest

from fencelock._core.inspection import (
    ForceOutcome,
    NodeView,
    WaiterInfo,
    force_reply,
    inspect_reply,
    majority_view,
    name_of,
    permits_info,
    scan_pattern,
    semaphore_state,
    unescape,
)
from fencelock._core.latch import LatchKeys, latch_state
from fencelock._core.replies import new_holder_token, queue_entry, split_holder, validate_label
from fencelock._keys import LockKeys, SemaphoreKeys, escape
from fencelock.errors import LockConnectionError, LockError


@pytest.mark.parametrize(
    "label",
    ["web-1:4242:MainThread", "a b\tc\nd", "100%", "tilde~in~label", "é:ü:漢字", "x" * 200],
)
def test_a_label_survives_the_holder_token(label: str) -> None:
    token = new_holder_token(label)
    assert not any(c.isspace() for c in token)  # one word in a queue entry
    holder, shown = split_holder(token)
    assert shown == label
    assert split_holder(token.encode()) == (holder, label)
    entry = queue_entry("w1", token, 1000, 1)
    assert len(entry.split(" ")) == 4


def test_a_token_without_label() -> None:
    token = new_holder_token()
    holder, label = split_holder(token)
    assert label is None and len(holder) == 16 and holder not in token


def test_holder_ids_differ_per_grant_and_hide_the_token() -> None:
    first, second = new_holder_token("same"), new_holder_token("same")
    assert split_holder(first)[0] != split_holder(second)[0]


@pytest.mark.parametrize(
    ("label", "error"),
    [
        (3, TypeError),
        (b"x", TypeError),
        ("", ValueError),
        ("x" * 201, ValueError),
        ("\ud800", ValueError),
    ],
)
def test_bad_labels(label: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="label"):
        validate_label(label)


def test_inspect_reply() -> None:
    token = new_holder_token("h")
    reply = [
        b"string", token.encode(), 1, 4500, b"1795000000000005", b"1795000000500000", 3,
        b"w1 30000 1 " + new_holder_token("q").encode(), b"1795000000000000",
        b"w2", b"1795000000400000",
        b">fencelock:{a}:released:w3", b"1795000000450000",  # a multi-lock's waiter
    ]  # fmt: skip
    view = inspect_reply(reply)
    info = view.info("job")
    assert info is not None
    assert (info.label, info.ttl, info.token, info.kind, info.count, info.queued) == (
        "h",
        4.5,
        1795000000000005,
        "simple",
        1,
        3,
    )
    assert info.waiters == (
        WaiterInfo("w1", 0.5, "q"),
        WaiterInfo("w2", 0.1, None),
        WaiterInfo("w3", 0.05, None),
    )
    empty = inspect_reply(["none", "", 0, -2, "", "1795000000500000", 0])
    assert empty.info("job") is None
    assert inspect_reply(["hash", token, "2", "-1", "", "1", "0"]).info("j").ttl is None  # type: ignore[union-attr]
    with pytest.raises(LockError):
        inspect_reply(["string", token])


def view(
    holder: str, pttl: int, counter: int | None, waiters: tuple[WaiterInfo, ...] = ()
) -> NodeView:
    return NodeView(
        "string" if holder else "none",
        holder,
        1 if holder else 0,
        pttl,
        counter,
        len(waiters),
        waiters,
    )


def test_majority_view() -> None:
    a, b = new_holder_token(), new_holder_token()
    w = WaiterInfo("w", 1.0, None)
    nodes = [
        view(a, 5000, 10, (w,)),
        view(a, 4000, 12),
        view(a, 3000, 11),
        view(b, 9000, 99),
        view("", -2, None),
    ]
    merged = majority_view(nodes)
    assert merged is not None
    # held while 3 of 5 hold it: the third longest lease; the token: their largest counter
    assert (merged.holder, merged.pttl, merged.counter, merged.waiters) == (a, 3000, 12, (w,))
    split = [
        view(a, 5000, 1),
        view(a, 5000, 1),
        view(b, 5000, 2),
        view(b, 1, 2),
        view("", -2, None),
    ]
    assert majority_view(split) is None
    down = LockConnectionError("down")
    assert majority_view([view(a, 1, 1), view(a, 1, 1), down]) is not None
    with pytest.raises(LockConnectionError):
        majority_view([view(a, 1, 1), down, down])


def test_force_reply() -> None:
    token = new_holder_token("ops")
    done = force_reply("job", [1, token, b"42"])
    assert (done.outcome, done.label, done.token) == (ForceOutcome.RELEASED, "ops", 42)
    assert force_reply("job", [0, "", ""]).outcome is ForceOutcome.NOT_HELD
    assert force_reply("job", [-1, token, "43"]).outcome is ForceOutcome.TOKEN_MISMATCH


@pytest.mark.parametrize("name", ["plain", "a{b}c", "100%", "%7B", "}{", "*?[x]", "é"])
def test_names_round_trip_through_their_keys(name: str) -> None:
    assert unescape(escape(name)) == name
    families = {"sem": "lock", "rw": "lock", "latch": "state"}
    assert name_of(LockKeys.for_name(name, "app:").lock, "app:", families) == (name, "lock")
    for kind in ("sem", "rw"):
        keys = SemaphoreKeys.for_semaphore(name, "app:", kind)
        assert name_of(keys.lock, "app:", families) == (name, kind)
        assert name_of(keys.state, "app:", families) is None
        assert name_of(keys.lock, "app:", {}) is None  # a family nobody registered
    latch = LatchKeys.for_latch(name, "app:")  # found by its state: there before anyone joins
    assert name_of(latch.state, "app:", families) == (name, "latch")
    assert name_of(latch.lock, "app:", families) is None
    assert name_of(LockKeys.for_name(name).fence, "fencelock:", families) is None  # not a lock
    assert name_of(LockKeys.for_name(name).lock, "app:", families) is None  # another prefix


def test_scan_patterns() -> None:
    assert scan_pattern("fencelock:", "*") == "fencelock:{*}:*"
    assert scan_pattern("fencelock:", "a{b}%*") == "fencelock:{a%7Bb%7D%25*}:*"
    assert scan_pattern("p*[x]:", "*") == "p\\*\\[x\\]:{*}:*"  # the prefix is literal


NOW = 1_000_000  # ms, the server's clock in latch_state.lua's reply


def latch_reply(
    participants: list[tuple[str, int]], counted: list[str], *, parties: int = 0
) -> list[object]:
    """latch_state.lua's reply for a latch of 3 (a barrier of ``parties``) in generation 1."""
    found = [value for holder, end in participants for value in (holder, end)]
    return [1, parties or 3, 0, parties, NOW, found, counted]


def test_a_latch_is_shown_whatever_its_state() -> None:
    """One rendering for every state: what is left of the count, every participant that joined
    with its lease (0 once it ended), and the missing; no fencing token."""
    assert latch_state([0, 0, 0, 0, NOW, [], []]).info("none") is None  # no such latch
    made = latch_state(latch_reply([], [])).info("made")
    assert made is not None
    assert (made.kind, made.count, made.limit) == ("latch", 3, 3)
    assert (made.holders, made.missing) == ((), ())
    assert (made.holder, made.label, made.ttl, made.token) == ("", None, None, None)
    counted = latch_state(latch_reply([], ["a"])).info("counted")
    assert counted is not None and (counted.count, counted.limit) == (2, 3)

    live, dead, back = (new_holder_token(i) for i in ("live", "dead", "back"))
    # "dead" stopped renewing; "back" did too, then counted down by its id: not missing
    participants = [(back, NOW - 10), (dead, NOW - 1), (live, NOW + 5000)]
    joined = latch_state(latch_reply(participants, ["back"])).info("joined")
    assert joined is not None and (joined.count, joined.missing) == (2, ("dead",))
    assert [(h.label, h.ttl) for h in joined.holders] == [("back", 0), ("dead", 0), ("live", 5)]
    assert (joined.holder, joined.label, joined.ttl) == (split_holder(live)[0], "live", 5.0)
    gone = latch_state(latch_reply([(dead, NOW - 1)], [])).info("gone")
    assert gone is not None and (gone.label, gone.ttl, gone.missing) == ("dead", 0.0, ("dead",))

    barrier = latch_state(latch_reply([(live, NOW + 5000)], [], parties=2)).info("phase")
    assert barrier is not None and (barrier.kind, barrier.count, barrier.limit) == ("barrier", 1, 2)


def test_a_semaphore_state_reply_as_listed() -> None:
    token = new_holder_token("web-1")
    reply = [3, [token, 2, 10_500, new_holder_token(None), 1, 12_000], 10_000, "77", 4]
    state = semaphore_state(reply)
    assert (state.limit, state.used, state.counter, state.queued) == (3, 3, 77, 4)
    first = state.holders[0]
    assert (first.label, first.permits, first.ttl) == ("web-1", 2, 0.5)
    assert first.holder == split_holder(token)[0] and token not in repr(state)
    info = permits_info("jobs", "sem", state, 2**31)
    assert info is not None
    assert (info.kind, info.count, info.limit, info.ttl, info.token) == ("semaphore", 3, 3, 2.0, 77)
    writer = semaphore_state([2**31, [token, 2**31, 10_500], 10_000, "", 0])
    shown = permits_info("doc", "rw", writer, 2**31)
    assert shown is not None and (shown.kind, shown.count, shown.token) == ("write_lock", 1, None)
    assert permits_info("doc", "rw", semaphore_state([0, [], 1, "", 0]), 2**31) is None
    with pytest.raises(LockError, match="unexpected semaphore state"):
        semaphore_state([1, [token, 1], 10, "", 0])
