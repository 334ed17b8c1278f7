"""The nemesis: one small function per fault. Each records ``fault_start`` before it strikes and
``fault_end`` once it has healed (the same moment for a fault that heals itself, such as a
SIGKILLed holder), so that the checker can measure the recovery after it. Every wait is bounded,
and every fault is undone in a ``finally``: a failing run leaves no paused process behind.

Faults on a holder: ``kill_holder`` (SIGKILL), ``pause_holders`` (SIGSTOP past the ttl,
then SIGCONT), ``block_loops`` (an asyncio holder's event loop blocked by a sync call). Faults on
servers: ``kill_node`` (SIGKILL, restarted empty: no persistence, so its locks and fencing
counters vanish), ``pause_node`` (SIGSTOP: a hung node). On the network, through a userspace TCP
proxy: ``slow_network`` (delay), ``drop_network`` (connections reset), ``blackhole_network``
(data held until healed). ``clock_jump`` moves a node's wall clock forward
(libfaketime). ``sentinel_failover`` and ``cluster_failover`` kill a master whose replica lags
(``lag_replicas``: paused, behind a write burst) and wait for the promotion. ``move_slots``
moves the locks' slots to another master and back, ``manual_failover`` fails their master over
by hand (CLUSTER FAILOVER): a Cluster that changes under the locks without losing anything.
``flush_node`` (FLUSHALL) and ``delete_counters`` (a DEL of the fencing counters by hand) lose
data without a restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from redis.crc import key_slot

from fencelock._keys import LockKeys, escape
from fencelock_tools.servers.embedded import EmbeddedServer, wait_stopped
from fencelock_tools.servers.proxy import TcpProxy
from fencelock_tools.servers.topology import probe

from . import history as h
from .topologies import ClusterTopology, NodeClock, SentinelTopology
from .workers import BLOCKED, CHECKED, WORKING, WRITTEN, lock_keys

if TYPE_CHECKING:
    from .runner import FaultMark, Run, WorkerHandle

STOP_CONFIRM = 2.0  # seconds to wait for a SIGSTOPped process to show as stopped


class NoHolder(RuntimeError):
    """No worker held the lock at the wanted point within the time allowed."""


# -- holders -------------------------------------------------------------------------------------


def _freeze_holder(
    run: Run, name: str, phases: Sequence[int], timeout: float
) -> WorkerHandle | None:
    """SIGSTOP a worker of ``name`` that is in one of ``phases``; None if none was caught."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = run.wait_holder(name, phases, deadline - time.monotonic())
        if holder is None:
            return None
        os.kill(holder.pid, signal.SIGSTOP)
        wait_stopped(holder.pid, STOP_CONFIRM)
        if run.phase(holder) in phases:  # stopped where we wanted it
            return holder
        os.kill(holder.pid, signal.SIGCONT)  # it moved on before the signal landed: again
    return None


def kill_holder(run: Run, name: str, timeout: float = 10.0) -> None:
    """SIGKILL a worker while it holds ``name`` (working, or after its write: never in the
    middle of a write, so its outcome is known), and start a replacement."""
    holder = _freeze_holder(run, name, (WORKING, WRITTEN), timeout)
    if holder is None:
        raise NoHolder(f"no holder of {name!r} to kill within {timeout} s")
    with run.fault(f"SIGKILL holder {holder.id} of {name}", h.HOLDER, name) as fault:
        os.kill(holder.pid, signal.SIGKILL)
        run.record(h.KILLED, worker=holder.id, name=name, value=fault.id, detail="nemesis")
    run.reap(holder)
    run.respawn(holder)


