"""Every number a command or a library setting takes has a range, refused outside it before anything is built: inf
and nan never pass, a flag and the setting it fills refuse the same values (the flag's range is read from the
setting's type), and a dry run of any size is worked out per task, not per sample."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import click
import pytest
from click.testing import CliRunner
from pydantic import TypeAdapter, ValidationError

from healthbench.api.batch.records import BatchSettings
from healthbench.api.endpoint import EndpointSettings
from healthbench.cli import main
from healthbench.data.schema import Message
from healthbench.errors import SettingsError
from healthbench.grading.grader import GraderCalls
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.integrations.common import Size, load_tasks
from healthbench.runs.estimate import Unit, estimate
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.runner import Job
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}


def numeric_flags() -> list[tuple[str, click.Option]]:
    """Every option of every command whose value is a number."""
    found = []
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, click.types._NumberParamTypeBase):
                found.append((name, param))
    return found


def test_every_numeric_flag_has_a_range_and_a_float_one_is_finite() -> None:
    flags = numeric_flags()
    assert len(flags) > 30  # the grader flags on five commands, eval's, the batch flags, seeds, ports
    unbounded = [
        f"{name} {flag.opts[0]}" for name, flag in flags if not isinstance(flag.type, click.types._NumberRangeBase)
    ]
    assert unbounded == []
    # click's FloatRange lets nan through every bound; the commands' float flags refuse it.
    nan_passes = []
    for name, flag in flags:
        if isinstance(flag.type, click.FloatRange):
            try:
                cast(Any, flag.type).convert("nan", flag, None)
                nan_passes.append(f"{name} {flag.opts[0]}")
            except click.BadParameter:
                pass
    assert nan_passes == []


def _beyond(flag: click.Option) -> list[str]:
    """Values just outside the flag's range, and the numbers that are none."""
    kind: Any = flag.type
    step = 1 if isinstance(kind, click.IntRange) else 1e-6
    values = [] if isinstance(kind, click.IntRange) else ["inf", "-inf", "nan"]
    if kind.min is not None:
        values.append(str(kind.min - step if not kind.min_open else kind.min))
    if kind.max is not None:
        values.append(str(kind.max + max(step, abs(kind.max) * 1e-6) if not kind.max_open else kind.max))
    return values


CASES = [(name, flag.opts[0], value) for name, flag in numeric_flags() for value in _beyond(flag)]


@pytest.mark.parametrize(("command", "flag", "value"), CASES, ids=[f"{c}{f}={v}" for c, f, v in CASES])
def test_a_number_out_of_range_is_refused_before_anything_is_built(
    tmp_path: Path, fake: FakeOpenAI, command: str, flag: str, value: str
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("t1")])
    out = tmp_path / "out"
    url = fake.base_url or ""
    # Whatever else the command takes that could start something: an output folder, data, endpoints.
    rest = {"--out": str(out), "--data": str(data), "--grader-base-url": url, "--base-url": url}
    args = [command, flag, value, *(word for item in rest.items() if _option(command, item[0]) for word in item)]
    result = CliRunner().invoke(main, args, env=ENV)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: Invalid value for '{flag}': " + errors[0].split(": ", 2)[2]], result.output
    assert "Traceback" not in result.output
    assert fake.requests_total == 0 and not out.exists()


# The flags that fill a library setting, and the setting: the two must refuse the same values.
MIRRORED: list[tuple[str, str, type[Any], str]] = [
    *[("grade", f"--{name.replace('_', '-')}", GradingOptions, name) for name in GradingOptions.model_fields],
    ("grade", "--concurrency", GradingOptions, "grader_concurrency"),
    ("grade", "--max-attempts", GradingOptions, "grader_max_attempts"),
    ("eval", "--temperature", PolicyConfig, "temperature"),
    ("eval", "--max-tokens", PolicyConfig, "max_tokens"),
    ("eval", "--policy-concurrency", PolicyConfig, "concurrency"),
    ("eval", "--rpm", PolicyConfig, "rpm"),
    ("eval", "--tpm", PolicyConfig, "tpm"),
    ("eval", "--timeout", PolicyConfig, "timeout"),
    ("eval", "--limit", Size, "limit"),
    ("eval", "--n-repeats", Size, "n_repeats"),
    ("eval", "--seed", Size, "seed"),
    ("grade", "--poll-interval", BatchSettings, "poll_interval"),
    ("grade", "--batch-tokens", BatchSettings, "max_tokens"),
]


def _option(command: str, flag: str) -> click.Option | None:
    return next((p for p in main.commands[command].params if isinstance(p, click.Option) and flag in p.opts), None)


