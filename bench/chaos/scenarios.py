"""The fault matrix: which topology, which lock kinds, which nemesis schedule, and what fencelock
promises under it (``promises``, which ``tests/chaos/test_chaos_short.py`` asserts).

Every scenario runs the lock kinds at once, each on a lock name of its own with workers of
its own: with the sync API the default lock (no renewal), ``auto_renew=True``, and
``reentrant=True`` (each grant re-entered once); with the asyncio API ``async with lock:`` of a
lock with ``auto_renew=True, on_lost_policy="cancel"`` (``async_cancel``); and the other
primitives held as mutexes (``workers.new_lock``): a semaphore of one permit (auto-renewed),
the write side of a read-write lock, and a multi-lock of two names (not on Redlock: it has no
semaphores). The holder faults on one server also run ``versioned`` workers, which take no lock
at all: each updates the counter by compare-and-set (``client.versioned``), and must lose no
update however its writers are killed or paused; the lock's own promises (no overlap, fencing,
tokens, recovery) do not apply to it. A fault on a holder
hits one holder of each name; a fault on servers or the network hits all names at once. The
names all hash to the first shard of the 3-master test cluster, so a failover there hits all of
them too. Every scenario but one applies to every kind: each topology has an asyncio client
(``topologies.make_async_client``), and the nemesis acts on processes, servers and the network,
whichever API a worker uses. The exception, ``holder-loop-block``, blocks an asyncio holder's
event loop, and runs the asyncio kinds only (``ASYNC_KINDS``): a sync worker has no loop.

Invariants checked in every scenario (``ALWAYS``): no stale write accepted, no orphaned lock, no
loss of an ``auto_renew`` lock (sync or asyncio) left unsignalled, no counter increment nobody
wrote, every loss of an ``async_cancel`` lock told inside its block cancels the block, which
ends with ``LockLost`` (one that ends with the ``LockConnectionError`` of its release is
counted apart: ``checker.masked_losses``), and a nemesis that did what it was asked. The others
are per scenario.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from redis.crc import key_slot

from fencelock._keys import LockKeys

from . import nemesis
from .history import ASYNC_KINDS
from .runner import Run
from .sinks import FENCE_SINKS, REDIS
from .topologies import CLUSTER, REDLOCK, SENTINEL, SINGLE, find_faketime
from .topologies import FAKETIME_MISSING as FAKETIME_MISSING
from .workers import AUTO_RENEW, DEFAULT, LOCK_KINDS, REDLOCK_KINDS, VERSIONED

# -- promises (asserted by the short run's test) -------------------------------------------------
NO_OVERLAP: Final = "no overlapping holds"
FAILS_CHECK: Final = "a holder paused past its lease fails check()"
FENCED: Final = "every write of an overtaken holder is refused once a newer holder has written"
FREE_IN_TTL: Final = "a crashed holder's lock is free within its ttl"
KEPT: Final = "a holder whose event loop is blocked keeps its lease"
STALL_REPORTED: Final = "a blocked event loop is reported (a fencelock.watchdog warning)"
INCREASING: Final = "tokens strictly increase"
TOLD_STALE: Final = "an overtaken holder's write reached the resource and was refused (StaleToken)"
GIVEN_BACK: Final = "a lock is granted again within half a ttl of a hung server's resume"
ALWAYS: Final = (
    "no stale write accepted",
    "no orphaned lock",
    "every loss of an auto_renew lock signalled",
    "no counter increment nobody wrote",
    "a loss cancels an async_cancel block, which ends with LockLost",
    "a lock call fails only with a typed error (LockError)",
    "no lost update of a versioned value (compare-and-set, no lock)",
)

# The Redlock clients' node timeout, which also bounds connecting to a node. The library's
# default scales with the ttl (ttl / 200: 5 ms at the suite's 1 s ttl; connecting within 50 ms)
# and is meant for a network. On the loaded 2-vCPU test box (load ~20: the short run with two
# CPU burners) an asyncio client's reconnects were cut off at 50 ms, its event loop running up
# to 120 ms late, and it was granted nothing in most redlock5 scenarios (its connect is bounded
# as a whole, where the sync API bounds each step). 150 ms: all granted, in the same load. Still
# under the slow nodes' 200 ms round trip (redlock5/slow-network: they time out).
REDLOCK_NODE_TIMEOUT: Final = 0.15

# fencelock_tools.servers.topology splits the slots evenly over 3 masters
FIRST_SHARD_LAST_SLOT: Final = 16384 // 3 - 1


def lock_name(kind: str) -> str:
    """``kind-N``: the first such name whose keys hash to the first shard of the test cluster."""
    for n in range(10_000):
        name = f"{kind}-{n}"
        if key_slot(LockKeys.for_name(name).lock.encode()) <= FIRST_SHARD_LAST_SLOT:
            return name
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Mode:
    name: str
    cycles: int  # how many times the scenario's fault schedule runs
    workers_per_kind: int
    warmup: float  # seconds of work before the first fault
    quiet: float  # seconds after each cycle (plus one ttl)

    def budget(self, scenario: Scenario) -> float:
        """A generous bound on one run's length: workers stop by themselves after it."""
        per_cycle = scenario.cycle_seconds + self.quiet + scenario.ttl
        return self.warmup + self.cycles * per_cycle + 60.0