def pause_holders(
    run: Run, names: Sequence[str], seconds: float, *, after_check: bool, timeout: float = 10.0
) -> None:
    """SIGSTOP one holder of each of ``names`` for ``seconds`` (together), then SIGCONT them:
    while they work (their next ``check()`` must fail), or ``after_check``, between a passed
    check and the write (only the fence can stop that write). After a check, each is resumed
    only once a newer holder of its name has written too (within ``timeout``), so that its
    write meets the fence: on a loaded machine the newer holder may not have by then."""
    phases = (CHECKED,) if after_check else (WORKING,)
    where = "after its check" if after_check else "while it works"
    frozen: list[tuple[WorkerHandle, contextlib.ExitStack, FaultMark]] = []
    # each worker's grants when a holder of its name was frozen (a worker started since: 0): a
    # grant counted after that is newer than the frozen one. (Counted before the wait for a
    # holder, a grant older than the frozen holder's passed for overtaking it: the holder was
    # resumed at once, and its write, still the newest, was rightly accepted.)
    grants: dict[str, int] = {}

    def overtaken(holder: WorkerHandle) -> bool:
        """Whether another worker of ``holder``'s name wrote in a grant it got since the freeze."""
        return any(
            run.grant_count(w) > grants.get(w.id, 0) + (run.phase(w) != WRITTEN)
            for w in run.workers_of(holder.name)
            if w.id != holder.id
        )

    try:
        for name in names:
            holder = _freeze_holder(run, name, phases, timeout)
            if holder is None:
                raise NoHolder(f"no holder of {name!r} to pause within {timeout} s")
            grants.update((w.id, run.grant_count(w)) for w in run.workers_of(name))
            stack = contextlib.ExitStack()
            detail = f"SIGSTOP holder {holder.id} of {name} {where}, {seconds:g} s"
            fault = stack.enter_context(run.fault(detail, h.HOLDER, name))
            frozen.append((holder, stack, fault))
            run.record(h.PAUSED, worker=holder.id, name=name, value=fault.id)
        run.sleep(seconds)
        if after_check:
            run.wait_for(lambda: all(overtaken(holder) for holder, _, _ in frozen), timeout)
    finally:
        for holder, stack, fault in frozen:
            fault.heal()
            os.kill(holder.pid, signal.SIGCONT)
            run.record(h.RESUMED, worker=holder.id, name=holder.name)
            stack.close()


def _block_holder(
    run: Run, name: str, phases: Sequence[int], seconds: float, timeout: float
) -> WorkerHandle | None:
    """Block the event loop of a worker of ``name`` that is in one of ``phases`` for
    ``seconds``; None if none was caught. The worker blocks only if it still holds when its
    loop runs the signal's callback, and zeroes its slot of ``loop_blocks`` once it decided."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = run.wait_holder(name, phases, deadline - time.monotonic())
        if holder is None:
            return None
        if _blocked(run, holder, seconds):
            return holder
        # it had moved on (released) before its loop ran the callback: again
    return None


def _blocked(run: Run, holder: WorkerHandle, seconds: float) -> bool:
    """Ask ``holder``'s event loop to block for ``seconds`` (SIGUSR1): whether it does."""
    run.loop_blocks[holder.slot] = seconds
    os.kill(holder.pid, signal.SIGUSR1)
    if not run.wait_for(lambda: run.loop_blocks[holder.slot] == 0, STOP_CONFIRM):
        run.loop_blocks[holder.slot] = 0.0  # (a late callback then does nothing)
        raise RuntimeError(f"the event loop of {holder.id} ran no callback in {STOP_CONFIRM} s")
    return run.phase(holder) == BLOCKED


def _resumed(run: Run, holder: WorkerHandle, timeout: float) -> bool:
    return run.wait_for(lambda: run.phase(holder) != BLOCKED, timeout)


def block_loops(
    run: Run, names: Sequence[str], seconds: float, *, after_check: bool, timeout: float = 10.0
) -> None:
    """Block the event loop of one holder of each of ``names`` (asyncio workers) for
    ``seconds`` (together): a sync call (``time.sleep``) on the loop while the lock is held,
    as a sync database call inside ``async with lock:`` would make, while it works or
    ``after_check``, between a passed check and the write. The process runs on, and so do its
    other threads: the lease must hold. The blocks end by themselves; each is healed when its
    worker's loop runs again."""
    for name in names:
        if run.kind_of[name] not in h.ASYNC_KINDS:
            raise ValueError(f"{name!r} is a {run.kind_of[name]} lock: no event loop to block")
    phases = (CHECKED,) if after_check else (WORKING,)
    where = "after its check" if after_check else "while it works"
    blocked: list[tuple[WorkerHandle, FaultMark]] = []
    with contextlib.ExitStack() as stack:
        for name in names:
            holder = _block_holder(run, name, phases, seconds, timeout)
            if holder is None:
                raise NoHolder(f"no holder of {name!r} to block within {timeout} s")
            detail = f"block the event loop of holder {holder.id} of {name} {where}, {seconds:g} s"
            fault = stack.enter_context(run.fault(detail, h.HOLDER, name))
            blocked.append((holder, fault))
            run.record(h.BLOCKED, worker=holder.id, name=name, value=fault.id)
        for holder, fault in blocked:
            if not _resumed(run, holder, seconds + STOP_CONFIRM):
                raise RuntimeError(f"the event loop of {holder.id} blocked past {seconds:g} s")
            fault.heal()


