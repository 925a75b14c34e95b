"""The fake endpoint as a self-hosted vLLM judge: a capacity that queues what it cannot serve, per-server prefix-cache
counters, and vLLM's `/health`, `/v1/models` and `/metrics`, over real HTTP on loopback.

States such as "N running, k waiting" are reached with the service paused and waited for (bounded), never timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

import healthbench
from healthbench.cli import main
from healthbench.grading.prompt import grader_prompt
from healthbench.testing import FakeOpenAI
from healthbench.testing.prefixes import BLOCK_TOKENS
from healthbench.testing.replies import estimate_tokens
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows

# A sample line of Prometheus' text format: a name, labels, a value.
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')
_PATIENCE = 30.0  # seconds a test waits for a state the server must reach


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus' text format, read strictly: each family's HELP and TYPE before its samples, every sample line
    well formed, a counter's samples ending in `_total`. Samples by name and labels."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    family, kind = None, None
    assert text.endswith("\n")
    for line in text.removesuffix("\n").split("\n"):
        if line.startswith("# HELP "):
            family, kind = line.split(" ")[2], None
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == family and kind in ("gauge", "counter")
        else:
            match = _SAMPLE.match(line)
            assert match is not None, line
            name, labels, value = match.groups()
            assert family is not None and kind is not None
            assert name == (family + "_total" if kind == "counter" else family)
            samples[(name, frozenset(_LABEL.findall(labels)))] = float(value)
    return samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    [found] = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    return found


def root(fake: FakeOpenAI) -> str:
    assert fake.base_url
    return fake.base_url.removesuffix("/v1")


def judge_body(conversation: str, item: str) -> dict[str, Any]:
    """A grader request as `grade` sends it: the reference's system message, then the item's grader prompt."""
    return {
        "model": "fake-judge",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": grader_prompt(conversation, item)},
        ],
    }


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(url + "/chat/completions", json=body) as response:
        return response.status, await response.json()


async def metrics(session: aiohttp.ClientSession, fake: FakeOpenAI) -> dict[tuple[str, frozenset[Any]], float]:
    async with session.get(root(fake) + "/metrics") as response:
        assert response.status == 200
        return parse_metrics(await response.text())


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll `check` until it holds (bounded: the state must come, only its moment is the machine's)."""
    async with asyncio.timeout(_PATIENCE):
        while not await check():
            await asyncio.sleep(0.01)


