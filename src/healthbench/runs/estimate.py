"""What `--dry-run` says of a run before anything is sent: its calls and tokens, estimated from the sizes of
its prompts, their cost live and in batch (`pricing`), and the least wall time under the rate limits: those
given, else, at OpenAI's own endpoint, a new account's; another endpoint's limits are not guessed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from healthbench.api.client import OPENAI_BASE_URL
from healthbench.api.endpoint import EndpointSettings, is_openai
from healthbench.api.ratesignals import DEFAULT_OUTPUT_CAP
from healthbench.api.wire import Shape, Usage
from healthbench.data.schema import Message
from healthbench.grading.prompt import TEMPLATE
from healthbench.grading.settings import GraderConfig
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import Price, cost

# Rough sizes for the estimate: four characters a token, a typical reply, a typical verdict.
CHARS_PER_TOKEN = 4.0
REPLY_TOKENS = 500
VERDICT_TOKENS = 60
# The grader's system message and chat framing, in tokens.
FRAMING_TOKENS = 20
# A reasoning grader's thinking per verdict, by effort (None: the model's default, medium): rough guesses for
# a short yes-or-no judgement, not measurements; the run's usage.json has the real numbers.
REASONING_TOKENS: dict[str | None, int] = {"minimal": 0, "low": 150, "medium": 500, None: 500, "high": 1500}


@dataclass
class Estimate:
    """Expected calls and tokens of a run before it starts."""

    policy: Usage
    grader: Usage


def _tokens(chars: int) -> int:
    return int(chars / CHARS_PER_TOKEN) + 1


class Unit(NamedTuple):
    """One sample to estimate: its conversation, its reply (None: sampled from the policy) and the rubric
    criteria it is graded against, one grader call each."""

    prompt: Sequence[Message]
    reply: str | None
    criteria: Sequence[str]


def estimate(units: Iterable[Unit], *, system_message: str | None = None, grader: Shape | None = None) -> Estimate:
    """Calls and tokens for sampling the replies not given and grading every unit; a reasoning grader
    (`grader` shape) also thinks, by a rough figure per effort, billed as output."""
    thinking = REASONING_TOKENS[grader.effort] if grader is not None and grader.reasoning else 0
    policy, graded = Usage(), Usage()
    system = len(system_message or "")
    for unit in units:
        conversation = sum(len(m.role) + len(m.content) + 4 for m in unit.prompt) + system
        if unit.reply is None:
            policy.calls += 1
            policy.prompt_tokens += _tokens(conversation)
            policy.completion_tokens += REPLY_TOKENS
        reply = REPLY_TOKENS * CHARS_PER_TOKEN if unit.reply is None else len(unit.reply)
        for criterion in unit.criteria:
            prompt = len(TEMPLATE) + conversation + reply + len(criterion) + 8
            graded.calls += 1
            graded.prompt_tokens += _tokens(int(prompt)) + FRAMING_TOKENS
            graded.completion_tokens += VERDICT_TOKENS + thinking
            graded.reasoning_tokens += thinking
    return Estimate(policy, graded)


def estimate_report(guess: Estimate, prices: Mapping[str, Price], grader_model: str, policy_model: str | None) -> Any:
    """What `--dry-run` prints: calls, tokens and USD per side at live and batch prices, and the totals
    (None where a model has no price)."""

    def side(usage: Usage, model: str) -> dict[str, Any]:
        return usage.as_dict() | {
            "model": model,
            "cost_usd": cost(usage, model, prices, batch=False),
            "batch_cost_usd": cost(usage, model, prices, batch=True),
        }

    sides = {"grader": side(guess.grader, grader_model)}
    if policy_model is not None:
        sides = {"policy": side(guess.policy, policy_model)} | sides

    def total(key: str) -> float | None:
        costs = [s[key] for s in sides.values()]
        return None if None in costs else sum(costs)

    return sides | {"total_cost_usd": {"live": total("cost_usd"), "batch": total("batch_cost_usd")}}


# What `--dry-run` assumes at OpenAI's own endpoint when no limit is given: usage tier 1 for gpt-4.1, a new paying
# account's. Any other endpoint (a local server, a gateway, another provider) has limits of its own, or none.
DEFAULT_RPM, DEFAULT_TPM = 500.0, 30_000.0
DEFAULT_LIMITS = "default: OpenAI usage tier 1 for gpt-4.1"
NO_LIMITS = "none known"


@dataclass(frozen=True)
class Load:
    """One client's share of a run, for the wall-time estimate: its key (endpoint and key, as a digest), its
    calls, their tokens as a TPM limit counts them (prompts plus output caps), the limits given for it, and its
    endpoint."""

    key: str
    calls: int
    tokens: int
    rpm: float | None = None
    tpm: float | None = None
    base_url: str = OPENAI_BASE_URL


def wall_time(loads: Mapping[str, Load]) -> dict[str, Any]:
    """`--dry-run`'s wall time: the loads on one key add up under its limits (the first given of them), and
    keys run side by side, so the slowest sets the time. A key with no limit known bounds nothing: `seconds`
    is the slowest of the others, None when no key has a limit known."""
    groups: dict[str, list[str]] = {}
    for name, load in loads.items():
        groups.setdefault(load.key, []).append(name)
    keys: dict[str, dict[str, Any]] = {}
    for names in groups.values():
        members = [loads[name] for name in names]
        rpm = next((m.rpm for m in members if m.rpm is not None), None)
        tpm = next((m.tpm for m in members if m.tpm is not None), None)
        calls, tokens = sum(m.calls for m in members), sum(m.tokens for m in members)
        base_url = members[0].base_url
        paced = paced_seconds(calls, tokens, rpm, tpm, openai=is_openai(base_url))
        keys["+".join(names)] = paced | {"base_url": base_url}
    known = [key["seconds"] for key in keys.values() if key["seconds"] is not None]
    return {"seconds": max(known, default=None if keys else 0.0)} | keys


def paced_seconds(
    calls: int, tokens: int, rpm: float | None, tpm: float | None, *, openai: bool = True
) -> dict[str, Any]:
    """The least wall time of `calls` requests costing `tokens` in all (prompts plus output caps) under the
    given limits, or where none is given OpenAI's defaults at its endpoint (`openai`); which limit binds, and
    the limits assumed. Elsewhere, with no limit given, there is no least time: `seconds` is None."""
    given = rpm is not None or tpm is not None
    if not given and not openai:
        return {"seconds": None, "binding": None, "rpm": None, "tpm": None, "limits": NO_LIMITS}
    rpm, tpm = (rpm, tpm) if given else (DEFAULT_RPM, DEFAULT_TPM)
    by_requests = calls / rpm * 60 if rpm else 0.0
    by_tokens = tokens / tpm * 60 if tpm else 0.0
    return {
        "seconds": round(max(by_requests, by_tokens), 1),
        "binding": "TPM" if by_tokens > by_requests else "RPM",
        "rpm": rpm,
        "tpm": tpm,
        "limits": "given" if given else DEFAULT_LIMITS,
    }


def _load(config: EndpointSettings, usage: Usage, cap: int | None) -> Load:
    """A side's calls and TPM tokens (prompts plus output caps) on its key, with its given limits."""
    tokens = usage.prompt_tokens + usage.calls * (cap or DEFAULT_OUTPUT_CAP)
    return Load(config.key_slot, usage.calls, tokens, config.rpm, config.tpm, config.base_url)


def dry_run(
    units: Sequence[Unit],
    grader: GraderConfig,
    prices: Mapping[str, Price],
    policy: PolicyConfig | None = None,
) -> dict[str, Any]:
    """What `--dry-run` reports: calls, tokens and cost live and in batch for each side with its endpoint, and
    the least wall time under the rate limits given (or assumed)."""
    guess = estimate(units, system_message=policy.system_message if policy else None, grader=grader.shape)
    report = estimate_report(guess, prices, grader.model, policy.model if policy else None)
    report["grader"]["base_url"] = grader.base_url
    if policy is not None:
        report["policy"]["base_url"] = policy.base_url
    loads = {"grader": _load(grader, guess.grader, grader.shape.max_output_tokens)}
    if policy is not None:
        loads["policy"] = _load(policy, guess.policy, policy.shape.max_output_tokens)
    summary: dict[str, Any] = {"samples": len(units), **report, "wall_time": wall_time(loads)}
    return summary