SHORT: Final = Mode("short", cycles=1, workers_per_kind=2, warmup=0.5, quiet=0.2)
LONG: Final = Mode("long", cycles=6, workers_per_kind=3, warmup=1.0, quiet=1.0)
MODES: Final = {m.name: m for m in (SHORT, LONG)}

Schedule = Callable[[Run, int], None]  # (run, cycle number)


@dataclass(frozen=True)
class Scenario:
    topology: str
    fault: str
    schedule: Schedule
    summary: str  # what the nemesis does
    expectation: str  # what fencelock promises here, and which overlaps are expected and why
    promises: tuple[str, ...] = ()
    ttl: float = 1.0
    work: tuple[float, float] = (0.05, 0.3)  # work per grant, in ttls (default, reentrant)
    renewed_work: tuple[float, float] = (0.05, 1.2)  # auto_renew, async_cancel: may outlast ttl
    gap: float = 0.05  # seconds between a passed check() and the write
    think: float = 0.01
    client: Mapping[str, Any] = field(default_factory=dict)  # ClientSpec options
    topology_options: Mapping[str, Any] = field(default_factory=dict)
    proxied: tuple[int, ...] = ()  # node indexes that clients reach through a TCP proxy
    kinds: tuple[str, ...] = ()  # () : every kind the topology has (LOCK_KINDS, REDLOCK_KINDS)
    needs_faketime: bool = False
    shared_topology: bool = False  # reuse one topology across scenarios (cluster: seconds)
    cycle_seconds: float = 5.0  # a rough length of one cycle (for the workers' own deadline)
    sink: str = REDIS  # where the counter lives (sinks.py)

    def __post_init__(self) -> None:
        if not self.kinds:
            kinds = REDLOCK_KINDS if self.topology == REDLOCK else LOCK_KINDS
            object.__setattr__(self, "kinds", kinds)
        if self.topology == REDLOCK:
            client = {"node_timeout": REDLOCK_NODE_TIMEOUT, **self.client}
            object.__setattr__(self, "client", client)

    @property
    def name(self) -> str:
        return f"{self.topology}/{self.fault}"

    @property
    def slug(self) -> str:
        return self.name.replace("/", "-")

    def lock_name(self, kind: str) -> str:
        return lock_name(kind)

    def unavailable(self, binary: str) -> str:
        """Why this scenario cannot run here ("" if it can); see also ``Unavailable``."""
        if self.needs_faketime and find_faketime() is None:
            return FAKETIME_MISSING
        return ""

    @property
    def max_hold(self) -> float:
        """The longest a grant is held without faults, in seconds."""
        return max(self.work[1], self.renewed_work[1]) * self.ttl + self.gap


