"""HealthBench as a verl custom reward function file: `custom_reward_function.path` is this file, whose path
`python -m healthbench.integrations.verl` prints.

- `compute_score_batch` (`custom_reward_function.name=compute_score_batch`, `reward_manager.name=batch`): verl's
  batch reward manager calls it once with every reply of a batch. It is synchronous, so the replies are graded on
  one event loop this process keeps in a daemon thread for its whole life: graders, their connections and their
  key's pace stay warm from one call to the next (an `asyncio.run` per call would start them cold every time).
- `compute_score` (`custom_reward_function.name=compute_score`, verl's reward loop): a coroutine, one reply a call;
  the reward loop gathers a batch's calls on its own long-lived loop, so they share one budget and warm graders.

`ground_truth` is the task's `prompt_id` (`export` writes it into `reward_model.ground_truth`), and the rows are
found from `export`'s `extra_info` (`data`, `split`, `heldout`, `seed`), else `HEALTHBENCH_DATA`, loaded once per
process. The grader is `serve`'s: its settings from `custom_reward_function.reward_kwargs` (the settings TRL's
reward function takes: `GradingOptions` fields such as `grader_model` and `grader_max_attempts`, `concurrency`,
`slow_start`, `max_reply_chars`), else the environment variables `serve` reads (`HEALTHBENCH_GRADER_API_KEY`,
`HEALTHBENCH_GRADER_BASE_URL`, ...), its budget `HEALTHBENCH_GRADER_CONCURRENCY` (default 256, growing with the
key's limits to 1,024), its pace shared by every Ray worker through `HEALTHBENCH_PACE_STORE=redis://...`. They are
checked at the first call, before any grader call, as TRL's are when its reward function is made: a setting that is
none (a misspelling) is refused naming it, as are a grader endpoint that is not a URL and no key for OpenAI's API;
the keyword arguments verl passes of its own (`VERL_KEYWORDS`) are not settings. The score is `healthbench grade`'s
for the same reply; a reply that cannot be graded raises `GradingError` naming task and item (verl has no "no
reward"), a reply too long `OverLimit`, what is not a reply `NotAReply`, and an unknown prompt_id `UnknownTask`
naming it and the split.

When verl serves the judge itself (`reward.reward_model.enable=True`), its reward loop passes the address of the
router in front of the judge's servers (`reward_router_address`, `HOST:PORT`, a free port chosen at start) and the
judge's tokenizer (`reward_model_tokenizer`, not needed: the server applies its chat template). The grader is then
`http://{reward_router_address}/v1`, whatever `HEALTHBENCH_GRADER_BASE_URL` says, with the model that server lists
at `/v1/models` (verl's vLLM and SGLang servers name the model by its local path) unless `grader_model` names it,
and no key unless the environment gives one. `grader_base_url` in `reward_kwargs` wins over the router.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from healthbench.errors import DataError, EndpointUnusable, GradingError, SettingsError, UnreadableAnswer
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.rewards import BatchRewards, Reward, reply_text
from healthbench.together import together

__all__ = ["VERL_KEYWORDS", "compute_score", "compute_score_batch", "path", "settings_of"]

# Keyword arguments verl 0.9.1 passes a custom reward function of its own, beside `reward_kwargs`: its reward loop's
# managers add a reward model's router address and tokenizer when one runs (`reward_loop/reward_manager/*.py`).
ROUTER_ADDRESS = "reward_router_address"
VERL_KEYWORDS = frozenset({ROUTER_ADDRESS, "reward_model_tokenizer"})
# The rows are named by `export`'s `extra_info`, not by settings.
_ROW_SETTINGS = ("data", "split", "heldout", "seed")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_sources: dict[tuple[str | None, str | None, str | None, int, tuple[tuple[str, str], ...]], BatchRewards] = {}
_served: dict[str, str] = {}  # the model each judge address lists, asked once per process
_asking: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Future[str]] = {}  # those being asked, by loop


def path() -> Path:
    """This file: verl's `custom_reward_function.path`."""
    return Path(__file__).resolve()


def judge_url(address: str) -> str:
    """The OpenAI-compatible endpoint behind verl's `reward_router_address` (`HOST:PORT`, `[IPv6]:PORT`)."""
    return f"http://{address}/v1"


