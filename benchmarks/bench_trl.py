"""A step of TRL's GRPOTrainer against `healthbench serve`, on the CPU: where its time goes.

The trainer is docs/integrations.md's recipe (TRL 1.16, `OpenRewardSpec`, `healthbench_answer`, 8 rollouts of one
task a step), its policy the tiny local model of `healthbench.testing.policy` (every reply is a call to
`answer`), its grader the fake answering in `--latency` seconds (1 s by default), the server a process of its
own with default settings. Each rollout slot's calls to the server are timed: `reset` (a session opened and its
prompt fetched) and the `answer` call (the reward). Per step, the rest is generation and the update. Prints the
median over `--steps` steps (the first included: it carries each key's first call) and each step's figures.

Runs in `.venv-clients` (TRL, torch, transformers; `scripts/dev test` makes it). `--src DIR` runs the server
from another source tree, for instance a checkout of an earlier commit, to compare:

    .venv-clients/bin/python benchmarks/bench_trl.py [--latency 1] [--steps 3] [--src ../before/src]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_serve import make_row, served

from healthbench.testing import FakeOpenAI
from healthbench.testing.policy import tiny_policy

REPLY = "Rest, drink plenty of fluids, and see a doctor if it is no better in three days."


@contextmanager
def server(data: Path, grader_url: str, src: Path | None) -> Iterator[str]:
    """`healthbench serve --data DATA` (from `src` if given) with the server's own grader key; its URL."""
    with served(data, grader_url, src, {"HEALTHBENCH_GRADER_API_KEY": "sk-bench-trl"}) as (url, _):
        yield url


class Clock:
    """Seconds spent in the environment's calls during the current step, by kind."""

    def __init__(self) -> None:
        self.spent = {"reset": 0.0, "answer": 0.0}

    def timed(self, kind: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[kind] += time.perf_counter() - started

        return run


def train(url: str, policy: Path, folder: Path, steps: int) -> list[dict[str, float]]:
    """The recipe's trainer for `steps` steps; each step's wall time and its time in `reset` and `answer`."""
    os.environ["OPENREWARD_SESSION_URL"] = url  # TRL's sessions go to the hosted service otherwise
    trl = importlib.import_module("trl")
    transformers = importlib.import_module("transformers")
    spec = importlib.import_module("trl.experimental.openreward").OpenRewardSpec(
        url, env_name="healthbench_answer", split="test", num_tasks=steps
    )
    clock = Clock()
    slots: list[Any] = []

    def environment_factory() -> Any:
        slot = spec.environment_factory()
        slot.reset = clock.timed("reset", slot.reset)
        slot._call_ors_tool = clock.timed("answer", slot._call_ors_tool)  # every tool method calls it
        slots.append(slot)
        return slot

    figures: list[dict[str, float]] = []
    callback: Any = transformers.TrainerCallback

    class Steps(callback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            clock.spent = dict.fromkeys(clock.spent, 0.0)
            self.started = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            figures.append({"step": time.perf_counter() - self.started, **clock.spent})

    args = trl.GRPOConfig(
        output_dir=str(folder / "grpo"),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=1024,
        max_tool_calling_iterations=1,
        max_steps=steps,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
    )
    trainer = trl.GRPOTrainer(
        model=str(policy),
        args=args,
        train_dataset=spec.train_dataset,
        environment_factory=environment_factory,
        reward_funcs=spec.reward_funcs,
        callbacks=[Steps()],
    )
    try:
        trainer.train()
    finally:
        for slot in slots:
            slot._close()
    return figures


def main() -> None:
    """Run the steps and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the fake grader takes to answer")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--src", type=Path, help="run the server from this source tree (an earlier checkout)")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    data = folder / "rows.jsonl"
    rng = random.Random(0)
    rows = [make_row(rng, i) for i in range(args.steps)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    policy = tiny_policy(folder / "policy", REPLY)
    with FakeOpenAI(latency=args.latency, record=False) as fake:
        assert fake.base_url
        with server(data, fake.base_url, args.src) as url:
            figures = train(url, policy, folder, args.steps)
    items = [len(row["rubrics"]) for row in rows]
    print(
        f"TRL GRPOTrainer on the CPU, 8 rollouts of one task a step, tiny local policy; fake grader at "
        f"{args.latency:g} s; {statistics.mean(items):.1f} rubric items a task; server from "
        f"{args.src or 'this tree'}\n"
    )
    print("| step | wall | rewards (8 answer calls) | sessions (8 resets) | generation and update |")
    print("|---|---|---|---|---|")
    rows_out = [*enumerate(figures, 1), ("median", {k: statistics.median(f[k] for f in figures) for k in figures[0]})]
    for name, f in rows_out:
        rest = f["step"] - f["answer"] - f["reset"]
        print(f"| {name} | {f['step']:.2f} s | {f['answer']:.2f} s | {f['reset']:.2f} s | {rest:.2f} s |")


if __name__ == "__main__":
    main()
