"""The rules behind `serve`'s door, without a server: which tokens are taken and how one is recognised, which
hosts are loopback, when a server may not start, and how a log line keeps to an excerpt of what a client sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from healthbench.api.client import OPENAI_BASE_URL
from healthbench.errors import SettingsError
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.openreward.access import Access, ServeLimits, ServerTokens, is_loopback

TOKEN = "a-token-of-enough-characters-0001"
OTHER = "a-token-of-enough-characters-0002"


def test_a_token_file_holds_one_credential_a_line(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# the team's tokens\n{TOKEN}\n\n  {OTHER}  \n", encoding="utf-8")
    tokens = ServerTokens.load(path, {"HEALTHBENCH_SERVER_TOKEN": "the file wins over the variable"})
    assert tokens is not None and tokens.secrets == (TOKEN, OTHER)
    assert tokens.credential(TOKEN) == "token 1" and tokens.credential(f" {OTHER} ") == "token 2"
    for wrong in (None, "", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
        assert tokens.credential(wrong) is None
    from_variable = ServerTokens.load(None, {"HEALTHBENCH_SERVER_TOKEN": TOKEN})
    assert from_variable is not None and from_variable.credential(TOKEN) == "token 1"
    assert ServerTokens.load(None, {}) is None and ServerTokens.load(None, {"HEALTHBENCH_SERVER_TOKEN": " "}) is None


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["# nothing but a comment"], "no token in it"),
        (["short"], "too easily guessed"),
        ([TOKEN, "with a space in the middle"], "token 2: a token is printable ASCII without spaces"),
        ([TOKEN, "ünïcödé-token-of-enough-length"], "printable ASCII"),
        ([TOKEN, TOKEN], "given twice"),
    ],
)
def test_tokens_that_cannot_be_used_are_refused_naming_the_file(tmp_path: Path, lines: list[str], said: str) -> None:
    path = tmp_path / "tokens"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=said) as refused:
        ServerTokens.load(path, {})
    assert str(path) in str(refused.value) and TOKEN not in str(refused.value)


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "::1", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "my-gpu-box", ""):
        assert not is_loopback(host), host


KEYED = GraderConfig(base_url=OPENAI_BASE_URL, api_key=SecretStr("sk-server"))
KEYLESS_OPENAI = GraderConfig(base_url=OPENAI_BASE_URL)
LOCAL = GraderConfig(base_url="http://127.0.0.1:8000/v1")


def test_when_a_server_may_start() -> None:
    tokens = ServerTokens.of([TOKEN], "HEALTHBENCH_SERVER_TOKEN")
    # Beyond loopback, a server that grades on its own needs a token or --no-auth.
    for graders in ([KEYED], [LOCAL], [KEYLESS_OPENAI, KEYED]):
        refusal = Access(host="0.0.0.0").refusal(graders)
        assert refusal is not None and "--auth-token-file" in refusal and "--no-auth" in refusal
        assert Access(host="0.0.0.0", tokens=tokens).refusal(graders) is None
        assert Access(host="0.0.0.0", no_auth=True).refusal(graders) is None
        assert Access(host="127.0.0.1").refusal(graders) is None
    assert "grader key of its own" in (Access(host="::").refusal([KEYED]) or "")
    assert "http://127.0.0.1:8000/v1, which needs no key" in (Access(host="::").refusal([LOCAL]) or "")
    # Every session brings and spends its own key: nothing of the server's to spend.
    assert Access(host="0.0.0.0").refusal([KEYLESS_OPENAI]) is None
    assert Access(host="0.0.0.0").warnings() and not Access().warnings()
    assert "--no-auth" in Access(no_auth=True).warnings()[0]
    assert "together" in (Access(tokens=tokens, no_auth=True).refusal([KEYED]) or "")


def test_the_bounds_have_ranges() -> None:
    assert ServeLimits() == ServeLimits(
        request_bytes=8 * 1024 * 1024, reply_chars=50_000, group_size=64, batch_size=1024
    )
    for wrong in (
        {"group_size": 0},
        {"request_bytes": 10},
        {"reply_chars": -1},
        {"group_size": 10**9},
        {"batch_size": 0},
    ):
        with pytest.raises(ValidationError):
            ServeLimits(**wrong)


def test_a_log_field_is_an_excerpt_on_one_line_without_secrets() -> None:
    pytest.importorskip("openreward")
    from healthbench.integrations.openreward.guard import short_id
    from healthbench.integrations.openreward.logs import FIELD_CHARS, FIELD_ITEMS, bounded, clean

    secrets = ("sk-server-key-0123456789", TOKEN)
    said = clean("x" * 50_000_000, secrets)
    assert len(said) < FIELD_CHARS + 40 and said.endswith("(50,000,000 characters)")
    assert clean(f"key {secrets[0]} and token {TOKEN}", secrets) == "key [redacted] and token [redacted]"
    assert clean("two\nlines\x1b[31m", ()) == "two lines [31m"
    nested = bounded({"items": ["y" * 1000] * 1000, "n": 3, "ok": True}, secrets)
    assert nested["n"] == 3 and nested["ok"] is True and len(nested["items"]) == FIELD_ITEMS + 1
    assert all(len(item) < FIELD_CHARS + 40 for item in nested["items"])
    assert short_id("3f9a2b1c-1111-2222-3333-444455556666") == "3f9a2b1c…" and short_id("abcd") == "ab…"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-group-size", "0"),
        ("--max-group-size", "5000"),
        ("--max-reply-chars", "inf"),
        ("--max-request-bytes", "nan"),
        ("--max-request-bytes", "100"),
    ],
)
def test_the_bound_flags_refuse_numbers_out_of_range(flag: str, value: str) -> None:
    from click.testing import CliRunner

    from healthbench.cli import main

    result = CliRunner().invoke(main, ["serve", "--data", __file__, flag, value])
    assert result.exit_code == 2 and flag in result.output and "Traceback" not in result.output, result.output