def wait_new_grants(run: Run, timeout: float) -> bool:
    """Until every lock name was granted anew since the call and is held (a worker WORKING on
    a grant it got since); False if not within ``timeout``."""
    before = {w.id: run.grant_count(w) for name in run.names for w in run.workers_of(name)}

    def granted_anew(name: str) -> bool:
        return any(
            run.phase(w) == WORKING and run.grant_count(w) > before.get(w.id, 0)
            for w in run.workers_of(name)
        )

    return run.wait_for(lambda: all(granted_anew(n) for n in run.names), timeout)


# -- servers -------------------------------------------------------------------------------------


def kill_node(run: Run, servers: Sequence[EmbeddedServer], down: float, what: str = "") -> None:
    """SIGKILL ``servers``, keep them down ``down`` seconds, restart them empty."""
    ports = ",".join(str(s.port) for s in servers)
    with run.fault(what or f"SIGKILL node(s) {ports} for {down:g} s, restart empty", h.SERVER) as f:
        try:
            for server in servers:
                server.kill()
            run.sleep(down)
        finally:
            f.heal()
            for server in servers:
                if server.process is None:
                    server.start()


def flush_node(run: Run, servers: Sequence[EmbeddedServer]) -> None:
    """FLUSHALL on ``servers``: every lock and fencing counter is gone at once, the holders
    still believe they hold their locks (as after a restart, without the downtime)."""
    ports = ",".join(str(s.port) for s in servers)
    with run.fault(f"FLUSHALL node(s) {ports}", h.SERVER):
        for server in servers:
            with server.client() as client:
                client.flushall()


def delete_counters(run: Run, servers: Sequence[EmbeddedServer]) -> None:
    """DEL the fencing counters of the run's locks by hand, while they are held."""
    keys = [k.fence for name in run.names for k in lock_keys(run.kind_of[name], name)]
    with run.fault(f"DEL the fencing counters of {len(keys)} locks", h.SERVER):
        for server in servers:
            with server.client() as client:
                for key in keys:  # one by one: on a cluster each has its own slot
                    client.delete(key)


def pause_node(run: Run, servers: Sequence[EmbeddedServer], seconds: float) -> None:
    """SIGSTOP ``servers`` (hung: connections open, no answers) for ``seconds``."""
    ports = ",".join(str(s.port) for s in servers)
    with run.fault(f"SIGSTOP node(s) {ports} for {seconds:g} s", h.SERVER) as f:
        try:
            for server in servers:
                server.pause()
            run.sleep(seconds)
        finally:
            f.heal()
            for server in servers:
                server.resume()


@contextmanager
def _network(run: Run, proxies: Sequence[TcpProxy], what: str) -> Iterator[None]:
    with run.fault(what, h.SERVER) as f:
        try:
            yield
        finally:
            f.heal()
            for proxy in proxies:
                proxy.normal()


def slow_network(run: Run, proxies: Sequence[TcpProxy], delay: float, seconds: float) -> None:
    """Every chunk held ``delay`` seconds each way (a round trip costs at least 2 x delay)."""
    with _network(run, proxies, f"delay {delay * 1000:g} ms each way via proxy, {seconds:g} s"):
        for proxy in proxies:
            proxy.delay(delay)
        run.sleep(seconds)


def drop_network(run: Run, proxies: Sequence[TcpProxy], seconds: float) -> None:
    """Open connections reset, new ones refused: requests are lost, not delayed."""
    with _network(run, proxies, f"drop (reset) connections via proxy, {seconds:g} s"):
        for proxy in proxies:
            proxy.reset()
        run.sleep(seconds)


def blackhole_network(run: Run, proxies: Sequence[TcpProxy], seconds: float) -> None:
    """Connections accepted, nothing delivered until healed (then delivered late, as TCP
    would after a healed partition)."""
    with _network(run, proxies, f"black hole via proxy, {seconds:g} s"):
        for proxy in proxies:
            proxy.blackhole()
        run.sleep(seconds)


def clock_jump(run: Run, clock: NodeClock, seconds: float, node: str) -> None:
    """Move a node's wall clock forward: its keys expire early (Redis expires by wall clock)."""
    with run.fault(f"wall clock of node {node} jumps +{seconds:g} s", h.SERVER):
        clock.jump(seconds)


def redlock_clock_jump(
    run: Run,
    clock: NodeClock,
    clock_node: str,
    cut: Sequence[TcpProxy],
    jump: float,
    timeout: float = 15.0,
) -> None:
    """Kleppmann's Redlock scenario: two nodes cut off (connections reset) while every lock is
    granted on the three others, then reconnected; then the clock of one of those three jumps
    past the ttl. Its copy of each grant expires, and another client can win a majority of the
    jumped node and the two that never had the grant, while the first holder, rightly by its
    own clock, still believes it holds the lock."""
    with run.fault(f"cut {len(cut)} nodes off until every lock is granted anew", h.SERVER) as f:
        try:
            for proxy in cut:
                proxy.reset()
            wait_new_grants(run, timeout)
        finally:
            f.heal()
            for proxy in cut:
                proxy.normal()
    clock_jump(run, clock, jump, clock_node)


