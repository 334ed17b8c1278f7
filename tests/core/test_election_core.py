"""The election's plain decisions (_core/election.py), without a server."""

from __future__ import annotations

from fencelock._core.election import EXPIRY_SLACK, MIN_LOOK, Leader, leader_of, next_look, same_term
from fencelock._core.inspection import LockInfo


def info(holder: str = "h1", token: int | None = 7, ttl: float | None = 4.0) -> LockInfo:
    return LockInfo("e", holder, "box-1", ttl, token, "simple", 1, (), 0)


def test_leader_of_an_inspection() -> None:
    assert leader_of(None) is None
    assert leader_of(info()) == Leader("box-1", 7, 4.0, "h1")


def test_a_renewal_is_not_a_change_a_new_grant_is() -> None:
    now = leader_of(info(ttl=4.0))
    assert same_term(now, leader_of(info(ttl=9.0)))  # renewed: same holder and term
    assert not same_term(now, leader_of(info(token=8)))  # a new term
    assert not same_term(now, leader_of(info(holder="h2")))  # another holder
    assert not same_term(now, None) and not same_term(None, now)
    assert same_term(None, None)


def test_next_look_is_the_leases_end_and_at_most_a_ttl() -> None:
    assert next_look(None, 10.0) == 10.0  # nobody leads: the next leader announces itself
    assert next_look(leader_of(info(ttl=4.0)), 10.0) == 4.0 + EXPIRY_SLACK  # its expiry: silent
    assert next_look(leader_of(info(ttl=30.0)), 10.0) == 10.0  # a lost message: within a ttl
    assert next_look(leader_of(info(ttl=None)), 10.0) == 10.0  # no expiry
    assert next_look(leader_of(info(ttl=-1.0)), 10.0) == MIN_LOOK  # never a busy loop
