"""A training step's reward time, as grader rounds: TRL's dataset mode and verl's batch form (every reply of a step
graded at once, in-process, `healthbench.integrations`) beside TRL's environment mode (one `answer` call per
rollout, through `healthbench serve`, as `bench_trl.py` runs it).

Against the fake grader answering in `--latency` seconds (1 s by default, one grader round), with default
settings unless a row says otherwise:

- TRL dataset mode: a real `GRPOTrainer` on the CPU with the tiny local policy, `--steps` steps of 16 completions
  (two tasks of at most 15 rubric items, eight generations each; the tiny policy's eight are one text, which the
  reward grades once and reuses, so a step is at most 30 calls, where it was 240 before the reuse),
  the reward function `integrations.trl.reward_function()`: the seconds TRL waits on it each step. The first step
  is a new key's first (its pace's slow start); the later ones are warm. A second run gives the key's limit
  (`grader_rpm`, `--rpm`), so a new key's pace starts without its slow start.
- verl batch form: `integrations.verl.compute_score_batch` (what verl's batch manager calls), `--steps` batches of
  16 replies (16 tasks), then of 64 replies (64 tasks): with serve's default budget (256 in flight, growing only
  once the key's limits are known, and this fake names none) and with `HEALTHBENCH_GRADER_CONCURRENCY=1024`, which
  fits the batch's items.
- TRL environment mode (`bench_trl.train`): `--env-steps` steps of 8 rollouts of one task, the seconds spent in
  the 8 `answer` calls.

Beside them, the floor: as many requests as a step's calls sent straight to the fake at once (a bare aiohttp
client, no grading), the least a step can take on the machine as loaded now. Each figure is also divided by one
grader round (a request sent to the fake directly, timed here). The rewards of the batch forms are checked against
`healthbench grade`'s for the same replies (run against a second fake without latency, whose verdicts are the
same: they depend on the prompt alone).

Runs in `.venv-clients` (TRL, torch, transformers; `scripts/dev test` makes it):

    .venv-clients/bin/python benchmarks/bench_step_rewards.py [--latency 1] [--steps 3] [--env-steps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench_rewards import one_round
from bench_serve import make_row

from healthbench.testing import GRADER_MARKER, FakeOpenAI
from healthbench.testing.policy import tiny_policy

KEY = "sk-bench-step-rewards"
REPLY = "Rest, drink plenty of fluids, and see a doctor if it is no better in three days."
GENERATIONS = 8
SMALL = 15  # rubric items a task of the TRL rows has at most


def graded(data: Path, pairs: Sequence[tuple[str, str]], grader_url: str, folder: Path) -> dict[tuple[str, str], float]:
    """`healthbench grade`'s score for each (prompt_id, reply), a run per reply of a task."""
    folder.mkdir(parents=True, exist_ok=True)
    scores: dict[tuple[str, str], float] = {}
    rounds: list[dict[str, str]] = []
    for pid, reply in dict.fromkeys(pairs):
        free = next((chosen for chosen in rounds if pid not in chosen), None)
        if free is None:
            free = {}
            rounds.append(free)
        free[pid] = reply
    for n, chosen in enumerate(rounds):
        responses = folder / f"responses{n}.jsonl"
        responses.write_text("".join(json.dumps({"prompt_id": k, "response": v}) + "\n" for k, v in chosen.items()))
        out = folder / f"grade{n}"
        environment = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": KEY}
        command = [sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(responses)]
        command += ["--out", str(out), "--grader-base-url", grader_url, "--no-progress"]
        subprocess.run(command, env=environment, check=True, capture_output=True)
        for line in (out / "results.jsonl").read_text().splitlines():
            record = json.loads(line)
            scores[record["prompt_id"], chosen[record["prompt_id"]]] = record["score"]
    return scores


def timed(func: Any, spent: list[float], seen: list[tuple[list[str], list[Any], list[float | None]]]) -> Any:
    """`func` as TRL calls it, with the seconds each call took and what it saw and gave (same name, still async)."""

    async def healthbench(**kwargs: Any) -> list[float | None]:
        started = time.perf_counter()
        rewards: list[float | None] = await func(**kwargs)
        spent.append(time.perf_counter() - started)
        seen.append((list(kwargs["prompt_id"]), list(kwargs["completions"]), rewards))
        return rewards

    return healthbench


