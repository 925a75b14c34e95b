"""A fake OpenAI endpoint for tests and benchmarks: Chat Completions, the Responses API, files and batches.

It is a real HTTP server on loopback, so clients exercise their actual networking, retry and
parsing code, and it refuses the parameters OpenAI refuses. Run it standalone with
``python -m healthbench.testing --port 8000``.
"""

from healthbench.testing.batch import FakeBatchAPI
from healthbench.testing.canned import Canned
from healthbench.testing.cli import main
from healthbench.testing.graders import GRADERS, fake_verdict
from healthbench.testing.hosts import THINKING, Host
from healthbench.testing.replies import GRADER_MARKER, policy_reply, prompt_verdict, verdict_reply
from healthbench.testing.server import FAULT_KINDS, FakeOpenAI

__all__ = [
    "FAULT_KINDS",
    "GRADERS",
    "GRADER_MARKER",
    "THINKING",
    "Canned",
    "FakeBatchAPI",
    "FakeOpenAI",
    "Host",
    "fake_verdict",
    "main",
    "policy_reply",
    "prompt_verdict",
    "verdict_reply",
]
