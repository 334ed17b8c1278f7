"""Throw-away servers for the demo, the tests, the benchmarks and the chaos suite, which all
import them from here: one server (embedded.py), a Redis Cluster or a sentinel-watched master and
replica (topology.py), and a TCP proxy that injects faults between a client and a server
(proxy.py)."""