# -- schedules -----------------------------------------------------------------------------------


def holder_crash(run: Run, cycle: int) -> None:
    for name in run.names:
        nemesis.kill_holder(run, name)


def holder_pause(run: Run, cycle: int) -> None:
    # past the holder's lease, and past the whole hold of its successor; a holder paused after
    # its check is resumed only once a newer token has written (nemesis.pause_holders), so its
    # own write must be refused
    seconds = run.ttl + run.scenario.max_hold + 0.5
    nemesis.pause_holders(run, run.names, seconds, after_check=True)
    nemesis.pause_holders(run, run.names, seconds, after_check=False)


LOOP_BLOCK_TTLS: Final = 3.0  # how long a holder's event loop is blocked, in ttls


def holder_loop_block(run: Run, cycle: int) -> None:
    # several leases long: only renewals off the loop keep the lease through it
    names = [name for name in run.names if run.kind_of[name] in ASYNC_KINDS]
    after_check = cycle % 2 == 1  # (the short run's one cycle: while it works)
    nemesis.block_loops(run, names, LOOP_BLOCK_TTLS * run.ttl, after_check=after_check)


def node_restart(run: Run, cycle: int) -> None:
    nemesis.kill_node(run, run.topology.servers, down=0.3)


def node_flush(run: Run, cycle: int) -> None:
    nemesis.flush_node(run, run.topology.servers)


def counters_deleted(run: Run, cycle: int) -> None:
    nemesis.delete_counters(run, run.topology.servers)


def node_hang(run: Run, cycle: int) -> None:
    nemesis.pause_node(run, run.topology.servers[-1:], seconds=1.5 * run.ttl)


def node_hang_past_timeout(run: Run, cycle: int) -> None:
    # three request timeouts: the acquires sent meanwhile time out, and the server runs them
    # when it resumes (their grants, and the holds whose release could not go out, are the
    # clients' to give back)
    nemesis.pause_node(run, run.topology.servers[-1:], seconds=3 * run.client_spec.socket_timeout)


def network(run: Run, cycle: int) -> None:
    proxies = list(run.topology.proxies.values())
    nemesis.slow_network(run, proxies, delay=0.1, seconds=1.5)
    nemesis.drop_network(run, proxies, seconds=0.5)
    nemesis.blackhole_network(run, proxies, seconds=0.5)


def minority_loss(run: Run, cycle: int) -> None:
    nemesis.kill_node(run, run.topology.servers[3:], down=1.0)


def majority_loss(run: Run, cycle: int) -> None:
    # restarted only after a ttl, as antirez prescribes for Redlock without persistence
    nemesis.kill_node(run, run.topology.servers[2:], down=run.ttl + 0.5)


def clock_jump(run: Run, cycle: int) -> None:
    from .topologies import Redlock

    topology = run.topology
    assert isinstance(topology, Redlock)
    cut = [topology.proxies[3], topology.proxies[4]]
    node = f"{topology.nodes[2].port} ({os.path.basename(topology.clock_binaries[2])})"
    nemesis.redlock_clock_jump(
        run, topology.clocks[2], node, cut, jump=2 * run.ttl, timeout=3 * run.ttl
    )


def failover(run: Run, cycle: int) -> None:
    from .topologies import ClusterTopology, SentinelTopology

    topology = run.topology
    # the old master is needed for the next failover, and with min_replicas for any grant
    rejoin = cycle + 1 < run.mode.cycles or bool(run.client_spec.min_replicas)
    if isinstance(topology, SentinelTopology):
        nemesis.sentinel_failover(run, topology, lag=run.ttl, rejoin=rejoin)
    else:
        assert isinstance(topology, ClusterTopology)
        nemesis.cluster_failover(run, topology, run.names[0], lag=run.ttl, rejoin=rejoin)


