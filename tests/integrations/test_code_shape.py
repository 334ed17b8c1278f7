"""The shape docs/architecture.md promises, kept: who may import whom (the layers, from the
pure rules up to the client), a primitive that holds the lease engine rather than overriding
the lock's methods, and the script mode and the route's type known where they belong. Seams,
not sizes: no rule here counts lines (issue 32)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fencelock._async.client import AsyncLockClient
from fencelock._sync.client import LockClient

SRC = Path(__file__).resolve().parents[2] / "src" / "fencelock"
MODULES = sorted(SRC.rglob("*.py"))
TOPOLOGY_CLASSES = {
    "AsyncTopology",
    "AsyncRoute",
    "AsyncOneServerRoute",
    "AsyncClusterRoute",
    "AsyncQuorumRoute",
}
# the topology and what builds it: connect.py from the user's clients, _offloop.py the
# renewal thread's sync twin of the client's topology
TOPOLOGY_MODULES = {"topology.py", "routes.py", "protocol.py", "connect.py", "_offloop.py"}

# The layers of the asyncio source (the sync twin is generated from it), lowest first: a module
# imports (at module level: annotations under TYPE_CHECKING are not imports) only its own layer
# and those below. Adding a module means placing it here.
LAYERS: list[set[str]] = [
    {"transport", "waiter", "versioned"},  # the transport policy, pub/sub, plain values
    {"routes", "glide_route"},  # where the keys live, how to reach them
    {"protocol"},  # what is sent: scripts or native commands (the script mode)
    {"grants"},  # the engine's questions, one or a majority deciding
    {"topology"},  # route + protocol + grants, and the primitives' own scripts
    {"engine", "contention", "handoff", "singleflight", "watchdog", "giveback"},  # the engine
    {"leased", "admin", "connect"},  # what every primitive shares; the operators; the making
    {"lock", "semaphore", "rw_lock", "election", "multilock", "latch", "compute", "periodic"},
    {"resources"},  # the fenced writes and versioned values: the client's, over the topology
    {"client"},
]
RANK = {module: rank for rank, layer in enumerate(LAYERS) for module in layer}
PRIMITIVES = LAYERS[7]
# what a primitive never reaches: it asks its lease (engine.py is the only door)
BELOW_THE_ENGINE = {"transport", "waiter", "routes", "protocol", "grants"}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of what ``path`` imports of ours at run time: relative imports, less
    those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    checking = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for inner in block.body
        for node in ast.walk(inner)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and id(node) not in checking:
            dots = "." * node.level
            if node.module:
                found.append((node.lineno, dots + node.module))
            else:
                found.extend((node.lineno, dots + alias.name) for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted((SRC / "_async").glob("[!_]*.py")), ids=lambda p: p.stem)
def test_nothing_imports_upward(path: Path) -> None:
    assert path.stem in RANK, f"{path.stem}: place it in a layer of LAYERS"
    upward = [
        f"{path.stem}:{line} imports {module}"
        for line, module in imports(path)
        if module.startswith(".") and not module.startswith("..")
        and RANK.get(module[1:].split(".")[0], -1) > RANK[path.stem]
    ]  # fmt: skip
    assert upward == []


@pytest.mark.parametrize("path", sorted(PRIMITIVES), ids=str)
def test_a_primitive_asks_its_lease_only(path: str) -> None:
    """No primitive imports the route, the protocol, the grants or the transport, nor reaches
    the wiring's topology or grants: it asks its lease (``engine.AsyncLease``), or the engine
    (``engine.run_script``) for a call that holds none."""
    source = SRC / "_async" / f"{path}.py"
    below = [m for _, m in imports(source) if m[1:].split(".")[0] in BELOW_THE_ENGINE]
    assert below == []
    text = source.read_text()
    assert "wiring.topology" not in text and "wiring.grants" not in text


# What the layers above the topology reach of it (the engine, the primitives, the operators,
# the resources and the client; connect.py makes and closes it), each member one concern:
# the engine's questions, the script mode's refusals, what the route is and can do (one
# value), the primitives' and operators' own scripts, and the wake-ups. A new member is a new
# concern to name here, not a flag or a timeout added beside the others (issue 32: at most
# about ten).
TOPOLOGY_SURFACE = {
    "grants": "the engine's questions (engine.AsyncWiring, the watchdog's making)",
    "protocol": "what needs scripts: require_kind, require_scripts, running",
    "traits": "what the route is and can do (_core/routing.RouteTraits)",
    "run": "a script on the server of its keys, its failure raised",
    "run_all": "a script on every server of its keys, failures as values",
    "view": "a grant as the servers show it (Redlock: a majority)",
    "publish": "a wake-up message",
    "scan": "the keys of every server (the operators' listing)",
    "watch": "a wake-up channel subscribed",
    "wait": "a message on a watched channel waited for",
}
ABOVE_THE_TOPOLOGY = [
    path
    for path in sorted((SRC / "_async").glob("[!_]*.py"))
    if RANK.get(path.stem, -1) > RANK["topology"] and path.stem != "connect"
] + [SRC / "_backend.py"]  # (the sync and asyncio watchdogs' making)


def test_the_topology_is_reached_through_a_few_members() -> None:
    """Every ``topology.<member>`` (``wiring.topology``, ``self._topology``) reached above
    the topology is one of ``TOPOLOGY_SURFACE``'s, and the topology is only ever held under
    that name (so that no member is reached unseen)."""
    reached: dict[str, set[str]] = {}
    renamed = []
    for path in ABOVE_THE_TOPOLOGY:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _is_topology(node.value):
                reached.setdefault(node.attr, set()).add(path.stem)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
                held = node.value.attr in ("topology", "_topology")
                names = {getattr(t, "id", getattr(t, "attr", "")) for t in node.targets}
                if held and not names <= {"topology", "_topology"}:
                    renamed.append(f"{path.stem}:{node.lineno}")
            annotation = ast.unparse(node.annotation or node) if isinstance(node, ast.arg) else ""
            if "Topology" in annotation and getattr(node, "arg", "") != "topology":
                renamed.append(f"{path.stem}:{node.lineno}")
    assert renamed == []
    assert {m: sorted(reached[m]) for m in sorted(reached)} == {
        m: sorted(reached.get(m, ())) for m in sorted(TOPOLOGY_SURFACE)
    }
    assert len(TOPOLOGY_SURFACE) <= 10


def _is_topology(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "topology"
    return isinstance(node, ast.Attribute) and node.attr in ("topology", "_topology")


def test_the_core_imports_nothing_of_ours_above_it() -> None:
    """The pure rules (_core/) import only each other and the plain values beside them."""
    allowed = {"..errors", ".._keys", "..._keys", "..._scripts", ".._scripts", ".._labels"}
    found = [
        f"{path.name}:{line} imports {module}"
        for path in sorted((SRC / "_core").glob("*.py"))
        for line, module in imports(path)
        if not (module.startswith(".") and not module.startswith("..")) and module not in allowed
    ]
    assert found == []


def test_the_script_mode_is_known_in_two_modules() -> None:
    """Whether a client runs scripts (``no_scripts``, ``auto``) is read or written only by the
    protocol (``_async/protocol.py``) and the decisions of ``_core/natives.py``."""
    knowing = sorted(
        str(path.relative_to(SRC))
        for path in MODULES
        if "/_sync/" not in str(path)
        and any(word in path.read_text() for word in (".no_scripts", "mode.auto"))
    )
    assert knowing == ["_async/protocol.py", "_core/natives.py"]


def test_no_override_changes_a_signature() -> None:
    marked = [str(p) for p in MODULES if "ignore[override]" in p.read_text()]
    assert marked == []


def test_no_isinstance_on_a_topology_outside_the_topology_modules() -> None:
    found = []
    for path in MODULES:
        if path.name in TOPOLOGY_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                synced = {name.replace("Sync", "Async", 1) for name in names}
                if (names | synced) & TOPOLOGY_CLASSES:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_no_merge_leftover_in_any_file() -> None:
    # a bare "=======" in kinds.py's docstring held its table twice (issue 29, item 10)
    root = SRC.parents[1]
    files = [p for d in ("src", "tests", "tools", "bench", "docs") for p in (root / d).rglob("*")]
    markers = ("<<<<<<< ", "=======", ">>>>>>> ")
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in files
        if path.suffix in {".py", ".md", ".lua", ".toml", ".yml"}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line == markers[1] or line.startswith((markers[0], markers[2]))
    ]
    assert found == []


def test_the_kinds_table_lists_each_kind_of_the_module_once() -> None:
    from fencelock._core import kinds

    lines = (kinds.__doc__ or "").splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=====")]
    assert len(rules) == 3, "one table: its top, the rule under its heading, its bottom"
    listed = [line.split()[0].strip("`") for line in lines[rules[1] + 1 : rules[2]]]
    made = [
        name
        for name, value in vars(kinds).items()
        if isinstance(value, type) and issubclass(value, kinds.Kind) and value is not kinds.Kind
    ]
    # (ScoredLease is the base of the kinds kept in a sorted set, named below the table)
    assert sorted(listed) == sorted(set(made) - {"ScoredLease"})


def test_the_client_holds_its_sides_rather_than_inheriting_them() -> None:
    """The client's fenced writes, computed results and operators' calls are objects it holds
    (``resources.AsyncResources``, ``compute.AsyncResults``, ``admin.AsyncOperators``): no
    base class forwards to them (issue 32: such bases were moves to fit a line count)."""
    assert AsyncLockClient.__mro__ == (AsyncLockClient, object)
    assert LockClient.__mro__ == (LockClient, object)
