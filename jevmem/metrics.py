"""Prometheus metrics (prometheus-client) for the API and the workers.

Every metric lives in :data:`REGISTRY` (not the client's global one, so an embedding application
keeps its own). Labels take values from small fixed sets only: stage names, route templates,
status codes, dead-letter origins, partitions of a topic. Tenant and conversation ids are never
labels (unbounded cardinality, and they would leak tenants to whoever scrapes).

``install()`` registers the Prometheus observer with :mod:`topology.observe` (idempotent);
``serve(port, ready)`` starts a worker's scrape endpoint, with its readiness check at ``/ready``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from fastapi import FastAPI, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST, ThreadingWSGIServer, make_wsgi_app
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topology import observe

REGISTRY = CollectorRegistry(auto_describe=True)
CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

ACCEPTED = Counter("jevmem_observations_accepted", "Observations accepted (written, or acknowledged by the broker).",
                   registry=REGISTRY)
DEAD_LETTERS = Counter("jevmem_dead_letters", "Inputs rejected to the dead letters, by origin.", ["origin"],
                       registry=REGISTRY)
STAGE_SECONDS = Histogram("jevmem_stage_seconds", "Wall time of one write-path or read-path stage call.", ["stage"],
                          buckets=_SECONDS, registry=REGISTRY)
CONTROLLER_PER_WRITE = Histogram(
    "jevmem_controller_requests_per_write", "System One requests per observation, per write batch.",
    buckets=(0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8), registry=REGISTRY)
CONTROLLER_PER_QUERY = Histogram("jevmem_controller_requests_per_query", "System One requests per query.",
                                 buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15), registry=REGISTRY)
QUERY_SECONDS = Histogram("jevmem_query_seconds", "Retrieval latency of one query.", buckets=_SECONDS,
                          registry=REGISTRY)
STORE_ERRORS = Counter("jevmem_store_errors", "Store or broker failures seen by a caller, by kind.", ["kind"],
                       registry=REGISTRY)
HTTP_REQUESTS = Counter("jevmem_http_requests", "HTTP requests by route template and status.",
                        ["method", "route", "status"], registry=REGISTRY)
HTTP_SECONDS = Histogram("jevmem_http_request_seconds", "HTTP request latency by route template.",
                         ["method", "route"], buckets=_SECONDS, registry=REGISTRY)
CONSUMER_LAG = Gauge("jevmem_consumer_lag", "Records behind the log end, per assigned partition.",
                     ["topic", "partition"], registry=REGISTRY)
PARTITION_STALLED = Gauge(
    "jevmem_partition_stalled_seconds",
    "Seconds since a stalled partition's batch first failed (a transient or configuration error retried at least "
    "streams.stalls.STALL_AFTER_ATTEMPTS times); absent when the partition moves.", ["topic", "partition"],
    registry=REGISTRY)

FORGET_UNPURGED = Gauge(
    "jevmem_forget_unpurged_oldest_seconds",
    "Seconds since the oldest forget applied by this worker and not yet purged from the stores' files was applied "
    "(0: none waits); streams.purging.PURGE_DEADLINE_S is the promise.", registry=REGISTRY)

FORGOTTEN_RECORDS = Counter("jevmem_forgotten_records",
                            "Sealed input records skipped because a forget destroyed their key, by origin.", ["origin"],
                            registry=REGISTRY)

_COUNTERS = {"dead_letter": DEAD_LETTERS, "store_error": STORE_ERRORS,  # labelled; "accepted" is not
             "forgotten_record": FORGOTTEN_RECORDS}
_MEASURES = {"controller_requests_per_write": CONTROLLER_PER_WRITE,
             "controller_requests_per_query": CONTROLLER_PER_QUERY}


class PrometheusObserver:
    """:class:`topology.observe.Observer` feeding :data:`REGISTRY`."""

    def stage(self, name: str, seconds: float) -> None:
        (QUERY_SECONDS if name == "query" else STAGE_SECONDS.labels(name)).observe(seconds)

    def count(self, name: str, value: float, label: str) -> None:
        if name == "accepted":
            ACCEPTED.inc(value)
        elif name in _COUNTERS:
            _COUNTERS[name].labels(label or "unknown").inc(value)

    def measure(self, name: str, value: float) -> None:
        metric = _MEASURES.get(name)
        if metric is not None:
            metric.observe(value)


_OBSERVER = PrometheusObserver()


def install() -> None:
    """Feed :data:`REGISTRY` from :mod:`topology.observe` (once per process)."""
    if _OBSERVER not in observe.OBSERVERS:
        observe.OBSERVERS.append(_OBSERVER)


def exposition() -> bytes:
    """The registry in Prometheus text format."""
    return generate_latest(REGISTRY)


def report_stalled(stalled: Iterable[tuple[tuple[str, int], float]]) -> None:
    """Set :data:`PARTITION_STALLED` to exactly the ``((topic, partition), seconds)`` given."""
    PARTITION_STALLED.clear()
    for (topic, partition), seconds in stalled:
        PARTITION_STALLED.labels(topic, str(partition)).set(round(seconds, 1))


Readiness = Callable[[], dict[str, Any]]
"""A worker's readiness: ``{"ready": bool, ...}`` (the rest says why not)."""


def serve(port: int, host: str = "0.0.0.0", ready: Readiness | None = None) -> None:
    """Serve a worker's ``/metrics`` on ``port`` (a daemon thread), and ``/ready``: 200 with
    ``ready()``'s JSON while it says ready, 503 with it otherwise (200 when ``ready`` is None)."""
    install()
    metrics_app = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/ready":
            state = ready() if ready is not None else {"ready": True}
            body = json.dumps(state).encode()
            start_response("200 OK" if state.get("ready") else "503 Service Unavailable",
                           [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        return metrics_app(environ, start_response)

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes and probes are not logged."""

    httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True, name="metrics").start()


class _CountRequests:
    """Pure ASGI middleware: per HTTP request, ``jevmem_http_requests_total`` by method, route
    template and status, and ``jevmem_http_request_seconds`` until the response is sent (500 when
    the app raised before answering). It passes messages through untouched, so a request costs
    no task, stream or copy of the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_SECONDS.labels(method, route).observe(time.perf_counter() - t0)


def attach(app: FastAPI) -> None:
    """Add ``GET /metrics`` (no key: it carries no tenant data) and per-route request metrics to
    an API app."""
    install()

    app.add_middleware(_CountRequests)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(exposition(), media_type=CONTENT_TYPE)
