"""A `serve` session that could never be graded for want of a grader key is refused when it is created, with the
reason, rather than after the model has answered. A server with a key of its own, a session that brings one,
and a grader endpoint that needs none (a local fake, a self-hosted model) are all served as before."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import ClientResponseError
from fastapi import HTTPException
from openreward import AsyncOpenReward
from pydantic import SecretStr

from healthbench.api.client import OPENAI_BASE_URL
from healthbench.data.schema import Row
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.openreward.deployment import Deployment
from healthbench.integrations.openreward.environment import HealthBench, HealthBenchAnswer, build_server
from tests.conftest import make_row
from tests.reference import KEY
from tests.test_environment import serving

ROWS = [Row.model_validate(make_row(f"t{i}")) for i in range(3)]
SPEC = {"split": "test", "prompt_id": "t0"}
REFUSAL = "no grader key for this session, and the grader gpt-4.1-2025-04-14 at https://api.openai.com/v1 needs one"


def served(config: GraderConfig, variant: type[HealthBench] = HealthBench) -> type[HealthBench]:
    return variant.bound(Deployment({"test": ROWS}, config))


@pytest.mark.parametrize("variant", [HealthBench, HealthBenchAnswer])
def test_no_key_anywhere_for_openai_is_refused_at_creation(variant: type[HealthBench]) -> None:
    env_cls = served(GraderConfig(base_url=OPENAI_BASE_URL), variant)
    for secrets in ({}, {"OPENAI_API_KEY": "  "}, {"unrelated": KEY}):
        with pytest.raises(HTTPException) as refused:
            env_cls(SPEC, secrets)
        assert refused.value.status_code == 400
        assert refused.value.detail.startswith(REFUSAL)
        assert "secret OPENAI_API_KEY (or chat_api_key)" in refused.value.detail
        assert "HEALTHBENCH_GRADER_API_KEY" in refused.value.detail


def test_a_key_from_the_session_or_the_server_or_an_endpoint_that_needs_none() -> None:
    openai = served(GraderConfig(base_url=OPENAI_BASE_URL))
    for secrets in ({"OPENAI_API_KEY": KEY}, {"chat_api_key": KEY}, {"openai_api_key": KEY}):
        assert openai(SPEC, secrets).row.prompt_id == "t0"
    assert served(GraderConfig(base_url=OPENAI_BASE_URL, api_key=SecretStr("sk-server")))(SPEC, {}).row == ROWS[0]
    assert served(GraderConfig(base_url="http://127.0.0.1:9/v1"))(SPEC, {}).row == ROWS[0]


def test_the_client_is_told_why() -> None:
    async def create(base_url: str) -> ClientResponseError:
        client = AsyncOpenReward(api_key="local")
        env = client.environments.get("healthbench", base_url=base_url)
        try:
            with pytest.raises(ClientResponseError) as refused:
                async with env.session(split="test", index=0, secrets={}):
                    pass
            async with env.session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}) as session:
                assert await session.get_prompt()
            return refused.value
        finally:
            await client.environments.aclose()

    with serving(build_server({"test": ROWS}, GraderConfig(base_url=OPENAI_BASE_URL)).app) as url:
        refused = asyncio.run(create(url))
    assert refused.status == 400 and refused.message.startswith(REFUSAL)
