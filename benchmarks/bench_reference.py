"""`healthbench grade` beside OpenAI's reference on the same 5,965 grader calls at zero latency: simple-evals'
`HealthBenchEval` (its 120 threads, its `ChatCompletionSampler` for gpt-4.1-2025-04-14, the reply of
bench_grade.py for every task) and `grade` of the same replies, each against a fresh fake grader in a process of
its own, interleaved for `--rounds` rounds. Prints, for each run, wall time, CPU seconds of the whole process
(imports included, both sides) per grader call, and the score, which must be the same.

simple-evals is not part of this repository: give a checkout of it (git clone https://github.com/openai/simple-evals)
and a Python that can run it (a venv with `openai numpy pandas blobfile jinja2 requests tqdm`):

    .venv/bin/python benchmarks/bench_reference.py --simple-evals ../simple-evals \
        --reference-python ../refvenv/bin/python [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_grade import ROOT, start_fake

REPLY = "Please see a doctor if it gets worse."


def reference_child(simple_evals: Path, data: str) -> None:
    """Runs inside the reference's Python: its eval of `data` with the fixed reply, one JSON line of results."""
    # The checkout is imported as the package its modules' relative imports expect.
    home = Path(tempfile.mkdtemp(prefix="bench-reference-"))
    (home / "simple_evals").symlink_to(simple_evals.resolve(), target_is_directory=True)
    sys.path.insert(0, str(home))
    from simple_evals import healthbench_eval as hb  # type: ignore[import-not-found]
    from simple_evals.sampler.chat_completion_sampler import (  # type: ignore[import-not-found]
        OPENAI_SYSTEM_MESSAGE_API,
        ChatCompletionSampler,
    )
    from simple_evals.types import SamplerBase, SamplerResponse  # type: ignore[import-not-found]

    class FixedReply(SamplerBase):  # type: ignore[misc]
        def __call__(self, messages: list[dict[str, str]]) -> SamplerResponse:
            return SamplerResponse(
                response_text=REPLY, response_metadata={"usage": None}, actual_queried_message_list=messages
            )

    hb.INPUT_PATH = data  # blobfile reads a local path as it reads a URL
    grader = ChatCompletionSampler(
        model="gpt-4.1-2025-04-14", system_message=OPENAI_SYSTEM_MESSAGE_API, max_tokens=2048
    )
    calls = [0]
    create = grader.client.chat.completions.create

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return create(*args, **kwargs)

    grader.client.chat.completions.create = counted
    result = hb.HealthBenchEval(grader_model=grader, n_threads=120)(FixedReply())
    print(json.dumps({"calls": calls[0], "score": result.score}))


def _child(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the whole process) and stdout of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out.stdout


def run_reference(args: argparse.Namespace) -> tuple[float, float, int, float]:
    server, base_url = start_fake(0.0)
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-bench"}
    command = [str(args.reference_python), __file__, "--child", str(args.simple_evals), str(args.data)]
    try:
        wall, cpu, out = _child(command, env)
    finally:
        server.terminate()
        server.wait()
    found = json.loads(out.strip().splitlines()[-1])
    return wall, cpu, found["calls"], found["score"]


def run_grade(args: argparse.Namespace, responses: Path) -> tuple[float, float, int, float]:
    server, base_url = start_fake(0.0)
    out = Path(tempfile.mkdtemp(prefix="bench-reference-"))
    command = [sys.executable, "-m", "healthbench", "grade", "--data", str(args.data), "--responses", str(responses)]
    command += ["--out", str(out), "--grader-base-url", base_url, "--concurrency", "100", "--no-progress"]
    try:
        wall, cpu, _ = _child(command, {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench"})
    finally:
        server.terminate()
        server.wait()
    calls = json.loads((out / "usage.json").read_text())["this_session"]["grader"]["calls"]
    return wall, cpu, calls, json.loads((out / "metrics.json").read_text())["score"]


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        reference_child(Path(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simple-evals", type=Path, required=True, help="a checkout of openai/simple-evals")
    parser.add_argument("--reference-python", type=Path, required=True, help="a Python that can run it")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    responses = Path(tempfile.mkdtemp(prefix="bench-reference-")) / "responses.jsonl"
    with args.data.open(encoding="utf-8", newline="\n") as rows:
        ids = [json.loads(line)["prompt_id"] for line in rows if line.strip()]
    responses.write_text("".join(json.dumps({"prompt_id": i, "response": REPLY}) + "\n" for i in ids))
    for number in range(args.rounds):
        for name in ("reference", "grade"):
            load = os.getloadavg()[0]
            wall, cpu, calls, score = run_reference(args) if name == "reference" else run_grade(args, responses)
            print(
                f"round {number + 1} {name:9s} (load {load:4.1f}): wall {wall:6.2f} s, {cpu / calls * 1000:.3f} ms CPU "
                f"per grader call ({cpu:.2f} s, {calls} calls), score {score!r}",
                flush=True,
            )


if __name__ == "__main__":
    main()
