# GENERATED from tests/engine/_async/test_script_free.py by tools/gen_sync.py: edit that file instead.
"""Plain locks without Lua scripts (``LockClient(r, scripts="never")``, or "auto" on a server that
refuses them): under docs/modes.md's ACL user, without ``@scripting``, on a server with native
compare-and-delete and compare-and-set (Valkey >= 9.0, Redis >= 8.4), and the clear refusal on
one without (docs/modes.md, "Without scripts"); the locks held when "auto" turns
script-free; and that a client that runs scripts extends by script. Sync twin generated into
tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fencelock._sync.client import LockClient
from fencelock._core import kinds
from fencelock._core.natives import ServerCommands
from fencelock._core.replies import NoReply
from fencelock._keys import LockKeys
from fencelock.errors import LockLost, ScriptsRequired
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import RENEWED_TTL, SyncCall, sync_until, evalsha_calls

ROOT = Path(__file__).resolve().parents[3]
NAME = "plain"
KEYS = LockKeys.for_name(NAME)
NO_SCRIPTS = "noscripts"  # docs/modes.md's user: the commands of the mode, and no script
NO_CHANNELS = "nochannels"  # the same without channels
REVOKED = "revoked"  # a user whose scripts an operator revokes while it holds locks


def url_of(server: EmbeddedServer, user: str) -> str:
    return f"redis://{user}:CHANGE-ME@127.0.0.1:{server.port}/0"


def documented_rules(commands: ServerCommands) -> list[str]:
    """The rules of docs/modes.md's ACL line, exactly, for the server's compare-and-delete;
    where there is none (the mode refuses there), every command but the scripts."""
    if not commands.script_free:
        return ["on", ">CHANGE-ME", "~fencelock:*", "&fencelock:*", "+@all", "-@scripting"]
    text = (ROOT / "docs" / "modes.md").read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if line.startswith("ACL SETUSER fencelock-")]
    delete = f"+{commands.compare_delete.lower()}"
    return [delete if r == "+delifeq" else r for r in line.split()[3:]]


def denials(raw: redis.Redis, user: str) -> list[str]:
    """What the server refused ``user`` (ACL LOG: one entry per command or key, counted)."""
    return [entry["object"] for entry in raw.acl_log() if entry["username"] == user]


@pytest.fixture
def users(server: EmbeddedServer, raw: redis.Redis) -> Iterator[None]:
    rules = documented_rules(ServerCommands().detected(raw.execute_command("HELLO")))
    raw.execute_command("ACL", "SETUSER", NO_SCRIPTS, "reset", *rules)
    no_channels = [rule for rule in rules if not rule.startswith("&")]
    raw.execute_command("ACL", "SETUSER", NO_CHANNELS, "reset", *no_channels)
    raw.execute_command("ACL", "LOG", "RESET")
    yield
    raw.execute_command("ACL", "DELUSER", NO_SCRIPTS, NO_CHANNELS)


@pytest.fixture
def no_scripts(server: EmbeddedServer, raw: redis.Redis, users: None) -> str:
    """The URL of the user without scripts, on a server that has the native commands."""
    commands = ServerCommands().detected(raw.execute_command("HELLO"))
    if not commands.script_free:
        pytest.skip(
            f"{commands.server} has no native compare-and-delete and compare-and-set: "
            "test_the_mode_refuses_where_the_server_has_no_native_commands runs here instead"
        )
    return url_of(server, NO_SCRIPTS)


def test_a_plain_lock_without_scripts(no_scripts: str, raw: redis.Redis) -> None:
    """Under exactly the documented user: a lock, a waiter woken by a release, a renewed lease,
    a semaphore refused. ACL LOG stays empty: no script was even tried, and nothing else was
    denied (the line lacked CLIENT SETINFO, which redis-py sends on every new connection;
    issue 29, item 9)."""
    with (
        LockClient.from_url(no_scripts, scripts="never") as client,
        LockClient.from_url(no_scripts, scripts="never") as other,
    ):
        lock = client.lock(NAME, ttl=10)
        assert lock.acquire(timeout=0)
        first = lock.token
        assert raw.get(KEYS.lock) == lock.holder
        assert lock.held()
        lock.extend(30)
        assert 10_000 < raw.pttl(KEYS.lock) <= 30_000
        waiter = other.lock(NAME, ttl=3, auto_renew=True)  # renewed at 1 s
        call = SyncCall(lambda: waiter.acquire(timeout=None))
        sync_until(lambda: other.statistics().waiting == 1)
        lock.release()
        assert call.result()
        assert other.statistics().wakeups == 1
        sync_until(lambda: other.statistics().renewals >= 1)
        waiter.release()
        assert not raw.exists(KEYS.lock)
        assert lock.acquire(timeout=0)
        assert lock.token > first
        lock.release()
        with pytest.raises(ScriptsRequired):
            client.semaphore("sem", 2)
    assert denials(raw, NO_SCRIPTS) == []


def test_tokens_go_on_increasing_after_the_counter_is_lost(
    no_scripts: str, raw: redis.Redis
) -> None:
    with LockClient.from_url(no_scripts, scripts="never") as client:
        lock = client.lock(NAME, ttl=10)
        tokens = []
        for _ in range(3):
            assert lock.acquire(timeout=0)
            tokens.append(lock.token)
            lock.release()
        assert tokens == sorted(set(tokens))
        # the counter is kept a day after it was started, not for ever
        assert 0 < raw.pttl(KEYS.fence) <= 24 * 3600 * 1000
        raw.flushall()  # the counter is lost: it starts again from the client's clock
        assert lock.acquire(timeout=0)
        assert lock.token > tokens[-1]
        lock.release()


def test_scripted_and_script_free_clients_exclude_each_other(
    no_scripts: str, raw: redis.Redis, sync_client: LockClient
) -> None:
    with LockClient.from_url(no_scripts, scripts="never") as plain:
        native, scripted = plain.lock(NAME, ttl=10), sync_client.lock(NAME, ttl=10)
        assert scripted.acquire(timeout=0)
        tokens = [scripted.token]
        assert not native.acquire(timeout=0)
        scripted.release()
        assert native.acquire(timeout=0)
        tokens.append(native.token)
        assert not scripted.acquire(timeout=0)
        native.release()
        assert scripted.acquire(timeout=0)
        tokens.append(scripted.token)
        scripted.release()
        assert tokens == sorted(set(tokens))  # one counter, whoever counts


def test_a_lagging_clock_still_counts_on_from_a_scripted_grant(
    no_scripts: str,
    raw: redis.Redis,
    sync_client: LockClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scripted grant keeps its token in the lock key alone, so the counter a script-free
    client starts next comes from its own clock: one a second behind the server's still gives
    a larger token (the counter starts a lease ahead of that clock; docs/modes.md)."""
    behind = time.time_ns
    monkeypatch.setattr(kinds.time, "time_ns", lambda: behind() - 10**9)
    with LockClient.from_url(no_scripts, scripts="never") as plain:
        native, scripted = plain.lock(NAME, ttl=10), sync_client.lock(NAME, ttl=10)
        # the name free, no counter: the script-free grant starts it
        assert scripted.acquire(timeout=0)
        first = scripted.token
        scripted.release()
        assert not raw.exists(KEYS.fence)
        assert native.acquire(timeout=0)
        assert native.token > first
        native.release()
        # a busy try starts the counter while the scripted grant holds the name
        raw.delete(KEYS.fence)
        assert scripted.acquire(timeout=0)
        second = scripted.token
        assert not native.acquire(timeout=0)
        scripted.release()
        assert native.acquire(timeout=0)
        assert native.token > second
        native.release()


