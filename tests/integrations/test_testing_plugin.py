"""fencelock.testing, the pytest plugin for users' suites, run by pytester on small sample
projects: the worked example of docs/testing.md, every fixture and fault helper, and a suite that
uses none of them (which must start no server)."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fencelock.testing import INSTALL
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "testing.md"
INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
{extra}
"""


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[EmbeddedServer]:
    """The servers started (in this process: the samples run in-process)."""
    started: list[EmbeddedServer] = []
    start = EmbeddedServer.start

    def recorded(self: EmbeddedServer, timeout: float = 15.0) -> EmbeddedServer:
        started.append(self)
        return start(self, timeout)

    monkeypatch.setattr(EmbeddedServer, "start", recorded)
    return started


def sample(pytester: pytest.Pytester, files: dict[str, str], ini: str = "") -> None:
    pytester.makeini(INI.format(extra=ini))
    for path, text in files.items():
        (pytester.path / path).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / path).write_text(text)
    pytester.syspathinsert()


def guide_files() -> dict[str, str]:
    """The guide's code blocks that name their file on their first line."""
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    return dict(blocks)


def _brought(extra: str) -> set[str]:
    """The distributions that ``pip install 'fencelock[extra]'`` installs by name (fencelock's
    own dependencies and the extra's, through the extras it names), from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names, todo, seen = set(), [*project["dependencies"]], set()
    todo += project["optional-dependencies"][extra]
    while todo:
        requirement = Requirement(todo.pop())
        if requirement.name != "fencelock":
            names.add(canonicalize_name(requirement.name))
            continue
        for more in requirement.extras - seen:
            seen.add(more)
            todo += project["optional-dependencies"][more]
    return names


# pytest marks of the guide that come from a plugin, and the plugin's module
PLUGIN_MARKS = {"asyncio": "pytest_asyncio"}


def test_the_install_line_of_each_example_brings_what_it_imports() -> None:
    """An example needs what it imports and the plugins of its marks; the extra to install is the
    one the text before it names (since the previous example), else the guide's first."""
    text = GUIDE.read_text()
    own = {path.split("/")[0] for path in guide_files()}  # the sample project's: myapp, tests
    installed = packages_distributions()
    first = re.search(r"fencelock\[([\w-]+)\]", text)
    assert first is not None
    end, checked = 0, 0
    for block in re.finditer(r"```python\n# (\S+\.py)\n(.*?)```", text, re.DOTALL):
        named = re.findall(r"fencelock\[([\w-]+)\]", text[end : block.start()])
        extra, end = (named or [first.group(1)])[-1], block.end()
        code = block.group(2)
        modules = {
            *re.findall(r"^(?:import|from) (\w+)", code, re.MULTILINE),
            *(PLUGIN_MARKS[m] for m in re.findall(r"@pytest\.mark\.(\w+)", code)),
        }
        brought = _brought(extra)
        for module in modules - own - set(sys.stdlib_module_names) - {"fencelock"}:
            dists = {canonicalize_name(d) for d in installed.get(module, [])}
            assert dists & brought, f"{block.group(1)} needs {module}: not in fencelock[{extra}]"
            checked += 1
    assert checked >= 4  # pytest and redis in the tests, pytest and pytest_asyncio in asyncio's


def test_the_guides_worked_example_passes(
    pytester: pytest.Pytester, starts: list[EmbeddedServer]
) -> None:
    files = guide_files()
    assert set(files) == {"myapp/report.py", "tests/test_report.py", "tests/test_report_async.py"}
    sample(pytester, files)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    assert len(starts) == 1  # one server for the session, started when first asked for


