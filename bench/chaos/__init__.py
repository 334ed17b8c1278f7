"""A Jepsen-style fault-injection suite for fencelock: ``python -m bench.chaos``.

Worker processes take a lock, read-modify-write a counter on a separate Redis (the fenced
resource), and record every step with the shared monotonic clock. A nemesis kills and pauses
holders, kills, pauses and restarts Redis nodes, slows or drops their traffic through a TCP proxy,
jumps a node's clock, and fails masters over. The checker reads the merged history and reports
overlapping holds, stale writes accepted, lost updates, orphaned locks, losses never signalled,
and the time to recover after each fault. docs/safety.md has the results and what they mean.

Modules: ``history`` (events, JSONL), ``checker`` (pure: events -> report), ``nemesis`` (one
function per fault), ``workers`` (the worker process), ``topologies`` (the servers of a run),
``scenarios`` (the matrix), ``runner`` (one scenario run), ``report`` (tables, the promises
check), ``safety_doc`` (docs/safety.md).
"""
