"""What in a deployment threatens fencelock's promises (no I/O): the rules of ``fencelock
doctor`` and of the warning a client logs before its first grant (docs/operations.md, "Before
production"). Each rule reads facts that a thin shell gathered (``INFO`` sections, a ``CONFIG
GET``, ``TIME``, ``CLUSTER INFO``, what a probe was refused) and returns findings: a *hazard*
breaks a promise when it strikes, a *note* is worth knowing and breaks none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from .natives import ServerCommands, parse_version

HAZARD: Final = "hazard"
NOTE: Final = "note"
Severity = Literal["hazard", "note"]

# every key of fencelock's has a TTL, so volatile-* policies may evict it as well as allkeys-*
SAFE_POLICY: Final = "noeviction"
# used_memory above this share of maxmemory: writes are refused (noeviction) or keys evicted soon
MEMORY_HEADROOM: Final = 0.9
# the server's clock this far from this host's: one of them is wrong (see ``clock``)
CLOCK_TOLERANCE: Final = 1.0

# The first releases with the fix for CVE-2025-49844 (a use-after-free in the Lua parser),
# per release line; a distribution may have patched an older build.
REDIS_LUA_FIXED: Final = ((6, 2, 20), (7, 2, 11), (7, 4, 6), (8, 0, 4), (8, 2, 2))
VALKEY_LUA_FIXED: Final = ((8, 0, 6), (8, 1, 4))


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing found: ``code`` names the rule (stable, for ``--json`` and tests)."""

    code: str
    severity: Severity
    where: str  # the server (host:port), or the deployment ("Redlock", "Cluster")
    summary: str  # what was seen
    breaks: str  # which promise fails, and how
    likelihood: str  # when it strikes
    fix: str

    @property
    def hazard(self) -> bool:
        return self.severity == HAZARD

    def line(self) -> str:
        """The finding as one log line: what was seen, what breaks, the fix."""
        return f"{self.summary}: {self.breaks}. {self.fix}"


def info_fields(info: object) -> dict[str, str]:
    """An ``INFO`` reply as text fields: its raw text, or redis-py's parsed mapping."""
    if isinstance(info, bytes):
        info = info.decode(errors="replace")
    if isinstance(info, str):
        lines = (line.partition(":") for line in info.splitlines())
        return {key: value.strip() for key, sep, value in lines if sep and not key.startswith("#")}
    if isinstance(info, Mapping):
        return {str(k): _text(v) for k, v in info.items() if not isinstance(v, Mapping)}
    return {}


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _number(fields: Mapping[str, str], key: str) -> int:
    try:
        return int(float(fields.get(key, "0")))
    except ValueError:
        return 0


def per_node(info: object) -> list[tuple[str | None, object]]:
    """An ``INFO`` reply per server: a Cluster's (redis-py maps node -> reply) node by node."""
    if isinstance(info, Mapping) and info and all(isinstance(v, Mapping) for v in info.values()):
        return [(_text(node), reply) for node, reply in info.items()]
    return [(None, info)]


def memory(info: object, where: str) -> list[Finding]:
    """``INFO memory``: may the server evict lock keys, and is it nearly full?"""
    fields = info_fields(info)
    policy = fields.get("maxmemory_policy", SAFE_POLICY)
    limit, used = _number(fields, "maxmemory"), _number(fields, "used_memory")
    found = []
    if limit and policy != SAFE_POLICY:
        found.append(
            Finding(
                "eviction",
                HAZARD,
                where,
                f"maxmemory-policy is {policy} with maxmemory {limit}",
                "the server may evict lock keys when memory runs short, and an evicted lock "
                "key is a lock lost without its holder knowing (fencing tokens still increase)",
                "whenever used memory reaches maxmemory",
                "Set maxmemory-policy noeviction (docs/operations.md)",
            )
        )
    if limit and used >= MEMORY_HEADROOM * limit:
        found.append(
            Finding(
                "memory",
                HAZARD,
                where,
                f"used memory {used} is {used / limit:.0%} of maxmemory {limit}",
                "at maxmemory a noeviction server refuses every acquire (OOM), and any other "
                "policy evicts keys",
                "soon: the headroom left is under a tenth",
                "Raise maxmemory, or free memory",
            )
        )
    return found


