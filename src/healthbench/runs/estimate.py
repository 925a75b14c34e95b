"""What `--dry-run` says of a run before anything is sent: its calls and tokens, estimated from the sizes of
its prompts, their cost live and in batch (`pricing`), and the least wall time under the rate limits: those
given, else, at OpenAI's own endpoint, a new account's; another endpoint's limits are not guessed.

The prompt cache hit rate it assumes is computed from the run's own prompts, as OpenAI caches: the requests
that carry one `prompt_cache_key` (all items of a reply; per reply, all replies to a task) share the start of
their prompts, and each of them after the first reads that start from the cache when it is 1,024 tokens or
more, in steps of 128 tokens. Without the key (`--no-prompt-cache-key`) none is assumed: hits are left to chance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from healthbench.api.client import OPENAI_BASE_URL
from healthbench.api.endpoint import EndpointSettings, is_openai
from healthbench.api.ratesignals import DEFAULT_OUTPUT_CAP
from healthbench.api.wire import Shape, Usage
from healthbench.data.schema import Message
from healthbench.grading.grader import PER_ITEM, GraderCalls
from healthbench.grading.per_reply import FIXED_CHARS, HEAD_CHARS, heading_chars, output_cap
from healthbench.grading.prompt import REFERENCE_BRIDGE_CHARS, REFERENCE_HEAD_CHARS, TEMPLATE
from healthbench.grading.settings import GraderConfig
from healthbench.runs.outputs import (
    CostTotals,
    DryRunEstimate,
    GraderEstimate,
    KeyPace,
    PromptCacheEstimate,
    SideEstimate,
    WallTime,
)
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import Price, cache_savings, cost, hit_rate

# Rough sizes for the estimate: four characters a token, a typical reply, a typical verdict.
CHARS_PER_TOKEN = 4.0
REPLY_TOKENS = 500
VERDICT_TOKENS = 60
# The grader's system message and chat framing, in tokens.
FRAMING_TOKENS = 20
# A reasoning grader's thinking per verdict, by effort (None: the model's default, medium): rough guesses for
# a short yes-or-no judgement, not measurements; the run's usage.json has the real numbers.
REASONING_TOKENS: dict[str | None, int] = {"minimal": 0, "low": 150, "medium": 500, None: 500, "high": 1500}
# A per-reply verdict carries its id besides the explanation and the verdict.
ITEM_ID_TOKENS = 8
# OpenAI caches prompt starts of this many tokens or more, in steps of `CACHE_STEP` tokens past it.
MIN_CACHED_TOKENS = 1024
CACHE_STEP = 128
CACHE_RULE = (
    "each request after the first of its prompt_cache_key (a reply's items; per reply, a task's replies) reads "
    "the prompt start they share, where 1,024 tokens or more"
)


@dataclass
class Estimate:
    """Expected calls and tokens of a run before it starts."""

    policy: Usage
    grader: Usage


def _tokens(chars: float) -> int:
    return int(chars / CHARS_PER_TOKEN) + 1


def cacheable(tokens: int) -> int:
    """The tokens of a shared prompt start of `tokens` that OpenAI reads from its cache: none under 1,024, then
    1,024 and every whole step of 128 past it."""
    if tokens < MIN_CACHED_TOKENS:
        return 0
    return MIN_CACHED_TOKENS + (tokens - MIN_CACHED_TOKENS) // CACHE_STEP * CACHE_STEP


class Unit(NamedTuple):
    """Samples to estimate: their conversation, their reply (None: sampled from the policy), the rubric criteria
    they are graded against (one grader call each), and how many samples alike there are (a task's repeats), so
    a run of any size is estimated in the time and memory of its tasks."""

    prompt: Sequence[Message]
    reply: str | None
    criteria: Sequence[str]
    times: int = 1


def estimate(
    units: Iterable[Unit],
    *,
    system_message: str | None = None,
    grader: Shape | None = None,
    calls: GraderCalls = PER_ITEM,
    cache_keys: bool = False,
) -> Estimate:
    """Calls and tokens for sampling the replies not given and grading every unit (a call per criterion, or per
    unit with `calls="per-reply"`); a reasoning grader (`grader` shape) also thinks, by a rough figure per
    effort, billed as output. With `cache_keys`, the grader's cached prompt tokens as the module says."""
    thinking = REASONING_TOKENS[grader.effort] if grader is not None and grader.reasoning else 0
    policy, graded = Usage(), Usage()
    system = len(system_message or "")
    seen: set[tuple[str, ...]] = set()  # the cache keys whose first request is counted
    for unit in units:
        times = unit.times
        conversation = sum(len(m.role) + len(m.content) + 4 for m in unit.prompt) + system
        if unit.reply is None:
            policy.calls += times
            policy.prompt_tokens += _tokens(conversation) * times
            policy.completion_tokens += REPLY_TOKENS * times
        reply = REPLY_TOKENS * CHARS_PER_TOKEN if unit.reply is None else len(unit.reply)
        task = tuple(m.role + "\0" + m.content for m in unit.prompt)
        key: tuple[str, ...] | None
        if calls == "per-reply":
            usage, key = _per_reply(unit, conversation + reply, _tokens(HEAD_CHARS + conversation), thinking), task
        else:
            shared = _tokens(REFERENCE_HEAD_CHARS + conversation + reply + REFERENCE_BRIDGE_CHARS)
            usage = _per_item(unit, conversation + reply, shared, thinking)
            # A reply not sampled yet is a reply of its own: its key is shared with no other sample's (None).
            key = (*task, "\0reply", unit.reply) if unit.reply is not None else None
        cached = 0
        if cache_keys:
            # The first request of a key writes the cache, the others read it: each sample of a key of its own
            # is a first, and of a shared key (the repeats of a task graded per reply) only the first sample.
            written = usage.cached_prompt_tokens // max(usage.calls, 1)
            firsts = times if key is None else int(key not in seen)
            if key is not None:
                seen.add(key)
            cached = usage.cached_prompt_tokens * times - written * firsts
        graded.add(_times(usage, times, cached))
    return Estimate(policy, graded)


def _times(usage: Usage, times: int, cached: int) -> Usage:
    """`usage` of one sample for `times` samples alike, with `cached` cached prompt tokens in all."""
    return Usage(
        calls=usage.calls * times,
        prompt_tokens=usage.prompt_tokens * times,
        cached_prompt_tokens=cached,
        completion_tokens=usage.completion_tokens * times,
        reasoning_tokens=usage.reasoning_tokens * times,
    )


def _per_item(unit: Unit, transcript: float, shared: int, thinking: int) -> Usage:
    """The grader calls of one unit graded per item, each reading the start they share from the cache."""
    usage = Usage(calls=len(unit.criteria))
    for criterion in unit.criteria:
        usage.prompt_tokens += _tokens(len(TEMPLATE) + transcript + len(criterion) + 8) + FRAMING_TOKENS
        usage.cached_prompt_tokens += cacheable(shared + FRAMING_TOKENS)
    usage.completion_tokens = len(unit.criteria) * (VERDICT_TOKENS + thinking)
    usage.reasoning_tokens = len(unit.criteria) * thinking
    return usage


def _per_reply(unit: Unit, transcript: float, shared: int, thinking: int) -> Usage:
    """The one grader call of a unit graded per reply, reading the start it shares with the task's other replies
    (the instructions and the task's conversation) from the cache."""
    items = sum(len(criterion) + 6 for criterion in unit.criteria) + heading_chars(len(unit.criteria))
    return Usage(
        calls=1,
        prompt_tokens=_tokens(FIXED_CHARS + transcript + items) + FRAMING_TOKENS,
        cached_prompt_tokens=cacheable(shared + FRAMING_TOKENS),
        completion_tokens=len(unit.criteria) * (VERDICT_TOKENS + ITEM_ID_TOKENS + thinking),
        reasoning_tokens=len(unit.criteria) * thinking,
    )


@dataclass(frozen=True)
class Costs:
    """Each side's expected calls, tokens and cost, and both sides' total."""

    grader: SideEstimate
    policy: SideEstimate | None
    total: CostTotals


def side_estimate(usage: Usage, model: str, prices: Mapping[str, Price]) -> SideEstimate:
    """One side's expected calls and tokens with their cost at live and batch prices (None where the model has no
    price)."""
    costs = {
        "model": model,
        "cost_usd": cost(usage, model, prices, batch=False),
        "batch_cost_usd": cost(usage, model, prices, batch=True),
    }
    return SideEstimate.model_validate(usage.as_dict() | costs)


def estimate_report(guess: Estimate, prices: Mapping[str, Price], grader_model: str, policy_model: str | None) -> Costs:
    """What `--dry-run` prints of cost: calls, tokens and USD per side at live and batch prices, and the totals
    (None where a model has no price)."""
    grader = side_estimate(guess.grader, grader_model, prices)
    policy = None if policy_model is None else side_estimate(guess.policy, policy_model, prices)
    sides = [grader] if policy is None else [policy, grader]

    def total(costs: list[float | None]) -> float | None:
        return None if None in costs else sum(c for c in costs if c is not None)

    totals = CostTotals(live=total([s.cost_usd for s in sides]), batch=total([s.batch_cost_usd for s in sides]))
    return Costs(grader, policy, totals)


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


def wall_time(loads: Mapping[str, Load]) -> WallTime:
    """`--dry-run`'s wall time: the loads on one key add up under its limits (the first given of them), and
    keys run side by side, so the slowest sets the time. A key with no limit known bounds nothing: `seconds`
    is the slowest of the others, None when no key has a limit known."""
    groups: dict[str, list[str]] = {}
    for name, load in loads.items():
        groups.setdefault(load.key, []).append(name)
    keys: dict[str, KeyPace] = {}
    for names in groups.values():
        members = [loads[name] for name in names]
        rpm = next((m.rpm for m in members if m.rpm is not None), None)
        tpm = next((m.tpm for m in members if m.tpm is not None), None)
        calls, tokens = sum(m.calls for m in members), sum(m.tokens for m in members)
        base_url = members[0].base_url
        paced = paced_seconds(calls, tokens, rpm, tpm, openai=is_openai(base_url))
        keys["+".join(names)] = paced.model_copy(update={"base_url": base_url})
    known = [key.seconds for key in keys.values() if key.seconds is not None]
    return WallTime(seconds=max(known, default=None if keys else 0.0), keys=keys)


def paced_seconds(calls: int, tokens: int, rpm: float | None, tpm: float | None, *, openai: bool = True) -> KeyPace:
    """The least wall time of `calls` requests costing `tokens` in all (prompts plus output caps) under the
    given limits, or where none is given OpenAI's defaults at its endpoint (`openai`); which limit binds, and
    the limits assumed. Elsewhere, with no limit given, there is no least time: `seconds` is None."""
    given = rpm is not None or tpm is not None
    if not given and not openai:
        return KeyPace(limits=NO_LIMITS)
    rpm, tpm = (rpm, tpm) if given else (DEFAULT_RPM, DEFAULT_TPM)
    by_requests = calls / rpm * 60 if rpm else 0.0
    by_tokens = tokens / tpm * 60 if tpm else 0.0
    return KeyPace(
        seconds=round(max(by_requests, by_tokens), 1),
        binding="TPM" if by_tokens > by_requests else "RPM",
        rpm=rpm,
        tpm=tpm,
        limits="given" if given else DEFAULT_LIMITS,
    )


def _load(config: EndpointSettings, usage: Usage, cap: int | None, caps: int | None = None) -> Load:
    """A side's calls and TPM tokens (prompts plus output caps: `caps` in all, else `cap` each) on its key, with its
    given limits."""
    tokens = usage.prompt_tokens + (usage.calls * (cap or DEFAULT_OUTPUT_CAP) if caps is None else caps)
    return Load(config.key_slot, usage.calls, tokens, config.rpm, config.tpm, config.base_url)


def _grader_caps(units: Sequence[Unit], grader: GraderConfig) -> int | None:
    """The output caps of a per-reply grader's requests in all, where they grow with the rubric (see
    `Grader.request_body`); None where every request has the shape's."""
    cap = grader.shape.max_output_tokens
    if grader.calls != "per-reply" or grader.max_output_tokens is not None or cap is None:
        return None
    return sum(output_cap(cap, len(unit.criteria)) for unit in units)


def dry_run(
    units: Sequence[Unit],
    grader: GraderConfig,
    prices: Mapping[str, Price],
    policy: PolicyConfig | None = None,
    tasks: int | None = None,
) -> DryRunEstimate:
    """What `--dry-run` reports: calls, tokens and cost live and in batch for each side with its endpoint, and
    the least wall time under the rate limits given (or assumed); `tasks` where the command counts them."""
    guess = estimate(
        units,
        system_message=policy.system_message if policy else None,
        grader=grader.shape,
        calls=grader.calls,
        cache_keys=grader.prompt_cache_key,
    )
    costs = estimate_report(guess, prices, grader.model, policy.model if policy else None)
    cache = PromptCacheEstimate(
        prompt_cache_key=grader.prompt_cache_key,
        assumed_hit_rate=hit_rate(guess.grader) or 0.0,
        rule=CACHE_RULE if grader.prompt_cache_key else "no prompt_cache_key is sent: no hit is assumed",
        saved_usd=cache_savings(guess.grader, grader.model, prices, batch=False),
    )
    side = costs.grader.model_dump(exclude={"base_url"})
    sided = {"base_url": None if policy is None else policy.base_url}
    loads = {"grader": _load(grader, guess.grader, grader.shape.max_output_tokens, _grader_caps(units, grader))}
    if policy is not None:
        loads["policy"] = _load(policy, guess.policy, policy.shape.max_output_tokens)
    return DryRunEstimate(
        tasks=tasks,
        samples=sum(unit.times for unit in units),
        policy=None if policy is None or costs.policy is None else costs.policy.model_copy(update=sided),
        grader=GraderEstimate(**side, base_url=grader.base_url, grader_calls=grader.calls, prompt_cache=cache),
        total_cost_usd=costs.total,
        wall_time=wall_time(loads),
    )


def model_estimate(
    prompts: Sequence[Sequence[Message]], model: PolicyConfig, prices: Mapping[str, Price]
) -> SideEstimate:
    """A model's calls answering each of `prompts` once (an attacker's rewrites), at a typical reply's length each,
    with their cost and the model's endpoint."""
    guess = estimate([Unit(prompt, None, []) for prompt in prompts])
    return side_estimate(guess.policy, model.model, prices).model_copy(update={"base_url": model.base_url})
