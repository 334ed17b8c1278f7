"""Drop-in replacements for other Redis lock libraries, running on fencelock (docs/migrating.md).

* ``fencelock.compat.redis_py``: redis-py's ``Lock`` and ``Redis.lock()``;
  ``fencelock.compat.redis_py_asyncio``: the same for ``redis.asyncio``.
* ``fencelock.compat.redis_lock``: python-redis-lock's ``Lock``.

Each keeps its library's constructor, methods and exceptions (the exceptions are fencelock's
too), so that moving is one import; what differs on purpose is listed in docs/migrating.md.
"""