class Paused:
    """A client of a fake whose service is paused (`FakeOpenAI.pause`): it sends requests and reads the gauges."""

    def __init__(self, fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
        self.fake = fake
        self.session = session

    def send(self, body: dict[str, Any]) -> asyncio.Future[tuple[int, Any]]:
        """Send `body` and go on: its status and answer, once it is answered."""
        assert self.fake.base_url
        return asyncio.ensure_future(post(self.session, self.fake.base_url, body))

    async def reach(self, running: int, waiting: int) -> None:
        """Wait until the server's /metrics reads so many running and waiting."""

        async def reads() -> bool:
            samples = await metrics(self.session, self.fake)
            return (value(samples, "vllm:num_requests_running"), value(samples, "vllm:num_requests_waiting")) == (
                running,
                waiting,
            )

        await until(reads)


def paused(fake: FakeOpenAI, scenario: Callable[[Paused], Awaitable[None]]) -> None:
    """Pause `fake`'s service and run `scenario` (which resumes it) with a client of its own."""
    fake.pause()

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            await scenario(Paused(fake, session))

    asyncio.run(run())


def test_capacity_serves_so_many_at_once_and_queues_the_rest() -> None:
    capacity, more = 3, 4
    answers: list[tuple[int, Any]] = []

    async def scenario(client: Paused) -> None:
        bodies = [judge_body(f"user: question {i}", f"[5] item {i}") for i in range(capacity + more)]
        sent = [client.send(body) for body in bodies]
        await client.reach(capacity, more)
        assert value(await metrics(client.session, client.fake), "vllm:kv_cache_usage_perc") == 1.0
        client.fake.resume()
        answers.extend(await asyncio.gather(*sent))
        await client.reach(0, 0)

    with FakeOpenAI(max_running=capacity) as fake:
        paused(fake, scenario)
        assert [status for status, _ in answers] == [200] * (capacity + more)
        assert all(a["choices"][0]["message"]["content"].startswith("```json") for _, a in answers)
        assert (fake.capacity.peak_running, fake.capacity.peak_waiting) == (capacity, more)
        assert fake.max_in_flight == capacity + more
        assert fake.responses_by_kind == {"ok": capacity + more}


def test_the_queue_is_first_in_first_out() -> None:
    served: list[str] = []

    def note(body: dict[str, Any]) -> None:
        served.append(body["messages"][-1]["content"])

    async def scenario(client: Paused) -> None:
        sent = []
        for i in range(3):
            sent.append(client.send({"model": "m", "messages": [{"role": "user", "content": str(i)}]}))
            # Each in the server before the next is sent: the first in service, the others waiting.
            await client.reach(1, i)
        client.fake.resume()
        assert [status for status, _ in await asyncio.gather(*sent)] == [200] * 3

    with FakeOpenAI(max_running=1, respond=note) as fake:
        paused(fake, scenario)
    assert served == ["0", "1", "2"]


def test_without_a_capacity_nothing_waits() -> None:
    async def scenario(client: Paused) -> None:
        sent = [client.send(judge_body(f"user: q{i}", "[1] x")) for i in range(20)]
        await client.reach(20, 0)
        assert value(await metrics(client.session, client.fake), "vllm:kv_cache_usage_perc") == 0.0
        client.fake.resume()
        await asyncio.gather(*sent)

    with FakeOpenAI() as fake:
        paused(fake, scenario)
        assert (fake.capacity.peak_running, fake.capacity.peak_waiting) == (20, 0)


def test_a_replys_items_miss_once_then_hit() -> None:
    conversation = "user: I have had a cough for a week.\n\nassistant: Rest, fluids, and see a doctor if it lasts."
    items = [f"[{i}] Mentions point {i}" for i in range(1, 6)]
    with FakeOpenAI() as fake:
        assert fake.base_url
        url = fake.base_url

        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                # One after another, then a second reply's items all at once: one miss each, whatever the order.
                for item in items:
                    await post(session, url, judge_body(conversation, item))
                await asyncio.gather(*(post(session, url, judge_body("user: other", item)) for item in items))
                samples = await metrics(session, fake)
                assert value(samples, "healthbench_fake_prefix_cache_queries_total") == 10
                assert value(samples, "healthbench_fake_prefix_cache_hits_total") == 8
                assert value(samples, "vllm:prefix_cache_queries_total") == fake.prefix_cache.query_tokens
                assert value(samples, "vllm:prefix_cache_hits_total") == fake.prefix_cache.hit_tokens

        asyncio.run(run())
        cache = fake.prefix_cache
        assert (cache.queries, cache.hits) == (10, 8)
        expected_queries = expected_hits = 0
        for shared in (conversation, "user: other"):
            for n, item in enumerate(items):
                body = judge_body(shared, item)
                chars = sum(len(m["content"]) for m in body["messages"])
                expected_queries += estimate_tokens(chars)
                head = "You are a helpful assistant." + grader_prompt(shared, item).split("# Rubric item")[0]
                expected_hits += 0 if n == 0 else len(head) // 4 // BLOCK_TOKENS * BLOCK_TOKENS
        assert (cache.query_tokens, cache.hit_tokens) == (expected_queries, expected_hits)
        assert 0 < cache.hit_tokens < cache.query_tokens
        fake.reset()
        assert (fake.prefix_cache.queries, fake.prefix_cache.hits, fake.prefix_cache.hit_tokens) == (0, 0, 0)


def test_grade_hits_every_item_but_each_replys_first(tmp_path: Path, fake: FakeOpenAI) -> None:
    """The real grader's prompts (system message, template, conversation) recognised: one miss per reply."""
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = write_jsonl(
        tmp_path / "replies.jsonl",
        [{"prompt_id": r["prompt_id"], "response": f"Reply {i}."} for i, r in enumerate(rows)],
    )
    assert fake.base_url
    result = CliRunner().invoke(
        main,
        [
            *("grade", "--data", str(data), "--responses", str(replies), "--out", str(tmp_path / "out")),
            *("--grader-base-url", fake.base_url, "--no-progress"),
        ],
        env={"HEALTHBENCH_GRADER_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/never-used"},
    )
    assert result.exit_code == 0, result.output
    calls = sum(len(r["rubrics"]) for r in rows)
    # A conversation holding the rubric item's placeholder gets each item substituted into it too, as the reference
    # does: its items' prompts differ before the rubric item, so none of them hits.
    spliced = [r for r in rows if "<<rubric_item>>" in json.dumps(r["prompt"])]
    assert 0 < len(spliced) < len(rows)
    hits = sum(len(r["rubrics"]) - 1 for r in rows if r not in spliced)
    assert fake.requests_total == calls
    assert (fake.prefix_cache.queries, fake.prefix_cache.hits) == (calls, hits)


def test_refused_requests_take_no_slot_and_query_nothing() -> None:
    with FakeOpenAI(max_running=1) as fake:
        assert fake.base_url
        url = fake.base_url

        async def run() -> list[int]:
            async with aiohttp.ClientSession() as session:
                bad = {"model": "o3", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
                return [(await post(session, url, bad))[0] for _ in range(3)]

        assert asyncio.run(run()) == [400] * 3
        assert (fake.prefix_cache.queries, fake.capacity.peak_running, fake.requests_total) == (0, 0, 3)


def test_health_models_and_metrics_as_vllm_serves_them() -> None:
    name = 'judge "q"\\32b'
    with FakeOpenAI(served_model_name=name, max_running=8) as fake:

        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                async with session.get(root(fake) + "/health") as response:
                    assert (response.status, await response.read()) == (200, b"")
                async with session.get(root(fake) + "/v1/models") as response:
                    models = await response.json()
                assert models["object"] == "list"
                [card] = models["data"]
                assert (card["id"], card["object"], card["owned_by"]) == (name, "model", "vllm")
                assert isinstance(card["created"], int)
                assert fake.base_url
                await post(session, fake.base_url, judge_body("user: hi", "[1] greets"))
                async with session.get(root(fake) + "/metrics") as response:
                    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    samples = parse_metrics(await response.text())
                vllm_labels = {"model_name": name.replace("\\", "\\\\").replace('"', '\\"'), "engine": "0"}
                for metric in (
                    "vllm:num_requests_running",
                    "vllm:num_requests_waiting",
                    "vllm:kv_cache_usage_perc",
                    "vllm:prefix_cache_queries_total",
                    "vllm:prefix_cache_hits_total",
                ):
                    value(samples, metric, **vllm_labels)
                assert value(samples, "healthbench_fake_requests_total") == 1
                assert value(samples, "healthbench_fake_responses_total", kind="ok") == 1
                assert value(samples, "healthbench_fake_peak_in_flight") == 1
                assert value(samples, "healthbench_fake_peak_running") == 1
                assert value(samples, "healthbench_fake_peak_waiting") == 0
                # Not model requests: the GETs leave the counters alone.
                assert fake.requests_total == 1

        asyncio.run(run())


def test_invalid_judge_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_running"):
        FakeOpenAI(max_running=0)
    with pytest.raises(ValueError, match="served_model_name"):
        FakeOpenAI(served_model_name="")


def test_main_serves_a_judge_with_its_flags_and_all_the_files_it_may() -> None:
    """`--max-running` and `--served-model-name` reach the server, and the process may hold as many files open as
    its hard limit allows (a soft limit of 1,024 would refuse a judge's 1,025th connection)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit on open files here is {hard}: nothing to raise")
    src = str(Path(healthbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = ["--port", "0", "--max-running", "2", "--served-model-name", "qwen3-judge"]
    # Started with a soft limit of 256 (the hard one as it is), by the shell that execs it.
    command = ["sh", "-c", 'ulimit -Sn 256 && exec "$0" "$@"', sys.executable, "-m", "healthbench.testing", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            limits = Path(f"/proc/{proc.pid}/limits").read_text()
            [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
            expected = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
            assert line.split()[3] in (expected, str(1 << 20))

            async def run() -> None:
                async with aiohttp.ClientSession() as session:
                    async with session.get(base_url + "/models") as response:
                        assert (await response.json())["data"][0]["id"] == "qwen3-judge"
                    async with session.get(base_url.removesuffix("/v1") + "/metrics") as response:
                        text = await response.text()
                    assert 'vllm:kv_cache_usage_perc{model_name="qwen3-judge",engine="0"} 0.0' in text.split("\n")

            asyncio.run(run())
        finally:
            proc.terminate()
            proc.wait(timeout=10)