def _accepts(model: type[Any], field: str, value: float) -> bool:
    values: dict[str, Any] = {field: value}
    if model is PolicyConfig:
        # At a server of your own: OpenAI's API holds a budget to less than the type does, a rule between two settings
        # (tests/test_judge_pool.py), not a range.
        values |= {"model": "gpt-4.1", "base_url": "http://127.0.0.1:8000/v1"}
    try:
        TypeAdapter(model).validate_python(values)
    except ValidationError:
        return False
    return True


def test_a_flag_and_the_setting_it_fills_refuse_the_same_numbers() -> None:
    checked = 0
    for command, flag, model, field in MIRRORED:
        option = _option(command, flag)
        if option is None or not isinstance(option.type, click.types._NumberRangeBase):
            continue  # a setting with no flag of that name, or one that is no number
        kind: Any = option.type
        for value, is_open in ((kind.min, kind.min_open), (kind.max, kind.max_open)):
            if value is not None and not is_open:
                assert _accepts(model, field, value), (flag, value)
        for raw in _beyond(option):
            assert not _accepts(model, field, float(raw)), (flag, raw)
        checked += 1
    assert checked >= 19  # a grader flag for every number of GradingOptions, and the model's


def test_the_library_settings_refuse_inf_nan_and_numbers_out_of_range() -> None:
    for wrong in ({"grader_rpm": math.inf}, {"grader_tpm": 1e-300}, {"grader_concurrency": 0}):
        with pytest.raises(ValidationError):
            GradingOptions(**wrong)
    for values in ({"temperature": math.nan}, {"rpm": math.inf}, {"max_tokens": 0}, {"max_attempts": 10_000}):
        with pytest.raises(ValidationError):
            PolicyConfig(model="gpt-4.1", **values)
    with pytest.raises(ValidationError):
        GraderConfig(tpm=math.inf)
    with pytest.raises(ValidationError):
        EndpointSettings(model="m", concurrency=1_000_000)
    with pytest.raises(ValidationError):
        BatchSettings(poll_interval=math.inf)
    with pytest.raises(SettingsError, match="`limit` is 0"):
        load_tasks(limit=0)


def test_the_inspect_task_takes_the_commands_ranges(tmp_path: Path) -> None:
    from healthbench.integrations.inspect_task import healthbench

    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("t1")])
    with pytest.raises(SettingsError, match="`n_repeats` is 1000"):
        healthbench(data=str(data), n_repeats=1000)
    with pytest.raises(SettingsError, match="`seed` is -1"):
        healthbench(data=str(data), seed=-1)
    with pytest.raises(ValidationError):
        healthbench(data=str(data), grader_rpm=math.inf)


def eval_dry_run(tmp_path: Path, data: Path, *extra: str) -> dict[str, Any]:
    args = ["eval", "--model", "gpt-4.1", "--data", str(data), "--out", str(tmp_path / "out"), "--dry-run", "--json"]
    result = CliRunner().invoke(main, [*args, *extra], env=ENV)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_a_dry_run_counts_repeats_per_task_without_making_a_sample_of_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [make_row(f"t{i}", prompt=(("user", "Why? " * i),)) for i in range(5)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    once = eval_dry_run(tmp_path, data)
    made: list[Job] = []

    def counted(*args: Any, **kwargs: Any) -> Job:
        made.append(Job(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr("healthbench.cli.grading.Job", counted)
    many = eval_dry_run(tmp_path, data, "--n-repeats", "100")
    assert len(made) == len(rows)  # one per task, not one per sample
    assert (once["samples"], many["samples"]) == (5, 500)
    for side in ("policy", "grader"):
        for figure in ("calls", "prompt_tokens", "completion_tokens"):
            assert many[side][figure] == 100 * once[side][figure], (side, figure)
        assert many[side]["cost_usd"] == pytest.approx(100 * once[side]["cost_usd"])


@pytest.mark.parametrize("calls", ["per-item", "per-reply"])
@pytest.mark.parametrize("cache_keys", [False, True])
def test_a_unit_of_repeats_is_estimated_as_its_samples_one_by_one(calls: GraderCalls, cache_keys: bool) -> None:
    prompt = [Message(role="user", content="I have had a cough for three weeks. " * 200)]
    criteria = [f"Asks about symptom {i} in some detail, as a careful clinician would" for i in range(6)]
    one_by_one = [Unit(prompt, None, criteria) for _ in range(7)] + [Unit(prompt, "Rest.", criteria)]
    counted = [Unit(prompt, None, criteria, times=7), Unit(prompt, "Rest.", criteria)]
    apart = estimate(one_by_one, calls=calls, cache_keys=cache_keys)
    together = estimate(counted, calls=calls, cache_keys=cache_keys)
    assert together == apart
    assert apart.grader.cached_prompt_tokens > 0 if cache_keys else apart.grader.cached_prompt_tokens == 0