def reshard(run: Run, cycle: int) -> None:
    from .topologies import ClusterTopology

    topology = run.topology
    assert isinstance(topology, ClusterTopology)
    for atomic in (False, True) if topology.cluster.migrates_atomically else (False,):
        nemesis.move_slots(run, topology, atomic=atomic)
    nemesis.manual_failover(run, topology, run.names[0])
    run.sleep(run.ttl)


# -- the matrix ----------------------------------------------------------------------------------

CRASH_EXPECT = (
    "The killed holder's lock is free within its ttl (the waiters retry at the holder's "
    "remaining ttl); nothing is orphaned; no overlap."
)
PAUSE_EXPECT = (
    "Overlaps expected with auto_renew: a SIGSTOPped holder believes it holds the lock until "
    "it runs again and hears of the loss (without renewal, only until its lease ends by its "
    "own clock). Paused while it works, its next check() fails (LockLost from its own clock) "
    "and it writes nothing. Paused between a passed check() and its write, only the fence can "
    "stop the write: it must be refused once a newer token has written, as the pause outlasts "
    "the successor's whole hold (on a loaded machine the successor may lose its own lease "
    "first and write nothing: nothing can refuse the overtaken write then, and it is counted "
    "as accepted)."
)
LOOP_BLOCK_EXPECT = (
    "No overlap, and no loss: the blocked holder's lease is renewed off its event loop (a "
    "thread of its client, docs/leases.md), so nobody else is granted the lock while the loop "
    "is blocked; when the loop runs again its check() passes, its fenced write is accepted, "
    "its block ends normally, and the stall is reported. Its waiters are granted the lock only "
    "after its release: the recovery includes the rest of the block. asyncio holders only: a "
    "sync holder has no event loop (its renewals run in a thread already; a process stopped as "
    "a whole is holder-pause)."
)
HOLDER_FAULTS = (
    ("holder-crash", holder_crash, "SIGKILL a holder of each lock", CRASH_EXPECT,
     (NO_OVERLAP, FREE_IN_TTL), 3.0),
    ("holder-pause", holder_pause,
     "SIGSTOP a holder of each lock past its lease (once after its check(), once while it "
     "works), then SIGCONT", PAUSE_EXPECT, (FAILS_CHECK, FENCED), 12.0),
)  # fmt: skip


def _holder_scenarios(topology: str, **options: Any) -> list[Scenario]:
    return [
        *(Scenario(topology, fault, schedule, summary, expect, promises,
                   cycle_seconds=seconds, **options)
          for fault, schedule, summary, expect, promises, seconds in HOLDER_FAULTS),
        # (the asyncio kinds only: the others have no event loop to block)
        Scenario(topology, "holder-loop-block", holder_loop_block,
                 f"block the event loop of an asyncio holder of each lock for "
                 f"{LOOP_BLOCK_TTLS:g} ttl: a sync time.sleep on the loop inside its `async "
                 "with lock:` block, while it works (in odd cycles: after its check())",
                 LOOP_BLOCK_EXPECT, (NO_OVERLAP, KEPT, STALL_REPORTED),
                 cycle_seconds=5.0, **{**options, "kinds": ASYNC_KINDS}),
    ]  # fmt: skip


SINK_SUMMARY = (
    "as single/holder-pause, the counter in {sink} written through fencelock.fences.{sink} "
    "instead of a Redis key: Kleppmann's scenario at the sink"
)
SINK_EXPECT = (
    "As single/holder-pause: a holder SIGSTOPped between its passed check() and its write "
    "wakes up after a newer holder has written, and its write must be refused by the sink "
    "itself ({how}), the holder told StaleToken, the newer holder's value kept."
)
SINK_HOW: Final = {
    "sql": "the fence table's conditional upsert, in the write's own PostgreSQL transaction",
    "files": "the token kept beside the file, checked under its flock before the rename",
    "s3": "the token in the object's metadata, the PUT conditional on the ETag read (moto)",
    "http": "the WSGI middleware's 409, its store fenced Redis keys",
}