def trl_dataset_mode(
    data: Path, rows: list[dict[str, Any]], folder: Path, steps: int, rpm: float | None = None
) -> dict[str, Any]:
    """`steps` GRPOTrainer steps of 16 completions in dataset mode (the key's limit given as `grader_rpm=rpm`, if
    given); the reward function's seconds each step."""
    datasets, trl = importlib.import_module("datasets"), importlib.import_module("trl")
    from healthbench.integrations.trl import reply_text, reward_function

    # Tasks of at most 15 items: a step of two tasks' 16 completions is then at most 240 calls, within the default
    # budget of 256 (a step past it takes a second round, as the verl rows show).
    chosen = [row for row in rows if len(row["rubrics"]) <= SMALL][: 2 * steps]
    lines = [{"prompt": row["prompt"], "prompt_id": row["prompt_id"]} for row in chosen]
    folder = folder / ("trl" if rpm is None else "trl-rpm")
    folder.mkdir()
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    spent: list[float] = []
    seen: list[tuple[list[str], list[Any], list[float | None]]] = []
    reward = timed(reward_function(data, grader_rpm=rpm), spent, seen)
    args = trl.GRPOConfig(
        output_dir=str(folder / "grpo"),
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=64,
        max_steps=steps,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
    )
    trainer = trl.GRPOTrainer(
        model=str(tiny_policy(folder / "policy", REPLY)),
        args=args,
        train_dataset=datasets.load_dataset("json", data_files=str(path), split="train"),
        reward_funcs=[reward],
    )
    trainer.train()
    items = {row["prompt_id"]: len(row["rubrics"]) for row in rows}
    pairs = [[(pid, reply_text(c)) for pid, c in zip(ids, comps, strict=True)] for ids, comps, _ in seen]
    return {
        "spent": spent,
        # The items graded: a completion the step holds more than once (the tiny policy's are all one text) is
        # graded once, its copies reusing its verdicts.
        "items": [sum(items[pid] for pid, _ in set(step)) for step in pairs],
        "pairs": [pair for step in pairs for pair in step],
        "rewards": [r for _, _, rewards in seen for r in rewards],
    }


def verl_batch(
    rows: list[dict[str, Any]], data: Path, steps: int, budget: int | None, replies: int = 64
) -> dict[str, Any]:
    """`steps` calls of compute_score_batch with `replies` replies (one a task), in a process of its own (its own
    loop, graders and budget, as a verl worker has), with `HEALTHBENCH_GRADER_CONCURRENCY=budget` if given."""
    environment = {**os.environ}
    environment.pop("HEALTHBENCH_GRADER_CONCURRENCY", None)
    if budget is not None:
        environment["HEALTHBENCH_GRADER_CONCURRENCY"] = str(budget)
    chosen = [row["prompt_id"] for row in rows[:replies]]
    program = f"""
import json, sys, time
from healthbench.integrations.verl import compute_score_batch
ids = {chosen!r}
out = []
for step in range({steps}):
    replies = [f"{{REPLY}} (step {{step}}, {{pid}})" for pid in ids]
    started = time.perf_counter()
    scores = compute_score_batch(["healthbench"] * len(ids), replies, ids, [{{"data": {str(data)!r}}}] * len(ids))
    out.append({{"spent": time.perf_counter() - started, "pairs": list(zip(ids, replies)), "rewards": scores}})
print(json.dumps(out))
""".replace("{REPLY}", REPLY)
    found = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True, check=True)
    calls = json.loads(found.stdout.strip().splitlines()[-1])
    items = {row["prompt_id"]: len(row["rubrics"]) for row in rows}
    return {
        "spent": [call["spent"] for call in calls],
        "items": [sum(items[pid] for pid in chosen)] * steps,
        "pairs": [tuple(pair) for call in calls for pair in call["pairs"]],
        "rewards": [r for call in calls for r in call["rewards"]],
    }


def trl_environment_mode(grader_url: str, folder: Path, steps: int) -> list[float]:
    """`bench_trl`'s trainer (8 rollouts of one task a step, through `healthbench serve`): each step's seconds in
    its 8 `answer` calls."""
    from bench_trl import server, train

    rng = random.Random(1)
    data = folder / "env-rows.jsonl"
    data.write_text("".join(json.dumps(make_row(rng, i)) + "\n" for i in range(steps)), encoding="utf-8")
    policy = tiny_policy(folder / "env-policy", REPLY)
    with server(data, grader_url, None) as url:
        return [figures["answer"] for figures in train(url, policy, folder, steps)]