def persistence(
    info: object, save: str | None, appendfsync: str | None, where: str
) -> list[Finding]:
    """``INFO persistence`` with ``CONFIG GET save`` / ``appendfsync`` (None: refused, as on
    managed servers): what a restart does to the locks."""
    fields = info_fields(info)
    aof = fields.get("aof_enabled") == "1"
    if aof and appendfsync == "always":
        return []
    lost = (
        "every lock is forgotten: a waiter is granted a name whose holder still believes it "
        "holds it, until that holder's lease ends (its fenced writes are then refused; the "
        "tokens stay increasing, taken from the server's clock)"
    )
    if not aof and save == "":
        return [
            Finding(
                "persistence",
                HAZARD,
                where,
                "persistence is off (no AOF, no RDB snapshots)",
                f"a restart empties the server: {lost}",
                "at every restart or crash of the server",
                "Turn on AOF (appendonly yes, appendfsync always for no loss), or restart the "
                "server no sooner than your longest lock ttl after it stopped",
            )
        ]
    kept = "AOF with appendfsync " + (appendfsync or "?") if aof else "RDB snapshots only"
    if save is None and not aof:
        kept = "no AOF; RDB snapshots unknown (CONFIG GET refused)"
    return [
        Finding(
            "persistence",
            NOTE,
            where,
            f"persistence: {kept}",
            f"a crash loses the writes since the last fsync or snapshot: for the locks granted "
            f"then, {lost}",
            "at a crash (a clean restart keeps everything)",
            "appendonly yes with appendfsync always loses nothing; or accept it, fencing "
            "protects the resource",
        )
    ]


def replication(info: object, min_replicas: int, where: str) -> list[Finding]:
    """``INFO replication``: a replica given as the server, replicas fewer than the client
    waits for (WAIT), or replicas nobody waits for."""
    fields = info_fields(info)
    if fields.get("role") in ("slave", "replica"):
        return [
            Finding(
                "replica-role",
                HAZARD,
                where,
                "the server is a replica",
                "a replica refuses writes: every acquire fails (READONLY)",
                "always",
                "Point the client at the master (or use Sentinel: docs/modes.md)",
            )
        ]
    replicas = _number(fields, "connected_slaves")
    if replicas < min_replicas:
        return [
            Finding(
                "replicas",
                HAZARD,
                where,
                f"{replicas} replica(s) connected, the client waits for {min_replicas}",
                "with min_replicas every grant needs that many acknowledgements: each acquire "
                "is refused (NotReplicated)",
                "always, until enough replicas are connected",
                f"Connect {min_replicas} replica(s), or lower min_replicas",
            )
        ]
    if replicas and not min_replicas:
        return [
            Finding(
                "replicas",
                NOTE,
                where,
                f"{replicas} replica(s), and grants do not wait for them",
                "a failover loses the grants the replica had not received yet: their holders "
                "keep believing while a waiter is granted the name on the new master",
                "at a failover",
                "LockClient(..., min_replicas=1) makes each grant wait for a replica (WAIT)",
            )
        ]
    return []


def scripting(refusal: str | None, commands: ServerCommands, where: str) -> list[Finding]:
    """Whether the server runs fencelock's scripts (``refusal``: why not; None: it does), and
    what is left without them."""
    if refusal is None:
        return []
    if commands.script_free:
        return [
            Finding(
                "scripts",
                NOTE,
                where,
                f"scripts refused ({refusal})",
                'plain locks still work by native commands (scripts="never"); semaphores, '
                "read-write locks, multi-locks, elections, latches and fenced writes raise "
                "ScriptsRequired",
                "always",
                "Allow EVALSHA and EVAL (+@scripting) for the full library (docs/modes.md)",
            )
        ]
    return [
        Finding(
            "scripts",
            HAZARD,
            where,
            f"scripts refused ({refusal}), and {commands.server or 'the server'} has no native "
            "compare-and-delete and compare-and-set",
            "no lock can be held safely here: every acquire raises ScriptsRequired",
            "always",
            "Allow EVALSHA and EVAL (+@scripting), or use Valkey >= 9.0 / Redis >= 8.4 for "
            "plain locks without scripts (docs/modes.md)",
        )
    ]


def clock(server_time: float, sent: float, received: float, where: str) -> list[Finding]:
    """The server's ``TIME`` (seconds) against this host's clock around the request
    (``sent``, ``received``): a difference beyond the round trip and ``CLOCK_TOLERANCE``."""
    if sent - CLOCK_TOLERANCE <= server_time <= received + CLOCK_TOLERANCE:
        return []
    offset = server_time - (sent + received) / 2
    return [
        Finding(
            "clock",
            HAZARD,
            where,
            f"the server's clock is {abs(offset):.1f} s {'ahead of' if offset > 0 else 'behind'}"
            " this host's",
            "one of the clocks is wrong: once_per periods start at different moments on "
            "different hosts, and a name whose fencing counter was lost takes its next token "
            "from the server's clock, so a server clock later set back hands out smaller tokens",
            "when the wrong clock is corrected, or a counter is lost (restart, eviction)",
            "Run NTP (chrony) on the server and on every client host",
        )
    ]