def test_a_suite_without_the_fixtures_starts_no_server(
    pytester: pytest.Pytester, starts: list[EmbeddedServer]
) -> None:
    sample(
        pytester,
        {"test_plain.py": "def test_one():\n    assert 1 + 1 == 2\n", "conftest.py": ""},
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert starts == []


def test_the_plugin_needs_the_tools_only_when_a_fixture_asks(pytester: pytest.Pytester) -> None:
    """pytest loads the plugin in every suite of an environment with fencelock: a suite runs
    without fencelock's tools (its throw-away servers) installed, and a test that asks for a
    server is told what to install."""
    missing = "import sys\n\nsys.modules['fencelock_tools'] = None  # as if not installed\n"
    tests = "def test_plain():\n    pass\n\n\ndef test_server(fencelock_server):\n    pass\n"
    sample(pytester, {"conftest.py": missing, "test_it.py": tests})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # (the plugin loads anew)
    result.assert_outcomes(passed=1, errors=1)
    told = "fencelock's fixtures need fencelock's tools ("
    assert any(line.startswith(told) and line.endswith(INSTALL) for line in result.outlines)


HELPERS = """
import pytest
import redis

import fencelock


def raw(server, **kwargs):
    return redis.Redis.from_url(server.url, **kwargs)


def test_a_paused_server_answers_nothing_until_resumed(fencelock_server):
    with raw(fencelock_server, socket_timeout=0.2) as r:
        fencelock_server.pause()
        try:
            with pytest.raises(redis.TimeoutError):
                r.ping()
        finally:
            fencelock_server.resume()
        assert r.ping()


def test_paused_resumes_when_its_block_raises(fencelock_server):
    with pytest.raises(KeyError):
        with fencelock_server.paused():
            raise KeyError("in the block")
    with raw(fencelock_server, socket_timeout=1) as r:
        assert r.ping()


def test_1_leaves_the_server_paused_and_a_key_behind(fencelock_server, fencelock_client):
    with fencelock_client.lock("left", ttl=30, timeout=1):
        pass
    with raw(fencelock_server) as r:
        r.set("left-behind", 1)
    fencelock_server.pause()


def test_2_the_next_test_finds_it_running_and_empty(fencelock_server):
    with raw(fencelock_server, socket_timeout=1) as r:
        assert r.dbsize() == 0


def test_end_lease_frees_the_name_and_the_holder_learns_at_its_next_call(
    fencelock_client, fencelock_server
):
    lost = []
    lock = fencelock_client.lock("job", ttl=30, on_lost=lost.append)
    assert lock.acquire(timeout=1)
    token = lock.token
    assert fencelock_server.end_lease("job")
    assert not fencelock_server.end_lease("job")  # nobody holds it now
    lock.check()  # local: it cannot know yet
    with fencelock.LockClient.from_url(fencelock_server.url) as other:
        with other.lock("job", ttl=30, timeout=0) as newer:
            assert newer.token > token
    with pytest.raises(fencelock.LockLost):
        lock.extend()
    assert lost == [lock] and lock.lost


def test_force_loss_signals_the_loss_at_once(fencelock_client, fencelock_server):
    lost = []
    lock = fencelock_client.lock("job", ttl=30, auto_renew=True, on_lost=lost.append)
    with pytest.raises(fencelock.LockLost):
        with lock:
            fencelock_server.force_loss(lock)
            assert lost == [lock] and lock.lost
            with pytest.raises(fencelock.LockLost):
                lock.check()
    assert fencelock_client.inspect("job") is None


def test_force_loss_of_a_lock_not_held_is_refused(fencelock_client, fencelock_server):
    with pytest.raises(fencelock.LockNotOwned):
        fencelock_server.force_loss(fencelock_client.lock("job", ttl=30))
    with pytest.raises(TypeError, match="not <Semaphore 'job' limit=2"):
        fencelock_server.force_loss(fencelock_client.semaphore("job", 2))


async def test_force_loss_async(fencelock_async_client, fencelock_server):
    lost = []
    lock = fencelock_async_client.lock("job", ttl=30, on_lost=lost.append)
    assert await lock.acquire(timeout=1)
    # (the class as the docs name it: it said "not a AsyncLock")
    with pytest.raises(TypeError, match="not <fencelock.asyncio.Lock 'job' ttl=30.0>: force_loss"):
        fencelock_server.force_loss(lock)
    await fencelock_server.force_loss_async(lock)
    assert lost == [lock] and lock.lost
    with pytest.raises(fencelock.LockLost):
        await lock.release()


def test_restart_comes_back_empty_on_the_same_url(fencelock_client, fencelock_server):
    url = fencelock_server.url
    lock = fencelock_client.lock("job", ttl=30)
    assert lock.acquire(timeout=1)
    fencelock_server.restart()
    assert fencelock_server.url == url
    with fencelock.LockClient.from_url(url) as other:
        assert other.inspect("job") is None
        with other.lock("job", ttl=30, timeout=0):
            pass
    assert not lock.held()
    assert lock.lost


def test_the_clients_use_the_options_fixture(fencelock_client_options):
    assert fencelock_client_options == {"socket_timeout": 1.0}
"""


def test_the_fixtures_and_fault_helpers(
    pytester: pytest.Pytester, starts: list[EmbeddedServer]
) -> None:
    sample(pytester, {"test_helpers.py": HELPERS}, ini="asyncio_mode = auto")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=HELPERS.count("\ndef test_") + HELPERS.count("async def test_"))
    # one server for the session, started again by restart()
    assert len(starts) == 2 and starts[0] is starts[1]


def test_the_ini_option_chooses_the_server(pytester: pytest.Pytester) -> None:
    valkey = find_server("valkey")
    check = f"def test_it(fencelock_server):\n    assert fencelock_server.binary == {valkey!r}\n"
    sample(pytester, {"test_choice.py": check}, ini="fencelock_server = valkey")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_server_that_is_not_an_executable_is_a_usage_error(pytester: pytest.Pytester) -> None:
    missing = pytester.path / "no-such-server"
    check = "def test_it(fencelock_server):\n    pass\n"
    sample(pytester, {"test_choice.py": check}, ini=f"fencelock_server = {missing}")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*fencelock_server = {missing}: not an executable file*"])
