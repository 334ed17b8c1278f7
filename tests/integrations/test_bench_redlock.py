"""``bench.redlock``'s hand-written Redlock, the floor of P4 in ``bench.regress`` and
``bench.compare``: a node that cannot answer is a no, as in any Redlock client."""

from __future__ import annotations

from bench import redlock as redlock_bench
from fencelock_tools.servers.embedded import EmbeddedServer


def test_the_fan_out_takes_a_node_it_cannot_reconnect_to_as_a_no(
    redlock: list[EmbeddedServer],
) -> None:
    nodes = redlock_bench.node_clients([server.url for server in redlock])
    try:
        cycle = redlock_bench.minimal_sync_cycle(nodes, redlock_bench.load_script(nodes))
        cycle()  # a connection to every node
        redlock[0].pause()
        # the first cycle's reads from the paused node time out and its connection is dropped;
        # the next cycles must make it again, which times out too: 4 of 5 still grant
        for _ in range(3):
            cycle()
    finally:
        redlock[0].resume()
        for node in nodes:
            node.close()