def version(
    commands: ServerCommands, cluster: bool, scripts_run: bool, where: str
) -> list[Finding]:
    """What is known of the server's version: too old for fencelock's needs, or a release line
    without the fix for CVE-2025-49844 while scripts run."""
    name, _, text = commands.server.partition(" ")
    release = parse_version(text)
    if not release:
        return []
    found = []
    if name == "redis" and release < (7, 0) and cluster:
        found.append(
            Finding(
                "version",
                HAZARD,
                where,
                f"Redis {text} in a Cluster",
                "a Cluster needs Redis >= 7.0 for sharded pub/sub: waiters are never woken and "
                "each waits for the holder's lease to end",
                "at every contended acquire",
                "Upgrade to Redis >= 7.0 (or Valkey)",
            )
        )
    fixed = {"redis": REDIS_LUA_FIXED, "valkey": VALKEY_LUA_FIXED}.get(name, ())
    line = [f for f in fixed if f[:2] == release[:2]]
    # a line newer than every fixed one is fixed; an older one, or one between, had no fix
    unpatched = release < line[0] if line else bool(fixed) and release[:2] < max(fixed)[:2]
    if scripts_run and unpatched:
        found.append(
            Finding(
                "version",
                NOTE,
                where,
                f"{name} {text} predates the upstream fix for CVE-2025-49844 (Lua)",
                "no lock promise: a user allowed to run scripts may crash the server or run "
                "code in it (a distribution may have patched this build)",
                "if an attacker can authenticate",
                "Upgrade to a fixed release, or deny scripts to untrusted users",
            )
        )
    return found


def cluster(info: object, unreachable: Sequence[str], where: str) -> list[Finding]:
    """``CLUSTER INFO`` and the nodes this host could not reach."""
    fields = info_fields(info)
    found = []
    assigned = _number(fields, "cluster_slots_assigned")
    state = fields.get("cluster_state", "?")
    if state != "ok" or assigned < 16384:
        found.append(
            Finding(
                "cluster-slots",
                HAZARD,
                where,
                f"cluster_state {state}, {assigned} of 16384 slots assigned",
                "a name whose slot has no serving master cannot be acquired or released",
                "for the names in those slots, now",
                "Assign every slot (CLUSTER ADDSLOTS / valkey-cli --cluster fix)",
            )
        )
    if unreachable:
        found.append(
            Finding(
                "cluster-node",
                HAZARD,
                where,
                f"node(s) unreachable from this host: {', '.join(unreachable)}",
                "names served there time out (LockConnectionError), and their holders' "
                "renewals fail",
                "now",
                "Check the network path from the application hosts to every node",
            )
        )
    return found


def redlock(nodes: int, unreachable: Sequence[str]) -> list[Finding]:
    """A Redlock deployment: its size, and the nodes this host could not reach."""
    quorum = nodes // 2 + 1
    found = []
    if nodes < 3:
        found.append(
            Finding(
                "redlock-size",
                HAZARD,
                "Redlock",
                f"{nodes} node(s)",
                f"a majority of {nodes} is all of them: one node down stops every grant",
                "at any node's outage",
                "Use 3 or 5 independent masters",
            )
        )
    elif nodes % 2 == 0:
        found.append(
            Finding(
                "redlock-size",
                NOTE,
                "Redlock",
                f"{nodes} nodes (even)",
                f"a majority needs {quorum}: the last node adds no fault tolerance",
                "-",
                f"Use {nodes - 1} or {nodes + 1} nodes",
            )
        )
    if unreachable:
        found.append(
            Finding(
                "redlock-node",
                HAZARD,
                "Redlock",
                f"{len(unreachable)} of {nodes} nodes unreachable: {', '.join(unreachable)}",
                f"grants need {quorum}: {nodes - len(unreachable) - quorum} more failure(s) "
                "stop them",
                "now",
                "Bring the nodes back (empty is fine: tokens stay increasing)",
            )
        )
    return found


def sentinel(quorum: str | None, where: str) -> list[Finding]:
    """``SENTINEL CKQUORUM``'s answer: '' when the Sentinels can fail the master over, the
    refusal's text when they cannot, None when no Sentinel answered it."""
    if quorum == "":
        return []
    return [
        Finding(
            "sentinel-quorum",
            HAZARD,
            where,
            f"the Sentinels cannot authorise a failover ({quorum or 'no Sentinel answered'})",
            "if the master fails, nobody promotes a replica: every acquire fails until it is back",
            "at the master's next outage",
            "Run at least 3 Sentinels, a majority of them reachable, with a quorum they can meet",
        )
    ]


def permissions(refused: Mapping[str, str], where: str) -> list[Finding]:
    """What the probe's operations were refused (operation -> the server's error)."""
    return [
        Finding(
            "acl",
            HAZARD,
            where,
            f"{operation} refused: {error}",
            f"the application's {operation} will fail the same way",
            "always",
            "Grant the permissions of docs/modes.md's ACL line",
        )
        for operation, error in refused.items()
    ]


def exit_status(findings: Sequence[Finding]) -> int:
    """``fencelock doctor``'s status: 1 when a hazard was found, else 0."""
    return 1 if any(f.hazard for f in findings) else 0