async def settings_of(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The reward settings verl's keyword arguments give: `custom_reward_function.reward_kwargs`, less the arguments
    verl passes of its own (`VERL_KEYWORDS`); with a `reward_router_address` (verl serves the judge) and no
    `grader_base_url` given, the grader behind that router, and the model it lists (`served_model`) unless
    `grader_model` names one."""
    settings = {name: value for name, value in kwargs.items() if name not in VERL_KEYWORDS}
    address = kwargs.get(ROUTER_ADDRESS)
    if address is not None and settings.get("grader_base_url") is None:
        settings["grader_base_url"] = judge_url(str(address))
        if settings.get("grader_model") is None:
            settings["grader_model"] = await served_model(str(address))
    return settings


async def served_model(address: str) -> str:
    """The one model the judge behind `address` lists at `/v1/models`, asked once per process: the calls that find it
    being asked wait for that answer, and a failed asking is asked again by the next call. `SettingsError` naming
    the address when it lists none or several."""
    if (model := _served.get(address)) is not None:
        return model
    key = (asyncio.get_running_loop(), address)
    asking = _asking.get(key)
    if asking is None:
        asking = asyncio.ensure_future(_ask_model(address))
        _asking[key] = asking
        asking.add_done_callback(lambda _: _asking.pop(key, None))
    # Shielded: one caller cancelled (its step stopped) does not cancel the asking the others wait for.
    return await asyncio.shield(asking)


async def _ask_model(address: str) -> str:
    """Ask the judge behind `address` for its models (with the grader key the environment gives, if any)."""
    url = judge_url(address)
    client = GraderConfig.from_env(base_url=url, served=True).client()
    try:
        models = await client.api("GET", "/models", read=_model_ids, bulk=False)
    except EndpointUnusable as exc:
        raise exc.of("verl's judge") from None
    finally:
        await client.aclose()
    if len(models) != 1:
        listed = f"{len(models)} models ({', '.join(models)})" if models else "no model"
        raise SettingsError(
            f"verl's judge at {ROUTER_ADDRESS} {address} lists {listed} at {url}/models: name the model to grade "
            "with as +reward.custom_reward_function.reward_kwargs.grader_model=NAME"
        )
    _served[address] = models[0]
    return models[0]


def _model_ids(body: bytes) -> list[str]:
    """The model names of a `GET /models` answer (`{"data": [{"id": ...}, ...]}`); `UnreadableAnswer` for another
    body, which the client retries as any answer it cannot read."""
    try:
        return [str(entry["id"]) for entry in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        raise UnreadableAnswer("not a list of models") from None


def _source(extra_info: Mapping[str, Any] | None, settings: Mapping[str, Any]) -> BatchRewards:
    """The rewards of the rows `extra_info` names (`export`'s `data`, `split`, `heldout`, `seed`; what it leaves out
    from `HEALTHBENCH_DATA`), graded with `settings` (`settings_of`; what they leave out from the environment), made
    and checked once per process for each: a setting that is none is refused as TRL's reward function refuses it
    (`SettingsError`)."""
    info = extra_info or {}
    if rows := [name for name in _ROW_SETTINGS if name in settings]:
        raise SettingsError(
            f"`{rows[0]}` is no setting of verl's reward_kwargs: export's extra_info names the rows (data, split, "
            "heldout, seed), else HEALTHBENCH_DATA"
        )
    data, split, heldout = (info.get(name) for name in ("data", "split", "heldout"))
    key = (
        None if data is None else str(data),
        None if split is None else str(split),
        None if heldout is None else str(heldout),
        int(info.get("seed") or 0),
        tuple(sorted((name, repr(value)) for name, value in settings.items())),
    )
    with _lock:
        found = _sources.get(key)
        if found is None:
            found = BatchRewards(key[0], split=key[1], heldout=key[2], seed=key[3], **settings)
            _sources[key] = found
    return found


def _daemon_loop() -> asyncio.AbstractEventLoop:
    """The process's one grading loop, started on first use in a daemon thread that lives as long as the process."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="healthbench-rewards", daemon=True).start()
            _loop = loop
        return _loop


def _score(reward: Reward) -> float:
    """The reward's score; its grading error when there is none."""
    if reward.reward is None:
        raise reward.failure or GradingError(reward.prompt_id, "(not said)", reward.error or "no reward")
    return reward.reward


async def _grade_all(groups: dict[BatchRewards, list[int]], replies: Sequence[tuple[object, str]]) -> list[float]:
    """Every reply's score, each group of rows graded at once, all groups together under the one budget."""
    scores: list[float] = [0.0] * len(replies)

    async def one_group(source: BatchRewards, indices: list[int]) -> None:
        for index, reward in zip(indices, await source.grade([replies[i] for i in indices]), strict=True):
            scores[index] = _score(reward)

    await together(one_group(source, indices) for source, indices in groups.items())
    return scores


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    **kwargs: Any,
) -> list[float]:
    """The score of every reply of a batch (verl's batch reward manager), graded at once on the process's one
    grading loop. `GradingError` naming task and item for a reply that cannot be graded, `UnknownTask` for a
    ground truth that names no task: there is no score for the batch then."""
    if not len(solution_strs) == len(ground_truths) == len(extra_infos):
        raise DataError(
            f"{len(solution_strs)} solution_strs, {len(ground_truths)} ground_truths and {len(extra_infos)} "
            "extra_infos: verl passes one of each per reply"
        )
    loop = _daemon_loop()
    settings = asyncio.run_coroutine_threadsafe(settings_of(kwargs), loop).result()
    groups: dict[BatchRewards, list[int]] = {}
    for index, info in enumerate(extra_infos):
        groups.setdefault(_source(info, settings), []).append(index)
    # Each reply read at its place in the batch, so what is not one is named by that place.
    replies = [
        (truth, reply_text(reply, index, truth))
        for index, (truth, reply) in enumerate(zip(ground_truths, solution_strs, strict=True))
    ]
    future: Future[list[float]] = asyncio.run_coroutine_threadsafe(_grade_all(groups, replies), loop)
    return future.result()


async def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> float:
    """The score of one reply (verl's reward loop, which gathers a batch's calls on its own event loop)."""
    [reward] = await _source(extra_info, await settings_of(kwargs)).grade([(ground_truth, solution_str)])
    return _score(reward)


if __name__ == "__main__":
    print(path())