def _sink_scenarios() -> list[Scenario]:
    return [
        Scenario(SINGLE, f"holder-pause-{sink}", holder_pause, SINK_SUMMARY.format(sink=sink),
                 SINK_EXPECT.format(how=SINK_HOW[sink]), (FAILS_CHECK, FENCED, TOLD_STALE),
                 kinds=(DEFAULT, AUTO_RENEW), cycle_seconds=12.0, sink=sink)
        for sink in FENCE_SINKS
    ]  # fmt: skip


# holds that outlast the outage (about 2 s), so that a grant lost in the failover is still
# believed in when a waiter takes the lock on the promoted replica
FAILOVER_WORK: Final[dict[str, Any]] = {"ttl": 4.0, "work": (0.6, 0.95), "renewed_work": (0.6, 2.0)}

# one cluster for the cluster scenarios (the failover last: it leaves a master down)
CLUSTER_OPTIONS: Final[dict[str, Any]] = {
    "topology_options": {"node_timeout_ms": 1000},
    "shared_topology": True,
}

SCENARIOS: Final[list[Scenario]] = [
    # (the versioned value lives on the resource, which no fault touches: only a fault on its
    # writers concerns it, and once is enough)
    *_holder_scenarios(SINGLE, kinds=(*LOCK_KINDS, VERSIONED)),
    Scenario(
        SINGLE, "node-restart", node_restart,
        "SIGKILL the server, restart it empty 0.3 s later (no persistence)",
        "Overlaps expected: the restart forgets every lock, so a waiter takes it at once while "
        "its holder (without auto_renew) still believes it holds it. auto_renew holders are "
        "told at their next renewal. The fencing counters are forgotten too, but tokens go on "
        "from the server's clock (docs/safety.md, 'Fencing tokens'): they still increase, so "
        "a write of the old holder after the new holder's first write is refused.",
        (INCREASING,), cycle_seconds=2.0,
    ),
    Scenario(
        SINGLE, "flushall", node_flush,
        "FLUSHALL on the server",
        "As single/node-restart without the downtime: overlaps expected (every lock is "
        "forgotten at once), tokens still increase.",
        (INCREASING,), cycle_seconds=1.0,
    ),
    Scenario(
        SINGLE, "counter-deleted", counters_deleted,
        "DEL the fencing counter of every lock by hand, while the locks are held",
        "No overlap (the locks stay), and tokens still increase: the next grant takes the "
        "server's clock.",
        (NO_OVERLAP, INCREASING), cycle_seconds=1.0,
    ),
    Scenario(
        SINGLE, "node-hang", node_hang,
        "SIGSTOP the server for 1.5 ttl, then SIGCONT",
        "No overlap: nobody can be granted the lock while the server is hung, and when it "
        "resumes its keys have expired by the wall clock, after every holder's lease ran out "
        "by its own clock.",
        (NO_OVERLAP,), cycle_seconds=3.0,
    ),
    Scenario(
        SINGLE, "node-hang-past-timeout", node_hang_past_timeout,
        "SIGSTOP the server for three request timeouts (3 s; ttl 10 s, holds of at most half "
        "a second), then SIGCONT",
        "No overlap. The acquires sent to the hung server time out, and it grants them when it "
        "resumes, to holder tokens nobody uses any more; releases sent meanwhile may not even "
        "have gone out. The clients give those grants back as soon as the server answers "
        "(docs/leases.md, 'A grant that comes after its request timed out'): every lock is "
        "granted again within half a ttl of the resume, not a whole ttl after it.",
        (NO_OVERLAP, GIVEN_BACK), ttl=10.0, work=(0.01, 0.05), renewed_work=(0.01, 0.05),
        cycle_seconds=4.0,
    ),
    Scenario(
        SINGLE, "slow-network", network,
        "through a TCP proxy: 100 ms each way for 1.5 s, then connections reset for 0.5 s, "
        "then a black hole for 0.5 s",
        "No overlap: the lease is counted from when the request was sent, so a slow answer "
        "only shortens it; a request held in the black hole and delivered late sets a lock "
        "nobody holds, which expires within its ttl.",
        (NO_OVERLAP,), proxied=(0,), cycle_seconds=4.0,
    ),
    *_sink_scenarios(),
    *_holder_scenarios(REDLOCK),
    Scenario(
        REDLOCK, "minority-loss", minority_loss,
        "SIGKILL 2 of the 5 nodes, restart them empty 1 s later",
        "No overlap: every grant needs 3 of 5, and any two majorities share a node that kept "
        "its data. Tokens increase (the write-back to a majority, and the clocks).",
        (NO_OVERLAP, INCREASING), cycle_seconds=3.0,
    ),
    Scenario(
        REDLOCK, "majority-loss", majority_loss,
        "SIGKILL 3 of the 5 nodes, restart them empty after ttl + 0.5 s",
        "A clean failure: no grant while 3 are down (acquire returns False), holders without "
        "a majority lose their lease by their own clock (auto_renew: signalled), and with the "
        "restart delayed past the ttl nothing can be granted twice: no overlap. Tokens "
        "increase: the restarted nodes hand out their clocks.",
        (NO_OVERLAP, INCREASING), cycle_seconds=4.0,
    ),
    Scenario(
        REDLOCK, "hung-node", node_hang,
        "SIGSTOP 1 of the 5 nodes for 1.5 ttl",
        "No overlap; grants go on, each costing about one node timeout.",
        (NO_OVERLAP,), cycle_seconds=3.0,
    ),
    Scenario(
        REDLOCK, "minority-loss-redis-objects", minority_loss,
        "as redlock5/minority-loss, with LockClient([redis.Redis(...), ...]) (the form docs/api.md "
        "shows, redis-py's defaults) instead of LockClient.from_url([...])",
        "As redlock5/minority-loss: no overlap, grants go on. (This scenario found that the "
        "node clients kept redis-py's default Retry, 10 tries with backoff on the dead nodes' "
        "reconnects; fixed: a Redlock node gets one try within its node timeout.)",
        (NO_OVERLAP,), client={"from_url": False}, cycle_seconds=3.0,
    ),
    Scenario(
        REDLOCK, "hung-node-redis-objects", node_hang,
        "as redlock5/hung-node, with LockClient([redis.Redis(...), ...])",
        "As redlock5/hung-node (see minority-loss-redis-objects).",
        (NO_OVERLAP,), client={"from_url": False}, cycle_seconds=3.0,
    ),
    Scenario(
        REDLOCK, "slow-network", network,
        "2 of the 5 nodes through TCP proxies: 100 ms each way for 1.5 s, connections reset "
        "for 0.5 s, a black hole for 0.5 s",
        "No overlap: the slow nodes time out (the suite's node timeout, 150 ms) and the other "
        "three decide; no grant is handed out with a non-positive validity.",
        (NO_OVERLAP,), proxied=(3, 4), cycle_seconds=4.0,
    ),
    Scenario(
        REDLOCK, "clock-jump", clock_jump,
        "cut 2 nodes off (connections reset) until every lock is granted on the other 3, "
        "reconnect them, then jump the wall clock of one of those 3 forward by 2 ttl "
        "(libfaketime)",
        "Overlaps expected (Kleppmann's counter-example): the jumped node expires its copy of "
        "the grant early, so a waiter wins that node plus the two that never had the grant, "
        "while the holder, rightly by its own clock, still believes it holds the lock. Tokens "
        "still increase (the jumped node kept its counter), so a write of the old holder after "
        "the new holder's first write is refused; one that lands between the new holder's "
        "read and its write is accepted and lost (lost updates).",
        ttl=3.0, work=(0.3, 0.9), renewed_work=(0.3, 0.9), proxied=(3, 4),
        client={"max_poll": 0.2}, topology_options={"faketime": (2,)}, needs_faketime=True,
        cycle_seconds=12.0,
    ),
    *_holder_scenarios(CLUSTER, **CLUSTER_OPTIONS),
    Scenario(
        CLUSTER, "reshard", reshard,
        "move the slot of every lock to another master and back while the workers go on (the "
        "classic migration: SETSLOT IMPORTING/MIGRATING, MIGRATE of its keys, SETSLOT NODE; "
        "then, where the servers have it, Valkey 9's atomic CLUSTER MIGRATESLOTS), then fail "
        "their master over by hand (CLUSTER FAILOVER)",
        "No overlap: the keys move with their slot and a manual failover loses no write. "
        "Requests answered ASK, MOVED, TRYAGAIN (a script's keys split mid-migration) or "
        "CLUSTERDOWN are sent again within their deadline; waiters follow their slot (the old "
        "master's SUNSUBSCRIBE) and re-try at once. Losses can happen, each told to its "
        "holder: a grant that waited out a migration's TRYAGAIN is counted from its first "
        "send, so it may come with little of its lease left (a ttl of 1 s here) and run out "
        "before its first renewal. Tokens increase.",
        (NO_OVERLAP, INCREASING), cycle_seconds=15.0, **CLUSTER_OPTIONS,
    ),
    Scenario(
        CLUSTER, "failover", failover,
        "make the replica of the locks' shard lag (SIGSTOP, then 32 MB written to the "
        "master), wait until every lock is granted anew (at most a ttl), SIGKILL the master, "
        "resume the replica; the cluster promotes it (node timeout 1 s); the old master "
        "rejoins as a replica",
        "Overlaps expected: asynchronous replication loses the grants the replica missed, so "
        "waiters take those locks on the promoted replica while their holders still believe. "
        "auto_renew holders are told at their next renewal. The promoted replica lacks "
        "fencing counters too, but tokens go on from its clock: they still increase, so "
        "fencing refuses the old holders' late writes.",
        (INCREASING,), cycle_seconds=20.0, **CLUSTER_OPTIONS, **FAILOVER_WORK,
    ),
    Scenario(
        SENTINEL, "failover", failover,
        "make the replica lag (SIGSTOP, then 32 MB written to the master), wait until every "
        "lock is granted anew (at most a ttl), SIGKILL the master, resume the replica; the "
        "sentinel promotes it (down-after 1 s); the old master comes back empty as the new "
        "replica",
        "Overlaps expected, as for the cluster: the promoted replica lacks the grants it "
        "missed. auto_renew holders are told; tokens still increase (the promoted replica's "
        "clock), and fencing refuses the old holders' late writes.",
        (INCREASING,), cycle_seconds=15.0, **FAILOVER_WORK,
    ),
    Scenario(
        SENTINEL, "failover-min-replicas", failover,
        "as sentinel/failover, with LockClient(min_replicas=1, replica_timeout=0.25)",
        "No overlap: a grant the paused replica did not acknowledge is given back "
        "(NotReplicated), and an unacknowledged renewal does not move the holder's deadline, "
        "so the promoted replica has every grant that a holder believes in.",
        (NO_OVERLAP, INCREASING), client={"min_replicas": 1, "replica_timeout": 0.25},
        cycle_seconds=15.0, **FAILOVER_WORK,
    ),
]  # fmt: skip

BY_NAME: Final = {s.name: s for s in SCENARIOS}
TOPOLOGIES: Final = (SINGLE, REDLOCK, CLUSTER, SENTINEL)


def select(patterns: list[str] | None) -> list[Scenario]:
    """Scenarios whose name contains any of ``patterns`` (all without any)."""
    if not patterns:
        return list(SCENARIOS)
    chosen = [s for s in SCENARIOS if any(p in s.name for p in patterns)]
    if not chosen:
        raise KeyError(f"no scenario matches {patterns}; known: {sorted(BY_NAME)}")
    return chosen
