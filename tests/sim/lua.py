"""The Lua of the simulated server: Lua 5.1.5 (``lupa.lua51``, the version Redis and Valkey embed,
so ``#`` of a table with holes, ``string.format('%.0f')``, ``tonumber`` and number-to-string
conversions are the same implementation), with the ``redis`` library fencelock's scripts use and
Redis's conversions between Lua values and replies:

- a Lua number in a reply is truncated to an integer; ``true`` is 1, ``false`` and ``nil`` a nil;
  an array stops at its first nil; ``{err=...}`` is an error reply, ``{ok=...}`` a status reply;
- a reply in Lua: an integer is a number, a nil bulk is ``false``, a status is ``{ok=...}``, an
  error is ``{err=...}`` (``redis.pcall``) or raised (``redis.call``), with the line of the script
  added to the message as the server words it (``Flavor.script_error``);
- the globals are read-only and reading an undefined one is an error, as in Redis 7; they are
  the libraries Redis 7 leaves (no io, os, debug, require, print...).

Not here: ``redis.log``, ``redis.setresp``, the ``bit``, ``cjson``, ``struct`` and ``cmsgpack``
libraries (no fencelock script uses them: a script that did would fail on an undefined global).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import lupa.lua51 as lua51  # type: ignore[import-untyped]

from .protocol import CommandError, Flavor, Reply, Status, number_text, reply_error

# Runs once per Lua state. `dispatch(...)` is the server: it answers `true, reply` or
# `false, {err=...}`.
_BOOT = r"""
local dispatch, sha1hex = ...
local getinfo = debug.getinfo

-- What a script sees as its globals: what Redis 7 leaves in its Lua (the real globals stay as
-- lupa needs them).
local sandbox = {}
for _, name in ipairs({'assert', 'collectgarbage', 'error', 'gcinfo', 'getmetatable', 'ipairs',
                       'load', 'loadstring', 'next', 'pairs', 'pcall', 'rawequal', 'rawget',
                       'rawset', 'select', 'setmetatable', 'tonumber', 'tostring', 'type',
                       'unpack', 'xpcall', '_VERSION', 'coroutine', 'math', 'string', 'table'}) do
  sandbox[name] = _G[name]
end
sandbox._G = sandbox

local redis = {}
sandbox.redis = redis
-- redis.call raises the error reply of a command. It must be called as a C function is: a Lua
-- function in `return redis.call(...)` would be a tail call, and the script's line, which the
-- error handler reports, gone from the stack. So it is a table whose __call is a C function
-- (coroutine.wrap's), a fresh one for each call, as a coroutine runs once.
local call_meta = {}
local function arm()
  call_meta.__call = coroutine.wrap(function(_, ...)
    arm()
    local ok, reply = dispatch(...)
    if not ok then
      error(reply)
    end
    return reply
  end)
end
arm()
redis.call = setmetatable({}, call_meta)
function redis.pcall(...)
  local _, reply = dispatch(...)
  return reply
end
-- As Redis 7 does (luaPushErrorBuff): the first word is the error code, 'ERR' if there is one word.
function redis.error_reply(message)
  message = string.gsub(string.gsub(message, '^%-', ''), '[\r\n]+$', '')
  if not string.find(message, ' ', 1, true) then
    message = 'ERR ' .. message
  end
  return {err = message}
end
function redis.status_reply(message)
  return {ok = message}
end
redis.sha1hex = sha1hex

-- Redis's __redis__err__handler: an error becomes {err=..., source=..., line=...}, the line
-- being the script's own (the first frame of user_script, below redis.call's coroutine).
local function handler(err)
  local level = 2
  local info = getinfo(level, 'Sl')
  while info and info.source ~= '@user_script' do
    level = level + 1
    info = getinfo(level, 'Sl')
  end
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if info then
    err.source, err.line = info.source, info.currentline
  end
  return err
end

local function run(script, keys, argv)
  rawset(sandbox, 'KEYS', keys)
  rawset(sandbox, 'ARGV', argv)
  return xpcall(script, handler)
end

local function compile(source)
  local script, err = loadstring(source, '@user_script')
  if script then
    setfenv(script, sandbox)
  end
  return script, err
end

setmetatable(sandbox, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function()
    error('Attempt to modify a readonly table', 2)
  end,
})
return run, compile
"""


def _truncated(x: float) -> int:
    """A Lua number as a reply: C's (long long) cast, which gives LLONG_MIN out of range on x86."""
    return int(x) if math.isfinite(x) and abs(x) < 2**63 else -(2**63)


