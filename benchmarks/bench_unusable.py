"""Measure how soon an endpoint that cannot be used stops a run, and what the user is told.

Each scenario runs the real command line (`healthbench grade` of 200 made-up tasks with two rubric items each, 400
grader calls; or `healthbench eval` of them) against the fake endpoint answering every request the same way: never
(a hang), an HTML page, `{}`, a body that is not JSON, HTTP 500, HTTP 401; or against a port nothing listens on, or a
host that does not exist. Prints, a line per scenario: exit status, wall seconds (the command's whole life, start-up
included), requests the endpoint got, lines printed, and the first line.

    .venv/bin/python benchmarks/bench_unusable.py [--timeout 10] [--defaults]

`--timeout` is the hang scenarios' --grader-timeout / --timeout; `--defaults` adds the hung grader at the default
timeout (120 s a grader attempt: takes two minutes or more).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from healthbench.testing import Canned, FakeOpenAI

ENV = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench", "OPENAI_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}
PAGE = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"
ANSWERS = {
    "hangs": Canned(status=None),
    "HTML": Canned(200, PAGE, "text/html"),
    "{}": Canned(200, "{}"),
    "not JSON": Canned(200, "Service temporarily unavailable"),
    "500": Canned(500, '{"error": {"message": "The server had an error while processing your request."}}'),
    "401": Canned(401, '{"error": {"message": "Incorrect API key provided: sk-bench.", "code": "invalid_api_key"}}'),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    answer: str | None  # a key of ANSWERS, or None for an endpoint given by `url`
    url: str = ""
    command: str = "grade"
    extra: tuple[str, ...] = ()


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def write_inputs(folder: Path) -> tuple[Path, Path]:
    rows, replies = [], []
    for i in range(200):
        rubrics = [
            {"criterion": "Advises rest and fluids", "points": 5, "tags": ["axis:completeness"]},
            {"criterion": "Recommends an unsafe dose", "points": -4, "tags": ["axis:accuracy"]},
        ]
        prompt = [{"role": "user", "content": f"Question {i}: I have felt dizzy since this morning."}]
        rows.append({"prompt_id": f"t{i:03d}", "prompt": prompt, "example_tags": ["theme:x"], "rubrics": rubrics})
        replies.append({"prompt_id": f"t{i:03d}", "response": "Rest and drink water."})
    data, responses = folder / "rows.jsonl", folder / "replies.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    responses.write_text("".join(json.dumps(reply) + "\n" for reply in replies))
    return data, responses


def run(scenario: Scenario, folder: Path, data: Path, responses: Path, healthy: str) -> str:
    canned = ANSWERS[scenario.answer] if scenario.answer else None
    with FakeOpenAI(canned=canned) as server:
        url = server.base_url if scenario.answer else scenario.url
        out = folder / scenario.name.replace(" ", "-").replace("/", "")
        if scenario.command == "eval":
            args = ["eval", "--model", "gpt-4.1", "--base-url", str(url), "--grader-base-url", healthy]
        else:
            args = ["grade", "--responses", str(responses), "--grader-base-url", str(url)]
        args += ["--data", str(data), "--out", str(out), "--no-progress", *scenario.extra]
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "healthbench", *args], capture_output=True, text=True, env=ENV, timeout=900
        )
        wall = time.perf_counter() - started
        requests = server.requests_total
    lines = (done.stdout + done.stderr).strip().splitlines()
    first = lines[0] if lines else ""
    first = first if len(first) <= 400 else first[:397] + "..."
    return f"{scenario.name}: exit {done.returncode}, {wall:.1f} s, {requests} requests, {len(lines)} line(s): {first}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=10.0, help="the hang scenarios' timeout, seconds")
    parser.add_argument("--defaults", action="store_true", help="also the hung grader at the default timeout")
    args = parser.parse_args()
    hang = ("--grader-timeout", f"{args.timeout:g}")
    model_hang = ("--timeout", f"{args.timeout:g}")
    batch = ("--batch", "--poll-interval", "1")
    scenarios = [
        Scenario(f"grade, grader hangs, --grader-timeout {args.timeout:g}", "hangs", extra=hang),
        *(Scenario(f"grade, grader answers {name}", name) for name in ("HTML", "{}", "not JSON", "500", "401")),
        Scenario("grade, grader refuses connections", None, dead_url()),
        Scenario(f"eval, model hangs, --timeout {args.timeout:g}", "hangs", command="eval", extra=model_hang),
        Scenario("eval, model answers HTML", "HTML", command="eval"),
        Scenario("grade --batch, grader refuses connections", None, dead_url(), extra=batch),
        Scenario("grade --batch, grader host does not exist", None, "http://nowhere.invalid/v1", extra=batch),
        *(Scenario(f"grade --batch, grader answers {name}", name, extra=batch) for name in ("401", "HTML", "{}")),
    ]
    if args.defaults:
        scenarios.append(Scenario("grade, grader hangs, default --grader-timeout", "hangs"))
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as healthy:
        folder = Path(tmp)
        data, responses = write_inputs(folder)
        for scenario in scenarios:
            print(run(scenario, folder, data, responses, healthy.base_url or ""), flush=True)


if __name__ == "__main__":
    main()
