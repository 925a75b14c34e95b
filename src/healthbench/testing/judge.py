"""What a vLLM server answers besides completions, as the fake plays a self-hosted judge: ``GET /health`` (200, an
empty body), ``GET /v1/models`` (the served model, in OpenAI's list shape with vLLM's extra fields) and
``GET /metrics`` (Prometheus text).

``/metrics`` carries vLLM's names (``vllm/v1/metrics/loggers.py``), labelled ``model_name`` and ``engine`` as vLLM
labels them: the scheduler's gauges ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` (the fake has no KV cache: it reads the share of ``max_running`` in service, 0 without
one) and the prefix cache's counters in tokens, ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (see ``prefixes``). Beside them, the fake's own counters, which no vLLM has, under
``healthbench_fake_``: the requests received (every model request, refused ones too), the answers by kind, the
prefix cache's queries and hits in requests, and the peaks since the last reset (requests in the server at once,
running, waiting), so that a benchmark in another process reads them over HTTP.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Protocol

from aiohttp import web

from healthbench.testing.capacity import Capacity
from healthbench.testing.prefixes import PrefixCache

__all__ = ["JudgeServer", "add_judge_routes", "metrics_text"]

_ENGINE = "0"  # vLLM's engine label: one engine core per server here


class JudgeServer(Protocol):
    """What the routes read of their server (``FakeOpenAI``)."""

    served_model_name: str
    models: tuple[str, ...]
    models_listed: int
    capacity: Capacity
    prefix_cache: PrefixCache
    requests_total: int
    responses_by_kind: Counter[str]
    max_in_flight: int


def _label(value: str) -> str:
    """A label value escaped as Prometheus' text format wants it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(server: JudgeServer) -> str:
    """The server's metrics in Prometheus' text format (version 0.0.4), read at this moment."""
    model = f'model_name="{_label(server.served_model_name)}"'
    engine = f'{model},engine="{_ENGINE}"'
    capacity, cache = server.capacity, server.prefix_cache
    usage = 0.0 if capacity.max_running is None else capacity.running / capacity.max_running
    # Each family: its name, type, help, and samples as (labels, value); a counter's samples are named NAME_total.
    families: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [(engine, capacity.running)],
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [(engine, capacity.waiting)],
        ),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [(engine, usage)]),
        (
            "vllm:prefix_cache_queries",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(engine, cache.query_tokens)],
        ),
        (
            "vllm:prefix_cache_hits",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(engine, cache.hit_tokens)],
        ),
        (
            "healthbench_fake_requests",
            "counter",
            "Model requests received, refused ones included.",
            [(model, server.requests_total)],
        ),
        (
            "healthbench_fake_responses",
            "counter",
            "Model requests by the answer they were given (ok, an injected fault, refused...).",
            [(f'{model},kind="{_label(kind)}"', n) for kind, n in sorted(server.responses_by_kind.items())],
        ),
        (
            "healthbench_fake_prefix_cache_queries",
            "counter",
            "Requests that came into service.",
            [(model, cache.queries)],
        ),
        (
            "healthbench_fake_prefix_cache_hits",
            "counter",
            "Requests whose shared prefix this server had served before.",
            [(model, cache.hits)],
        ),
        (
            "healthbench_fake_peak_in_flight",
            "gauge",
            "Most model requests in the server at once (running, waiting, or being read).",
            [(model, server.max_in_flight)],
        ),
        (
            "healthbench_fake_peak_running",
            "gauge",
            "Most requests in service at once.",
            [(model, capacity.peak_running)],
        ),
        ("healthbench_fake_peak_waiting", "gauge", "Most requests waiting at once.", [(model, capacity.peak_waiting)]),
    ]
    lines = []
    for name, kind, help_text, samples in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        sample = name + ("_total" if kind == "counter" else "")
        lines += [f"{sample}{{{labels}}} {float(value)!r}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def add_judge_routes(app: web.Application, server: JudgeServer) -> None:
    """Serve ``/health``, ``/v1/models`` and ``/metrics`` for ``server`` on ``app``."""

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(_: web.Request) -> web.Response:
        server.models_listed += 1
        cards = [
            {
                "id": name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": name,
                "parent": None,
            }
            for name in server.models
        ]
        return web.json_response({"object": "list", "data": cards})

    async def metrics(_: web.Request) -> web.Response:
        # Prometheus' text format's own content type, as prometheus_client serves it.
        return web.Response(
            body=metrics_text(server).encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    app.router.add_get("/health", health)
    for root in ("/v1", ""):
        app.router.add_get(f"{root}/models", models)
    app.router.add_get("/metrics", metrics)
