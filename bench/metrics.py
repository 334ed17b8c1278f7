"""What the metrics cost: uncontended acquire+release (P1) with metrics off, with the Prometheus
collector on, with the OpenTelemetry instruments on (issue 14), and with tracing on (issue 26).

    python -m bench.metrics [--seconds 1] [--repeat 7] [--warmup 0.5] [--url redis://...]

Eight variants, one client each of sync and asyncio, doing the cycles of ``bench.uncontended`` on
one lock nobody else wants: ``off`` (nobody listens), ``prometheus`` (``enable_prometheus`` on a
registry of its own), ``opentelemetry`` (``enable_opentelemetry`` with an SDK
``MeterProvider`` and an in-memory reader: the recording cost, not an export's) and ``tracing``
(``enable_tracing`` with an SDK ``TracerProvider`` whose ``BatchSpanProcessor`` hands the spans,
two per cycle, to an exporter that drops them: the making of spans, not their export). Each variant
switches its exporter on just for its own runs, in the rotated order of ``bench.uncontended``.
Reported: cycles/s and client CPU per cycle, and each exporter against ``off``.

"Unchanged when off" is measured apart, against the code before the metrics: run
``python -m bench.uncontended`` with ``PYTHONPATH`` set to a checkout of each, alternating
(docs/benchmarks.md has the figures and the commands).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import cache

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

import fencelock
import fencelock.asyncio
from fencelock import metrics
from fencelock_tools.servers.embedded import EmbeddedServer

from ._common import (
    SOCKET_TIMEOUT,
    Sample,
    Variant,
    client_description,
    measure,
    print_ratios,
    print_table,
    server_description,
    time_async,
    time_sync,
)
from .uncontended import fencelock_async_cycle, fencelock_sync_cycle


class Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@cache
def tracer_provider() -> TracerProvider:
    """One for every run (its batch processor's thread lives as long as the process)."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


EXPORTERS: dict[str, Callable[[], metrics.Subscription] | None] = {
    "off": None,
    "prometheus": lambda: metrics.enable_prometheus(CollectorRegistry()),
    "opentelemetry": lambda: metrics.enable_opentelemetry(
        MeterProvider(metric_readers=[InMemoryMetricReader()])
    ),
    "tracing": lambda: metrics.enable_tracing(tracer_provider()),
}


def exported(run: Callable[[float], Sample], exporter: str) -> Callable[[float], Sample]:
    """``run``, with ``exporter`` switched on for it only."""
    enable = EXPORTERS[exporter]

    def measured(seconds: float) -> Sample:
        subscription = enable() if enable is not None else None
        try:
            return run(seconds)
        finally:
            if subscription is not None:
                subscription.disable()

    return measured


@contextmanager
def variants(url: str, runner: asyncio.Runner) -> Iterator[list[Variant]]:
    with ExitStack() as stack:
        sync_client = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)
        stack.callback(sync_client.close)

        async def make_async() -> fencelock.asyncio.LockClient:
            return fencelock.asyncio.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)

        async_client = runner.run(make_async())
        stack.callback(lambda: runner.run(async_client.close()))
        sync_cycle = fencelock_sync_cycle(sync_client)
        async_cycle = fencelock_async_cycle(async_client)
        yield [
            *(
                Variant(f"sync {name}", exported(lambda s: time_sync(sync_cycle, s), name))
                for name in EXPORTERS
            ),
            *(
                Variant(
                    f"async {name}",
                    exported(lambda s: runner.run(time_async(async_cycle, s)), name),
                )
                for name in EXPORTERS
            ),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics",
        description="Uncontended acquire+release cycles/s with metrics and tracing off and on.",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="one run, s (default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per variant (default 7)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up per variant, s (0.5)")
    parser.add_argument("--url", help="an existing server (default: start one with EmbeddedServer)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0")
    with ExitStack() as stack:
        if args.url:
            url: str = args.url
        else:
            url = stack.enter_context(EmbeddedServer()).url
        print(f"server:  {server_description(url)} at {url}")
        print(f"client:  {client_description()}")
        runner = stack.enter_context(asyncio.Runner())
        all_variants = stack.enter_context(variants(url, runner))
        measure(all_variants, args.seconds, args.repeat, args.warmup)
        print_table(all_variants, args.seconds, args.repeat)
        by_name = {v.name: v for v in all_variants}
        print_ratios(
            [
                (by_name[f"{api} {name}"], by_name[f"{api} off"])
                for api in ("sync", "async")
                for name in ("prometheus", "opentelemetry", "tracing")
            ]
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
