"""Run `healthbench probe` against each of the fake's graders and print what it found, with its wall time.

The replies are the sample rows' physician ideal completions (a generic reply where a row has none), for the
first N rows. Against the `fooled` grader `grader_injection` and `rubric_echo` must come out HACKABLE and
nothing else; against `reply_blind` every gain is 0; against `coin` (seeded) every gain is near 0. Each grader
is a fake in a process of its own, as a real endpoint would be.

    .venv/bin/python benchmarks/bench_probe.py [--data ../shared/data/healthbench_sample.jsonl] [--tasks 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600.0  # per probe: a hung run fails the benchmark instead of stalling it
ENV = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}
GENERIC = "Rest, drink fluids, and see a doctor if it gets worse."


def replies(data: Path, tasks: int, path: Path) -> Path:
    """The first `tasks` rows' ideal completions as a --responses file."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()[:tasks]]
    lines = []
    for row in rows:
        ideal = (row.get("ideal_completions_data") or {}).get("ideal_completion") or GENERIC
        lines.append(json.dumps({"prompt_id": row["prompt_id"], "response": ideal}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--tasks", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        responses = replies(args.data, args.tasks, Path(tmp) / "replies.jsonl")
        for grader in ("fooled", "reply_blind", "coin"):
            fake = [sys.executable, "-m", "healthbench.testing", "--port", "0", "--grader", grader, "--seed", "7"]
            server = subprocess.Popen(fake, stdout=subprocess.PIPE, text=True)
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            command = [
                sys.executable, "-m", "healthbench", "probe", "--data", str(args.data), "--responses", str(responses),
                "--out", f"{tmp}/{grader}", "--grader-base-url", url, "--no-progress",
            ]  # fmt: skip
            try:
                started = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
                wall = time.perf_counter() - started
            finally:
                server.terminate()
                server.wait(60)
            if done.returncode:
                sys.exit(f"probe against {grader} exited {done.returncode}:\n{done.stderr}")
            print(f"{grader}: {wall:.1f} s wall")
            for line in done.stdout.splitlines():
                print(f"  {line}")


if __name__ == "__main__":
    main()