def test_auto_renew_without_scripts(no_scripts: str) -> None:
    with LockClient.from_url(no_scripts, scripts="never") as client:
        lock = client.lock(NAME, ttl=RENEWED_TTL, auto_renew=True)
        assert lock.acquire(timeout=0)
        sync_until(lambda: client.statistics().renewals >= 4)  # past the first lease
        assert lock.held() and not lock.lost
        lock.release()
        assert client.statistics().losses == 0


def test_a_waiter_is_woken_by_the_release(no_scripts: str) -> None:
    # the fallback re-try is an hour away: only the release's message can wake the waiter
    with (
        LockClient.from_url(no_scripts, scripts="never", max_poll=3600.0) as a,
        LockClient.from_url(no_scripts, scripts="never", max_poll=3600.0) as b,
    ):
        holder, waiter = a.lock(NAME, ttl=3600), b.lock(NAME, ttl=3600)
        assert holder.acquire(timeout=0)
        first = holder.token
        call = SyncCall(lambda: waiter.acquire(timeout=None))
        sync_until(lambda: b.statistics().waiting == 1)
        holder.release()
        assert call.result()
        assert (b.statistics().wakeups, b.statistics().polls) == (1, 0)
        assert waiter.token > first
        waiter.release()


def test_a_local_handoff_without_scripts(no_scripts: str, raw: redis.Redis) -> None:
    with LockClient.from_url(no_scripts, scripts="never", max_poll=3600.0) as client:
        first, second = client.lock(NAME, ttl=10), client.lock(NAME, ttl=10)
        assert first.acquire(timeout=0)
        token = first.token
        call = SyncCall(lambda: second.acquire(timeout=None))
        sync_until(lambda: client.statistics().queued == 1)  # waits in line, here
        first.release()
        assert call.result()
        assert client.statistics().handoffs == 1
        assert second.token > token
        assert raw.get(KEYS.lock) == second.holder  # the same holder token in Redis, renewed
        second.release()
        assert not raw.exists(KEYS.lock)


