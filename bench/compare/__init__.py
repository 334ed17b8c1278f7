"""Every comparison of issue 5 in one run: fencelock against other Redis locks, on the same servers.

    pip install -e '.[bench]' -e ./tools/fencelock-tools
    python -m bench.compare            # about 7 minutes; writes docs/benchmarks.md and docs/img/
    python -m bench.compare --quick    # a short smoke run (noisy figures)
    python -m bench.compare --server valkey --no-write

It starts its own servers (``fencelock_tools.servers.embedded.EmbeddedServer``): one for P1-P3,
P5 and P6, five for P4; every workload starts on an empty server (``FLUSHALL``). The contenders:
fencelock (sync and asyncio), redis-py's ``Lock`` (default, and ``sleep=0.001``),
python-redis-lock, pottery, aioredlock (``bench/peers.py`` says how each one waits), and the
minimal hand-written loops of ``bench.uncontended`` (one server) and ``bench.redlock`` (Redlock
fan-out). A peer that is not installed or does not import is skipped with the reason, printed and
written to the docs.

The workloads are ``fencelock_tools.benchmark``'s (its docstring gives each one's method): the same
code that ``fencelock bench`` runs for fencelock alone. The method is that of
``bench.uncontended``: warm-up, repetitions that run every variant in a rotated order, medians
with min and max and the run-to-run noise ((max - min) / median). Beside each rate (issue 34):
the client's CPU, the servers' CPU and commands, and the round trips per cycle (P1, P4: each run
under ``bench.trips.ServerWatch``; P2: per grant, each process counting its requests and CPU);
P1's ratios to redis-py's ``Lock`` as well as to the minimum; P2's fencelock rows from
``run.P2_FENCELOCK`` (a label and its lock options each); and P6's ``bench.footprint`` (10,000
locks held: used_memory and keys per held lock, and per name once released). Nothing is
asserted: the goals of issues 5 and 34 are reported as met or not met, with the figure.

The output replaces only the section "Contention and peers (issue 5)" of docs/benchmarks.md (the
other sections are left as they are) and writes its plots as docs/img/issue5-*.png (matplotlib,
imported only when writing).

The modules: ``run`` (the settings, the minimal baselines, every workload run into ``Results``),
``goals`` (the goals of issues 5 and 34, met or not), ``render`` (the Markdown section), ``plots``
(matplotlib) and ``__main__`` (the options and the summary printed).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"