class Lua:
    """One Lua state and its compiled scripts; ``SCRIPT FLUSH`` makes a new one, as Redis does."""

    def __init__(self, flavor: Flavor) -> None:
        self.flavor = flavor
        self._runtime = lua51.LuaRuntime(
            encoding=None, unpack_returned_tuples=True, register_eval=False, register_builtins=False
        )
        self._run, self._compile = self._runtime.execute(_BOOT, self._dispatch, self._sha1hex)
        self._scripts: dict[str, Any] = {}  # sha -> compiled function
        self._command: Callable[[list[bytes]], Reply] | None = None
        self._failure: BaseException | None = None  # a Python exception inside a script

    def has(self, sha: str) -> bool:
        return sha in self._scripts

    def load(self, source: bytes) -> str:
        """Compile and cache ``source``: its sha (CommandError if it does not compile)."""
        sha = hashlib.sha1(source).hexdigest()
        if sha not in self._scripts:
            function, error = self._compile(source)
            if function is None:
                message = error.decode(errors="replace")
                raise CommandError(f"ERR Error compiling script (new function): {message}")
            self._scripts[sha] = function
        return sha

    def run(
        self,
        sha: str,
        keys: Sequence[bytes],
        argv: Sequence[bytes],
        command: Callable[[list[bytes]], Reply],
    ) -> Reply:
        """Run a cached script; ``command(words)`` runs what it calls (raising CommandError).
        An error reply is raised as CommandError."""
        self._command, self._failure = command, None
        try:
            table = self._runtime.table_from
            ok, value = self._run(self._scripts[sha], table(keys), table(argv))
        finally:
            self._command = None
        if self._failure is not None:  # a bug or a gap of the simulation: never a reply
            raise self._failure
        if ok:
            return self._reply(value)
        if lua51.lua_type(value) != "table" or not isinstance(value[b"err"], bytes):
            raise CommandError("ERR Error running script: the error is not a string")
        message = value[b"err"].decode(errors="replace")
        if value[b"source"] is not None:
            message += self.flavor.script_error(sha, value[b"line"])
        raise CommandError(message)

    # -- Lua -> Python ------------------------------------------------------------------------

    def _dispatch(self, *args: Any) -> tuple[bool, Any]:
        assert self._command is not None
        try:
            words = [self._word(arg) for arg in args]
            if not words:
                raise CommandError(f"ERR {self.flavor.script_no_arguments}")
            return True, self._lua(self._command(words))
        except CommandError as exc:
            return False, self._runtime.table_from({b"err": exc.message.encode()})
        except Exception as exc:  # re-raised by run() once the script is over
            self._failure = exc
            return False, self._runtime.table_from({b"err": b"ERR simulation failure"})

    def _word(self, arg: Any) -> bytes:
        if isinstance(arg, bytes):
            return arg
        if isinstance(arg, int | float) and not isinstance(arg, bool):
            return number_text(float(arg), self.flavor)
        raise CommandError(f"ERR {self.flavor.script_arguments}")

    def _reply(self, value: Any) -> Reply:
        """A script's return value as a reply (Redis's luaReplyToRedisReply)."""
        if value is None or value is False:
            return None
        if value is True:
            return 1
        if isinstance(value, bytes):
            return value
        if isinstance(value, int | float):
            return _truncated(value)
        if lua51.lua_type(value) != "table":
            return None  # a function or userdata
        if isinstance(value[b"err"], bytes):
            return reply_error(value[b"err"].decode(errors="replace"))
        if isinstance(value[b"ok"], bytes):
            return Status(value[b"ok"])
        items: list[Reply] = []
        while (item := value[len(items) + 1]) is not None:
            items.append(self._reply(item))
        return items

    # -- Python -> Lua ------------------------------------------------------------------------

    def _lua(self, reply: Reply) -> Any:
        """A reply as a script sees it (Redis's redisProtocolToLuaType)."""
        if isinstance(reply, Status):
            return self._runtime.table_from({b"ok": bytes(reply)})
        if isinstance(reply, list):
            return self._runtime.table_from([self._lua(item) for item in reply])
        if reply is None:
            return False
        return reply  # bytes or int (no command a script may call answers an error in an array)

    @staticmethod
    def _sha1hex(data: bytes) -> bytes:
        return hashlib.sha1(data).hexdigest().encode()
