"""An attacker model's rewrites of replies (`--attacker` of `probe` and `judges`): each reply rewritten once by each
strategy of `grading.strategies`, in a run folder of its own (`attacker/` under the command's --out), so that every
grader tried on a rewrite is tried on the same text, and a resumed run asks the attacker for none of them again.

The attacker is that run's model, as the policy is an eval's: its calls go through the api client with its own
endpoint settings (`attacker_config`: its URL and key, never the grader's), each rewrite is kept in the run's store
as it arrives (in its table of the model's replies, keyed by the rewrite's reply and strategy) and written to
results.jsonl, a line per rewrite naming the
strategy and the attacker (`RewriteRecord`), and usage.json holds what the rewrites cost (as its policy side: the
model the run asked). No grader is asked.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from healthbench.api.client import OPENAI_BASE_URL
from healthbench.data.schema import Message, Row
from healthbench.errors import EndpointUnusable, RequestFailed, RewriteError
from healthbench.grading.strategies import STRATEGIES, rewritten
from healthbench.grading.transforms import Transform
from healthbench.runs.folder import RunFolder
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.records import RewriteRecord, UsageNumbers
from healthbench.runs.runner import ResultSink, RunOutcome, all_or_none
from healthbench.runs.session import Start, Wiring
from healthbench.runs.spec import DataSpec, PolicySpec, ProbeSpec, RunSpec

# The attacker's run folder, under the --out of the command that asked for it.
ATTACK_FOLDER = "attacker"
# Where the attacker's key and endpoint come from when its flag names no endpoint: its own variables, then the
# variables the model under evaluation reads (the grader's are never read: its key is not sent to another model).
ATTACKER_KEY = "HEALTHBENCH_ATTACKER_API_KEY"
ATTACKER_BASE_URL = "HEALTHBENCH_ATTACKER_BASE_URL"
# Whose endpoint an `EndpointUnusable` is about, as the one line that stops a run says it.
ATTACKER = "the attacker's"


def attacker_config(model: str, base_url: str | None, **settings: Any) -> PolicyConfig:
    """The attacker's settings: `model` at `base_url` (else `$HEALTHBENCH_ATTACKER_BASE_URL`, `$OPENAI_BASE_URL`,
    OpenAI), its key from `$HEALTHBENCH_ATTACKER_API_KEY` (else `$OPENAI_API_KEY`), and `settings` as a policy takes
    them (concurrency, attempts, pace store). It is asked as the policy is: the model's own sampling defaults."""
    key = os.environ.get(ATTACKER_KEY) or os.environ.get("OPENAI_API_KEY")
    url = base_url or os.environ.get(ATTACKER_BASE_URL) or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
    given = {name: value for name, value in settings.items() if value is not None}
    return PolicyConfig(model=model, base_url=url, api_key=SecretStr(key) if key else None, **given)


@dataclass(frozen=True)
class Rewrite:
    """One reply to rewrite by one strategy: whose reply it is (a task's, or a meta-eval completion's), the
    conversation it answers, and the reply."""

    prompt_id: str
    completion_id: str
    conversation: tuple[Message, ...]
    reply: str
    strategy: str

    @property
    def key(self) -> str:
        """The rewrite as the store and results.jsonl key it: its strategy and a digest of the reply, its conversation
        and whose it is, so a reply edited since is a reply of its own."""
        facts = [self.prompt_id, self.completion_id, [m.model_dump() for m in self.conversation], self.reply]
        return f"{self.strategy}:{hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]}"

    def messages(self) -> list[Message]:
        """The attacker's request for it (the conversation and the reply, never a rubric)."""
        return STRATEGIES[self.strategy].messages(self.conversation, self.reply)


def rewrites(replies: Iterable[tuple[str, str, Sequence[Message], str]], strategies: Sequence[str]) -> list[Rewrite]:
    """Each reply (prompt id, completion id or "", conversation, reply) by each strategy, a reply with its
    conversation once however often it is given."""
    jobs: dict[str, Rewrite] = {}
    for prompt_id, completion_id, conversation, reply in replies:
        for strategy in strategies:
            job = Rewrite(prompt_id, completion_id, tuple(conversation), reply, strategy)
            jobs.setdefault(job.key, job)
    return list(jobs.values())


def attack_spec(data: DataSpec, attacker: PolicyConfig, strategies: Sequence[str], *, seed: int) -> RunSpec:
    """The spec of an attack run: its data, the attacker as its model and the strategies (a set added later is
    rewritten beside the rest: see `RunSpec.identity`)."""
    return RunSpec(
        command="attack",
        data=data,
        seed=seed,
        policy=PolicySpec.of(attacker),
        probe=ProbeSpec(transforms=list(strategies), attacker=PolicySpec.of(attacker)),
    )


def attack_start(jobs: Sequence[Rewrite], folder: RunFolder) -> Start:
    """The run of an attacker's rewrites: each job's from the store when an earlier session made it, else asked of
    the session's model (the attacker) and kept; results.jsonl gets a line per rewrite as it is done. A reply the
    attacker gives no rewrite of is a `RewriteError` of the run; an endpoint that cannot be used stops it."""

    async def start(wiring: Wiring) -> RunOutcome:
        attacker = wiring.policy
        assert attacker is not None, "an attack run's session is built with the attacker as its model"
        outcome = RunOutcome(metrics=None)
        sink: ResultSink[RewriteRecord] = ResultSink(
            folder, len(jobs), outcome, unit="rewrite", progress=wiring.progress, status=wiring.status
        )

        async def one(job: Rewrite) -> None:
            recorded = wiring.store.sample(job.key, 0)
            if recorded is not None:
                text, usage = recorded
            else:
                try:
                    answer, usage = await attacker.sample(job.messages(), ident=job.key)
                except RequestFailed as exc:
                    error = RewriteError(job.strategy, job.prompt_id, job.completion_id, str(exc))
                    sink.fail(error, job.prompt_id, transform=job.strategy)
                    return
                except EndpointUnusable as exc:
                    raise exc.of(ATTACKER) from None
                text = rewritten(answer)
                wiring.store.put_sample(job.key, 0, text, usage)
                outcome.policy_usage.add(usage)
            sink.add(
                RewriteRecord(
                    key=job.key,
                    prompt_id=job.prompt_id,
                    completion_id=job.completion_id,
                    strategy=job.strategy,
                    attacker=attacker.config.model,
                    text=text,
                    usage=UsageNumbers.of(usage),
                )
            )

        try:
            await all_or_none([one(job) for job in jobs])
        finally:
            sink.close()
        return outcome

    return start


def rewritten_texts(folder: RunFolder) -> Mapping[str, str]:
    """The rewrites an attack run's results.jsonl holds, by their key (`Rewrite.key`)."""
    return {record.key: record.text for record in folder.read_rewrites()}


def strategy_transform(strategy: str, texts: Mapping[str, str]) -> Transform:
    """A probe's transform of a strategy: a task's reply becomes the attacker's rewrite of it, found in `texts` (an
    attack run's, by `Rewrite.key`), which holds one for every reply the probe rewrites."""

    def attacked(reply: str, row: Row) -> str:
        """The reply as the attacker rewrote it by the strategy."""
        return texts[Rewrite(row.prompt_id, "", tuple(row.prompt), reply, strategy).key]

    return Transform(strategy, attacked)