async def floor(grader_url: str, calls: int, rounds: int = 3) -> float:
    """Seconds for `calls` grader requests sent straight to the fake at once on a fresh connection pool, the median
    of `rounds`: the least a step of that many calls can take on this machine as loaded now."""
    import aiohttp

    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": f"{GRADER_MARKER} [5] Says hello"}]}
    times = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def one() -> None:
            async with http.post(f"{grader_url}/chat/completions", json=body) as response:
                await response.read()

        for _ in range(rounds):
            started = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(calls)))
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def check(name: str, result: dict[str, Any], data: Path, folder: Path) -> str:
    """Whether every reward equals `healthbench grade`'s for the same reply (a fake without latency answers it)."""
    with FakeOpenAI(record=False) as fast:
        assert fast.base_url
        expected = graded(data, result["pairs"], fast.base_url, folder / name)
    gaps = [abs(r - expected[tuple(p)]) for p, r in zip(result["pairs"], result["rewards"], strict=True)]
    return (
        f"equal to grade's ({len(gaps)} rewards, largest difference {max(gaps):.1e})"
        if max(gaps) <= 1e-9
        else (f"DIFFERENT from grade's: largest difference {max(gaps):.3g}")
    )


def row_of(name: str, spent: Sequence[float], items: str, round_s: float) -> list[str]:
    first, rest = spent[0], spent[1:]
    warm = statistics.median(rest) if rest else float("nan")
    return [
        name,
        items,
        f"{first:.2f} s ({first / round_s:.2f})",
        f"{warm:.2f} s ({warm / round_s:.2f})",
    ]


def main() -> None:
    """Run every mode against one fake grader and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the fake grader takes to answer")
    parser.add_argument("--steps", type=int, default=3, help="steps of each batch form (the first is cold)")
    parser.add_argument("--rpm", type=float, default=30_000, help="the key's limit a row gives (no slow start)")
    parser.add_argument("--env-steps", type=int, default=2, help="steps of TRL's environment mode (0: none)")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = Path(tempfile.mkdtemp(prefix="bench-step-rewards-"))
    rng = random.Random(0)
    rows = [make_row(rng, i) for i in range(max(64, 2 * args.steps))]
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    table: list[list[str]] = []
    checks: list[str] = []
    with FakeOpenAI(latency=args.latency, record=False) as fake:
        assert fake.base_url
        os.environ.update(HEALTHBENCH_GRADER_BASE_URL=fake.base_url, HEALTHBENCH_GRADER_API_KEY=KEY)
        round_s = asyncio.run(one_round(fake.base_url))
        runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("TRL dataset mode, 16 completions", lambda: trl_dataset_mode(data, rows, folder, args.steps)),
            (
                f"TRL dataset mode, 16 completions, grader_rpm={args.rpm:g} given",
                lambda: trl_dataset_mode(data, rows, folder, args.steps, args.rpm),
            ),
            ("verl batch form, 16 replies, default budget", lambda: verl_batch(rows, data, args.steps, None, 16)),
            ("verl batch form, 64 replies, default budget", lambda: verl_batch(rows, data, args.steps, None)),
            ("verl batch form, 64 replies, budget 1024", lambda: verl_batch(rows, data, args.steps, 1024)),
        ]
        for name, run in runs:
            result = run()
            table.append(row_of(name, result["spent"], "/".join(map(str, result["items"])), round_s))
            checks.append(f"{name}: {check(f'check{len(checks)}', result, data, folder)}")
        for calls in (200, 800):
            spent = [asyncio.run(floor(fake.base_url, calls))] * 2
            table.append(
                row_of(f"floor: {calls} requests sent straight to the fake at once", spent, str(calls), round_s)
            )
        if args.env_steps:
            spent = trl_environment_mode(fake.base_url, folder, args.env_steps)
            table.append(
                row_of("TRL environment mode, 8 rollouts (8 answer calls)", spent, "one task's, 8 times", round_s)
            )
    print(
        f"Reward time per step, fake grader at {args.latency:g} s (one round measured {round_s:.2f} s); in brackets, "
        f"grader rounds; {args.steps} steps of each batch form, {args.env_steps} of the environment mode\n"
    )
    print("| mode | rubric items each step | first step (a new key) | later steps (median) |")
    print("|---|---|---|---|")
    for cells in table:
        print("| " + " | ".join(cells) + " |")
    print()
    for said in checks:
        print(said)


if __name__ == "__main__":
    main()