def test_a_release_never_deletes_another_holders_lock(
    no_scripts: str, raw: redis.Redis
) -> None:
    with (
        LockClient.from_url(no_scripts, scripts="never") as a,
        LockClient.from_url(no_scripts, scripts="never") as b,
    ):
        old = a.lock(NAME, ttl=10)
        assert old.acquire(timeout=0)
        raw.delete(KEYS.lock)  # its lease is gone, as if it expired
        new = b.lock(NAME, ttl=10)
        assert new.acquire(timeout=0)
        with pytest.raises(LockLost):
            old.extend()
        with pytest.raises(LockLost):
            old.release()
        assert raw.get(KEYS.lock) == new.holder
        assert new.held()
        new.release()


def test_a_scripted_client_extends_one_lock_by_script(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    # The key of a lock taken by a script holds its fencing token beside the holder token
    # (one key per held lock), which a SET IFEQ on the holder token alone cannot match: its
    # renewal is renew.lua's, on every server, and leaves no counter beside it.
    lock = sync_client.lock(NAME, ttl=10)
    assert lock.acquire(timeout=0)
    before = evalsha_calls(raw)
    lock.extend(30)
    assert 10_000 < raw.pttl(KEYS.lock) <= 30_000
    assert not raw.exists(KEYS.fence)
    assert evalsha_calls(raw) - before == 1
    raw.set(KEYS.lock, "another holder's token")
    with pytest.raises(LockLost, match="another holder has it"):
        lock.extend()
    assert raw.get(KEYS.lock) == "another holder's token"


def test_what_needs_scripts_is_refused(no_scripts: str, server: EmbeddedServer) -> None:
    with LockClient.from_url(no_scripts, scripts="never") as client:
        for make in (
            lambda: client.lock(NAME, reentrant=True),
            lambda: client.semaphore(NAME, 2),
            lambda: client.at_most(2, NAME),
            lambda: client.rw_lock(NAME),
            lambda: client.multi_lock([NAME, "other"]),
            lambda: client.election(NAME),
            lambda: client.latch(NAME, 2),
            lambda: client.barrier(NAME, 2),
            lambda: client.versioned("fencelock:stock"),
            lambda: client.once_per(NAME, 60),
        ):
            with pytest.raises(ScriptsRequired, match=r'needs Lua scripts: .*scripts="never"'):
                make()
        with pytest.raises(ScriptsRequired, match="needs Lua scripts: it compares and writes"):
            client.fenced_set("fencelock:stock", "1", 1)
        with pytest.raises(ScriptsRequired, match="operators' views"):
            client.inspect(NAME)
        with pytest.raises(ScriptsRequired, match="operators' views"):
            client.force_release(NAME)
        with pytest.raises(ScriptsRequired, match="operators' views"):
            for _ in client.locks():
                pass
        lock = client.lock(NAME, ttl=10)  # a plain lock still is fine
        assert lock.acquire(timeout=0)
        lock.release()
    with pytest.raises(ScriptsRequired, match="for one server"):  # Redlock: made, not sent
        LockClient.from_url([server.url, server.url, server.url], scripts="never")


def test_auto_turns_script_free_when_the_server_refuses_scripts(
    no_scripts: str, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencelock")
    with LockClient.from_url(no_scripts) as client:  # scripts="auto"
        lock = client.lock(NAME, ttl=10)
        assert lock.acquire(timeout=0)  # refused as a script, taken without
        assert raw.get(KEYS.lock) == lock.holder
        lock.release()
        [record] = [r for r in caplog.records if getattr(r, "event", "") == "scripts_refused"]
        assert record.name == "fencelock.server" and record.levelno == logging.WARNING
        assert "refuses Lua scripts" in record.getMessage()
        assert "'evalsha'" in record.getMessage()
        with pytest.raises(ScriptsRequired, match=r"refuses them \(.*'evalsha'"):
            client.semaphore("sem", 2)
        assert lock.acquire(timeout=0)  # from now on without trying a script
        lock.release()
    assert denials(raw, NO_SCRIPTS) == ["evalsha"]  # one script, tried once


@pytest.fixture
def revoked(server: EmbeddedServer, raw: redis.Redis, no_scripts: str) -> Iterator[str]:
    """The URL of a user that runs scripts until the test revokes them (``ACL SETUSER ...
    -@scripting``), on a server that has the native commands."""
    rules = ["on", ">CHANGE-ME", "~fencelock:*", "&fencelock:*", "+@all"]
    raw.execute_command("ACL", "SETUSER", REVOKED, "reset", *rules)
    yield url_of(server, REVOKED)
    raw.execute_command("ACL", "DELUSER", REVOKED)


def revoke_scripts(raw: redis.Redis) -> None:
    raw.execute_command("ACL", "SETUSER", REVOKED, "-@scripting")


def test_locks_held_when_scripts_are_revoked_stay_held(
    revoked: str, raw: redis.Redis
) -> None:
    """Locks taken by scripts (their keys hold 'holder token'), then the operator revokes
    scripts: the client turns script-free at the next request, and its native commands find
    those grants by the value they were stored with. Renewed and extended, no loss signalled,
    released: the names are free at once for another client (they were refused as "another
    holder" and left taken until their lease ran out)."""
    lost: list[object] = []
    renewed_keys = LockKeys.for_name("renewed")
    with LockClient.from_url(revoked) as client:  # scripts="auto"
        renewed = client.lock("renewed", ttl=RENEWED_TTL, auto_renew=True, on_lost=lost.append)
        plain = client.lock(NAME, ttl=10, on_lost=lost.append)
        assert renewed.acquire(timeout=0)
        assert plain.acquire(timeout=0)
        assert raw.get(KEYS.lock) == f"{plain.holder} {plain.token}"  # a script's grant
        revoke_scripts(raw)
        plain.extend(30)  # refused as a script: extended without
        assert 10_000 < raw.pttl(KEYS.lock) <= 30_000
        renewals = client.statistics().renewals
        # past a lease renewed without scripts, or a loss signalled
        sync_until(lambda: client.statistics().renewals >= renewals + 4 or bool(lost))
        assert renewed.held()
        assert plain.held()
        assert (renewed.lost, plain.lost, lost) == (False, False, [])
        plain.release()
        renewed.release()
        assert not raw.exists(KEYS.lock, renewed_keys.lock)
        assert client.statistics().losses == 0
    assert denials(raw, REVOKED).count("evalsha") >= 1  # (the renewal thread's may be one more)
    with LockClient.from_url(revoked) as other:
        for name in (NAME, "renewed"):
            lock = other.lock(name, ttl=10)
            assert lock.acquire(timeout=0)
            lock.release()


def test_a_grant_made_by_a_script_is_handed_on_after_scripts_are_revoked(
    revoked: str, raw: redis.Redis
) -> None:
    with LockClient.from_url(revoked, max_poll=3600.0) as client:
        first, second = client.lock(NAME, ttl=10), client.lock(NAME, ttl=10)
        assert first.acquire(timeout=0)
        token = first.token
        revoke_scripts(raw)
        call = SyncCall(lambda: second.acquire(timeout=None))
        sync_until(lambda: client.statistics().queued == 1)  # waits in line, here
        first.release()  # handed on without a script
        assert call.result()
        assert client.statistics().handoffs == 1
        assert second.token > token
        assert second.held()
        second.release()
        assert not raw.exists(KEYS.lock)


def test_a_grant_made_by_a_script_is_named_by_its_holder_alone_after_the_revocation(
    revoked: str, raw: redis.Redis
) -> None:
    """The by-holder calls (the compat layers') know the holder token, not the fencing token
    stored beside it: they find the grant all the same."""
    with LockClient.from_url(revoked) as client:
        taken, named = client.lock(NAME, ttl=10), client.lock(NAME, ttl=10)
        assert taken.acquire(timeout=0)
        holder = taken.holder
        assert holder is not None
        revoke_scripts(raw)
        assert named.extend_by(holder, 30)
        assert 10_000 < raw.pttl(KEYS.lock) <= 30_000
        assert named.held_by(holder)
        assert named.release_by(holder)
        assert not raw.exists(KEYS.lock)


def test_an_acquire_whose_reply_is_lost_as_scripts_are_revoked_holds_its_grant(
    revoked: str, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-sent acquire landing at the switch: the first send is granted by a script and its
    reply lost (scripts revoked meanwhile), the re-send is refused, and the client sends it
    without scripts, which finds the grant of its first send ('holder token') and holds it as
    it is stored, its lease restarted. (It found the name busy to itself: acquire(timeout=0)
    gave False, and the grant, which nobody gave back, held the name for its whole ttl.)"""
    with LockClient.from_url(revoked) as client:
        route = client._wiring.topology.route
        send = route.send
        granted: list[str] = []  # what the first send left in the lock key

        def reply_lost(
            commands: list[Any], timeout: float, key: str, noscript: Any = None
        ) -> list[Any]:
            replies = send(commands, timeout, key, noscript)
            if commands[0][0] == "EVALSHA" and not granted:
                granted.append(raw.get(KEYS.lock))
                revoke_scripts(raw)
                raise NoReply("the reply was lost")
            return replies

        monkeypatch.setattr(route, "send", reply_lost)
        lock = client.lock(NAME, ttl=3600)
        assert lock.acquire(timeout=0)
        [stored] = granted
        holder, token = stored.split(" ")
        assert holder == lock.holder
        assert raw.get(KEYS.lock) == stored
        assert raw.pttl(KEYS.lock) > 3_000_000
        assert lock.token > int(token)  # counted on from the script's
        assert lock.held()
        lock.release()
        assert not raw.exists(KEYS.lock)
        assert client.statistics().losses == 0
    assert denials(raw, REVOKED) == ["evalsha"]


def test_a_request_sent_again_by_the_stored_value_stays_within_its_bound(
    revoked: str, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A native renewal, hand-off and release that find their grant stored as 'holder token'
    (made by a script before the client turned script-free) send again with that value, in
    what is left of the call's bound: the second send's timeout is the first's less the time
    the first took. (Each send had the whole bound.)"""
    sends: list[tuple[list[Any], float, float]] = []  # commands, timeout, the time taken

    with LockClient.from_url(revoked, max_poll=3600.0) as client:
        route = client._wiring.topology.route
        send = route.send

        def timed(
            commands: list[Any], timeout: float, key: str, noscript: Any = None
        ) -> list[Any]:
            began = time.monotonic()
            try:
                return send(commands, timeout, key, noscript)
            finally:
                sends.append((commands, timeout, time.monotonic() - began))

        first, second = client.lock(NAME, ttl=10), client.lock(NAME, ttl=10)
        assert first.acquire(timeout=0)
        holder, stored = first.holder, raw.get(KEYS.lock)  # stored: 'holder token'

        def sent_again_within_the_bound() -> None:
            (commands, bound, took), (again, left, _) = sends[-2:]
            assert holder in commands[0] and stored in again[0], (commands[0], again[0])
            assert left <= bound - took, (left, bound, took)

        revoke_scripts(raw)
        monkeypatch.setattr(route, "send", timed)
        first.extend(30)  # refused as a script: a renewal without
        sent_again_within_the_bound()
        call = SyncCall(lambda: second.acquire(timeout=None))
        sync_until(lambda: client.statistics().queued == 1)
        first.release()  # handed on without a script
        assert call.result()
        sent_again_within_the_bound()
        second.release()
        sent_again_within_the_bound()
        assert not raw.exists(KEYS.lock)


def test_a_reentrant_lock_held_when_scripts_are_revoked_is_refused(
    revoked: str, raw: redis.Redis
) -> None:
    """A reentrant lock has no native form: held when scripts are revoked, its extend and its
    release raise ``ScriptsRequired``, and it is left to run out (nothing else touches it)."""
    with LockClient.from_url(revoked) as client:
        lock = client.lock(NAME, ttl=10, reentrant=True)
        assert lock.acquire(timeout=0)
        holder = lock.holder
        revoke_scripts(raw)
        with pytest.raises(ScriptsRequired, match=r"refuses them \(.*'evalsha'"):
            lock.extend()
        with pytest.raises(ScriptsRequired, match="hold count is kept by scripts"):
            lock.release()
        assert raw.hexists(KEYS.lock, holder)
        assert 0 < raw.pttl(KEYS.lock) <= 10_000


def test_waiters_poll_where_subscribing_is_refused(
    no_scripts: str, server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencelock")
    url = url_of(server, NO_CHANNELS)
    with (
        LockClient.from_url(url, scripts="never", max_poll=0.05) as a,
        LockClient.from_url(url, scripts="never", max_poll=0.05) as b,
    ):
        holder, waiter = a.lock(NAME, ttl=3600), b.lock(NAME, ttl=3600)
        assert holder.acquire(timeout=0)
        call = SyncCall(lambda: waiter.acquire(timeout=None))
        sync_until(lambda: b.statistics().polls >= 2)  # it re-tries, it cannot listen
        holder.release()  # (its PUBLISH is refused too: released all the same)
        assert call.result()
        assert b.statistics().wakeups == 0
        waiter.release()
    refused = [r for r in caplog.records if getattr(r, "event", "") == "subscribe_refused"]
    assert len(refused) == 1 and refused[0].name == "fencelock.waiter"


def test_the_mode_refuses_where_the_server_has_no_native_commands(
    server: EmbeddedServer, raw: redis.Redis, users: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither scripts nor the native commands (Redis 7 under an ACL without scripting): the
    warning says that nothing can be taken (it said "plain locks only", and then refused the
    plain lock too), and the error names what the server lacks (issue 29, item 2)."""
    caplog.set_level(logging.WARNING, logger="fencelock")
    commands = ServerCommands().detected(raw.execute_command("HELLO"))
    if commands.script_free:
        pytest.skip(f"{commands.server} has the native commands: the tests above run there")
    lacks = f"{commands.server} lacks SET ... IFEQ (Valkey >= 8.1, Redis >= 8.4) and a "
    for url, scripts in ((server.url, "never"), (url_of(server, NO_SCRIPTS), "auto")):
        with LockClient.from_url(url, scripts=scripts) as client:
            lock = client.lock(NAME, ttl=10)
            with pytest.raises(ScriptsRequired) as refused:
                lock.acquire(timeout=0)
            assert lacks + "compare-and-delete (DELIFEQ: " in str(refused.value)
    assert raw.keys("*") == []  # nothing was taken
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "scripts_refused"]
    said = record.getMessage()
    assert "this client runs none from now on, and can take nothing: " + lacks in said, said
    assert "plain locks" not in said


def test_auto_says_what_is_left_where_it_turns_script_free_before_a_grant(
    server: EmbeddedServer, raw: redis.Redis, users: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused a script before any grant told it what the server is (an operator's
    ``inspect()`` first): it asks, and the warning says what is left, whatever the server."""
    caplog.set_level(logging.WARNING, logger="fencelock")
    commands = ServerCommands().detected(raw.execute_command("HELLO"))
    with LockClient.from_url(url_of(server, NO_SCRIPTS)) as client:
        with pytest.raises(ScriptsRequired):
            client.inspect(NAME)
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "scripts_refused"]
    left = "plain locks only" if commands.script_free else f"nothing: {commands.server} lacks"
    assert f"can take {left}" in record.getMessage(), record.getMessage()
