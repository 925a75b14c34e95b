"""What grading costs per 1,000 replies, graded per item (the reference's) and per reply, on the sample rows.

Three sets of replies to the sample tasks: the physicians' ideal completions (`grade`, one reply per task), and the
model-written reference completions the physicians of groups 2 and 3 were shown (`baseline --references`, four
replies per task, as repeats or a GRPO group give). Each set is graded by the command with gpt-4.1 against the
fake grader, in both modes, and dry-run. Printed per 1,000 replies: grader calls and prompt tokens (four
characters a token, as the fake counts them); the share of prompt characters a request shares from its start
with the first request of its prompt_cache_key (any length); the cacheable share (prompt tokens read from the
fake's cache: shared starts of 1,024 tokens or more, in steps of 128, as OpenAI caches) beside the hit rate
`--dry-run` assumed; and the dry run's cost at gpt-4.1's list prices, live, with `--no-prompt-cache-key` (no hit)
and with the key (its assumed hits). The fake's verdicts are a few tokens long, real ones about 60: the costs
are the dry run's, whose output estimate is the realistic one.

The fake plays OpenAI's caching with every request of a key on one machine, the best case the key aims at; it is
not a measurement of OpenAI's cache.

    .venv/bin/python benchmarks/bench_cost.py [--data ../shared/data/healthbench_sample.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from healthbench.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
MODES = ("per-item", "per-reply")


def run(command: list[str], url: str, *extra: str) -> tuple[Path, str]:
    """One healthbench process (`command`, data included) against `url`; its output folder and stdout."""
    out = Path(tempfile.mkdtemp(prefix="bench-cost-"))
    full = [sys.executable, "-m", "healthbench", *command, "--out", str(out), "--grader-base-url", url]
    env = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench"}
    done = subprocess.run([*full, "--no-progress", *extra], check=True, capture_output=True, text=True, env=env)
    return out, done.stdout


def common_start(a: str, b: str) -> int:
    """The length of the longest common prefix of two strings."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def shared_share(bodies: list[dict[str, Any]]) -> float:
    """The share of prompt characters each request shares from its start with the first request of its key."""
    by_key: dict[str, list[str]] = defaultdict(list)
    for body in bodies:
        by_key[body["prompt_cache_key"]].append("".join(message["content"] for message in body["messages"]))
    total = sum(len(text) for texts in by_key.values() for text in texts)
    return sum(common_start(texts[0], text) for texts in by_key.values() for text in texts[1:]) / total


def bench(command: list[str], mode: str) -> str:
    """One line of figures: a reply set graded in one mode."""
    calls = ("--grader-calls", mode)
    with FakeOpenAI() as fake:
        assert fake.base_url
        out, _ = run(command, fake.base_url, *calls)
        share = shared_share(fake.bodies)
    grader = json.loads((out / "usage.json").read_text())["whole_run"]["grader"]
    replies = len((out / "results.jsonl").read_text().split("\n")) - 1
    openai = "https://api.openai.com/v1"
    keyed = json.loads(run(command, openai, *calls, "--dry-run", "--json")[1])["grader"]
    unkeyed = json.loads(run(command, openai, *calls, "--dry-run", "--json", "--no-prompt-cache-key")[1])["grader"]
    per = 1000 / replies
    calls, tokens = grader["calls"] * per, grader["prompt_tokens"] * per / 1e6
    cacheable, assumed = (
        grader["cached_prompt_tokens"] / grader["prompt_tokens"],
        keyed["prompt_cache"]["assumed_hit_rate"],
    )
    return (
        f"  {mode:9s} ({replies} replies): {calls:6,.0f} calls, {tokens:5.2f}M prompt tokens; "
        f"shared start {share:5.1%}, cacheable {cacheable:5.1%} (dry run assumed {assumed:5.1%}); dry run cost "
        f"${unkeyed['cost_usd'] * per:6.2f} without the key, ${keyed['cost_usd'] * per:6.2f} with it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    args = parser.parse_args()
    with args.data.open(encoding="utf-8", newline="\n") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    ideal = {
        row["prompt_id"]: data["ideal_completion"]
        for row in rows
        if (data := row.get("ideal_completions_data")) and data.get("ideal_completion")
    }
    responses = Path(tempfile.mkdtemp(prefix="bench-cost-")) / "responses.jsonl"
    responses.write_text("".join(json.dumps({"prompt_id": k, "response": v}) + "\n" for k, v in ideal.items()))
    data = ["--data", str(args.data)]
    sets = {
        "ideal completions, 1 per task": ["grade", *data, "--responses", str(responses)],
        **{
            f"group {group} reference completions, 4 per task": [
                "baseline",
                "--group",
                str(group),
                "--references",
                *data,
            ]
            for group in (2, 3)
        },
    }
    print(f"{len(rows)} tasks from {args.data}; grader gpt-4.1 at its list prices, live; figures per 1,000 replies")
    for name, command in sets.items():
        print(name)
        for mode in MODES:
            print(bench(command, mode), flush=True)


if __name__ == "__main__":
    main()
