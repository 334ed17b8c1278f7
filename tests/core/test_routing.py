"""What a route is and can do follows from where the keys live (``_core/routing.RouteTraits``),
whatever client library reaches them."""

from __future__ import annotations

from redis.crc import key_slot

from fencelock._core.kinds import Mutex, Permits
from fencelock._core.routing import CLUSTER, ONE, QUORUM, RouteSettings, RouteTraits


def traits(shape: str, min_replicas: int = 0) -> RouteTraits:
    return RouteTraits.of(RouteSettings(shape, (), 1.0, min_replicas=min_replicas))


def test_one_server_hands_on_and_grants_by_release_unless_replicas_must_acknowledge() -> None:
    plain, replicated = traits(ONE), traits(ONE, min_replicas=1)
    assert plain.local_handoff and plain.grants_by_release
    # one script cannot wait for the replicas: every grant goes out with its own WAIT
    assert not replicated.local_handoff and not replicated.grants_by_release
    for one in (plain, replicated):
        assert one.one_counter and not one.jitters and not one.majority
        assert one.publish_command == "PUBLISH"
        assert one.slot_of("{a}x") == one.slot_of("{b}y") == 0


def test_a_cluster_publishes_sharded_and_keeps_a_call_within_one_slot() -> None:
    cluster = traits(CLUSTER)
    assert cluster.publish_command == "SPUBLISH" and cluster.local_handoff
    assert cluster.slot_of("{a}x") == key_slot(b"{a}x") == cluster.slot_of("{a}y")
    assert cluster.one_call(["{a}x", "{a}y"])
    assert key_slot(b"a") != key_slot(b"b") and not cluster.one_call(["a", "b"])
    assert traits(ONE).one_call(["a", "b"])


def test_a_majority_jitters_and_holds_only_the_kinds_a_majority_can() -> None:
    redlock = traits(QUORUM)
    assert redlock.majority and redlock.jitters
    assert not (redlock.local_handoff or redlock.grants_by_release or redlock.one_counter)
    assert redlock.supports(Mutex()) and not redlock.supports(Permits(limit=2))
    assert traits(ONE).supports(Permits(limit=2)) and traits(CLUSTER).supports(Permits(limit=2))