FLOOD_MB = 32  # more than the kernel buffers of one loopback connection can hold


def lag_replicas(master: EmbeddedServer, replicas: Sequence[EmbeddedServer], tag: str) -> None:
    """Make ``replicas`` fall behind ``master``: SIGSTOP them, then write FLOOD_MB MB to the
    master. A paused replica alone does not lag: the master's stream waits in the replica's
    socket buffer and is applied on SIGCONT. Once that buffer is full, what the master writes
    next stays in the master's own output buffer, and dies with it. ``tag``: a hash tag in the
    master's slots (Cluster)."""
    for replica in replicas:
        replica.pause()
    blob = b"x" * (1 << 20)
    with probe(master.port, timeout=10) as client, client.pipeline(transaction=False) as pipe:
        for i in range(FLOOD_MB):
            pipe.set(f"chaos:flood:{{{tag}}}:{i}", blob)
        pipe.execute()


def sentinel_failover(
    run: Run, topology: SentinelTopology, lag: float, *, rejoin: bool = True
) -> None:
    """The master dies while its replica lags behind (``lag_replicas``): until every lock was
    granted anew (at most ``lag`` seconds), then the master is SIGKILLed and the replica
    resumed. The sentinel promotes it without the grants and fencing increments it missed
    (unless ``min_replicas`` refused them). The old master comes back empty as the replica."""
    setup = topology.setup
    old, replica = setup.master, setup.replica
    try:
        lag_replicas(old, [replica], "flood")
        wait_new_grants(run, lag)
        with run.fault(f"SIGKILL master {old.port} (replica lagging); sentinel failover", h.SERVER):
            old.kill()
    finally:
        replica.resume()
    setup.wait_promoted(timeout=30)
    if rejoin:  # for the next failover
        old.start()
        setup.wait_synced(timeout=30)


def cluster_failover(
    run: Run, topology: ClusterTopology, name: str, lag: float, *, rejoin: bool = True
) -> None:
    """As ``sentinel_failover``, for the shard of ``name``: its master dies while its replica
    lags (``lag_replicas``), the cluster promotes the replica; with ``rejoin`` the old master
    is restarted (it keeps its cluster config, not its data) and rejoins as a replica."""
    cluster = topology.cluster
    key = LockKeys.for_name(name).lock
    old = cluster.master_for_key(key)
    replicas = cluster.replicas_now(old)
    try:
        lag_replicas(old, replicas, escape(name))
        wait_new_grants(run, lag)
        with run.fault(f"SIGKILL cluster master {old.port} (replica lagging); failover", h.SERVER):
            old.kill()
    finally:
        for replica in replicas:
            replica.resume()
    cluster.wait_promoted(old, key_slot(key.encode()), timeout=30)
    if rejoin:  # for the next failover
        cluster.rejoin(old, timeout=30)


def move_slots(run: Run, topology: ClusterTopology, *, atomic: bool) -> None:
    """Move the slot of every lock's keys to another master, then back (``Cluster.move_slot``:
    the classic migration, or ``atomic``), each way one fault on the servers, a ttl of work in
    between: the keys move with their slot, and the waiters must follow it."""
    cluster = topology.cluster
    slots = sorted(
        {key_slot(k.fence.encode()) for n in run.names for k in lock_keys(run.kind_of[n], n)}
    )
    home = {slot: cluster.master_for_slot(slot) for slot in slots}
    how = "atomically (CLUSTER MIGRATESLOTS)" if atomic else "(SETSLOT, MIGRATE)"
    for way in ("away", "back"):
        with run.fault(f"move the {len(slots)} slots of the locks {way} {how}", h.SERVER):
            for slot in slots:
                target = home[slot]
                if way == "away":
                    target = next(m for m in cluster.running_masters() if m is not home[slot])
                cluster.move_slot(slot, target, atomic=atomic)
        run.sleep(run.ttl)


def manual_failover(run: Run, topology: ClusterTopology, name: str) -> None:
    """CLUSTER FAILOVER on the replica of ``name``'s master: it takes over once it has every
    write of the master, which becomes its replica (nothing is lost)."""
    cluster = topology.cluster
    master = cluster.master_for_key(LockKeys.for_name(name).lock)
    (replica,) = cluster.replicas_now(master)
    with run.fault(f"CLUSTER FAILOVER: {replica.port} takes over from {master.port}", h.SERVER):
        cluster.failover(replica)
