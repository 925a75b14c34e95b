"""Tests of the fake Batch API (files and batches), through a stdlib HTTP client over loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import healthbench
from healthbench.testing import FakeOpenAI, policy_reply, prompt_verdict, verdict_reply
from healthbench.testing.replies import PROSE, STRING_VERDICT
from tests.batchclient import Client, StartFake


def grader_prompt(i: int) -> str:
    return f"# Conversation\nuser: question {i}\n\n# Rubric item\n[5] Mentions item {i}\n\n# Instructions\n..."


def chat(content: str, model: str = "gpt-test") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def line(custom_id: str, body: Any, **overrides: Any) -> str:
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body, **overrides}
    )


def jsonl(bodies: Sequence[Any]) -> bytes:
    return "".join(line(f"r{i}", body) + "\n" for i, body in enumerate(bodies)).encode()


def content(reply: dict[str, Any]) -> Any:
    return reply["choices"][0]["message"]["content"]


def test_round_trip_matches_live_answers(start_fake: StartFake) -> None:
    def respond(body: dict[str, Any]) -> str | None:
        return "scripted" if body["model"] == "scripted-model" else None

    server, client = start_fake(respond=respond)
    bodies = [chat(grader_prompt(i)) for i in range(6)] + [chat(f"policy {i}") for i in range(3)]
    bodies.append(chat("hook", model="scripted-model"))
    # Compact separators: the recorded bodies must be the file's text, not a re-serialisation.
    texts = [json.dumps(body, separators=(",", ":")) for body in bodies]
    head = '{{"custom_id": "r{}", "method": "POST", "url": "/v1/chat/completions", "body": '
    data = "".join(head.format(i) + text + "}\n" for i, text in enumerate(texts)).encode()

    status, file = client.upload(data)
    assert status == 200
    assert file["object"] == "file" and file["purpose"] == "batch" and file["filename"] == "in.jsonl"
    assert file["bytes"] == len(data) and file["id"].startswith("file-") and isinstance(file["created_at"], int)
    status, batch = client.create(file["id"], metadata={"run": "t1"})
    assert status == 200
    assert batch["object"] == "batch" and batch["id"].startswith("batch_")
    assert batch["status"] == "completed" and batch["metadata"] == {"run": "t1"}
    assert batch["input_file_id"] == file["id"] and batch["endpoint"] == "/v1/chat/completions"
    assert batch["request_counts"] == {"total": 10, "completed": 10, "failed": 0}
    assert batch["error_file_id"] is None and batch["errors"] is None
    assert isinstance(batch["completed_at"], int) and batch["failed_at"] is None
    assert client.request("GET", f"/files/{file['id']}/content") == (200, data)

    outputs = client.lines(batch["output_file_id"])
    assert server.batches_created == 1 and server.batch_lines_submitted == 10 and server.files_uploaded == 1
    assert server.batch_bodies == texts and texts[0] != json.dumps(bodies[0])
    # Batches are not live traffic: nothing reached the chat-completions counters.
    assert server.requests_total == 0 and server.responses_by_kind == {} and server.bodies == []

    for out in outputs:
        assert out["id"].startswith("batch_req_") and out["error"] is None
        assert out["response"]["status_code"] == 200 and out["response"]["request_id"].startswith("req_")
        reply = out["response"]["body"]
        live = client.live(bodies[int(out["custom_id"][1:])])
        assert reply["id"] != live["id"]
        for key in ("object", "model", "choices", "usage"):
            assert reply[key] == live[key], key
    by_id = {out["custom_id"]: content(out["response"]["body"]) for out in outputs}
    assert by_id["r0"] == verdict_reply(prompt_verdict(grader_prompt(0)))
    assert by_id["r6"] == policy_reply(bodies[6]["messages"])
    assert by_id["r9"] == "scripted"
    assert server.requests_total == 10 and server.responses_by_kind == {"ok": 10}
    # The same routes answer without the /v1 prefix too.
    root = Client(client.base_url.removesuffix("/v1"))
    assert root.batch(batch["id"])["output_file_id"] == batch["output_file_id"]


def test_output_order_is_shuffled_and_seeded(start_fake: StartFake) -> None:
    data = jsonl([chat(f"q {i}") for i in range(40)])

    def order(client: Client) -> list[str]:
        return [out["custom_id"] for out in client.lines(client.submit(data)["output_file_id"])]

    server, client = start_fake(seed=5)
    first, second = order(client), order(client)
    assert sorted(first) == sorted(f"r{i}" for i in range(40))
    assert first != [f"r{i}" for i in range(40)]
    assert second != first  # each batch draws its own shuffle
    server.reset()
    assert order(client) == first
    assert order(start_fake(seed=5)[1]) == first
    assert order(start_fake(seed=6)[1]) != first


def test_failed_and_malformed_lines_follow_their_rates(start_fake: StartFake) -> None:
    n_grader, n_policy = 400, 100
    bodies = [chat(grader_prompt(i)) for i in range(n_grader)] + [chat(f"p {i}") for i in range(n_policy)]
    bodies.append({"model": "m", "messages": []})  # refused per line, as live would be
    server, client = start_fake(batch_fail_rate=0.2, batch_malformed_rate=0.3, seed=11)
    batch = client.submit(jsonl(bodies))
    outputs, errors = client.lines(batch["output_file_id"]), client.lines(batch["error_file_id"])
    assert batch["request_counts"] == {"total": len(bodies), "completed": len(outputs), "failed": len(errors)}
    assert len(outputs) + len(errors) == len(bodies)
    assert 0.12 < len(errors) / len(bodies) < 0.28

    bad_request = [e for e in errors if e["custom_id"] == f"r{len(bodies) - 1}"]
    assert [e["response"]["status_code"] for e in bad_request] == [400]
    injected = [e for e in errors if e not in bad_request]
    for err in injected:
        assert err["response"]["status_code"] == 500 and err["error"] is None
        assert err["response"]["body"]["error"]["message"] == "Injected batch failure"
        assert err["response"]["body"]["error"]["type"] == "server_error"

    kinds: dict[str, int] = {}
    for out in outputs:
        i = int(out["custom_id"][1:])
        got = content(out["response"]["body"])
        assert out["response"]["status_code"] == 200
        if i >= n_grader:
            assert got == policy_reply(bodies[i]["messages"])
            continue
        if got == verdict_reply(prompt_verdict(grader_prompt(i))):
            kind = "ok"
        else:
            kind = {PROSE: "prose", STRING_VERDICT: "string_verdict"}[got]
        kinds[kind] = kinds.get(kind, 0) + 1
    graded = sum(kinds.values())
    assert abs(kinds["prose"] - kinds["string_verdict"]) <= 1
    assert 0.2 < (kinds["prose"] + kinds["string_verdict"]) / graded < 0.4
    assert server.requests_total == 0


def test_fail_always_lines_fail_in_every_batch(start_fake: StartFake) -> None:
    def item_3(body: dict[str, Any]) -> bool:
        return "item 3" in body["messages"][-1]["content"]

    _, client = start_fake(batch_fail_always=item_3)
    for _ in range(2):
        batch = client.submit(jsonl([chat(grader_prompt(i)) for i in range(6)]))
        assert batch["request_counts"] == {"total": 6, "completed": 5, "failed": 1}
        [err] = client.lines(batch["error_file_id"])
        assert err["custom_id"] == "r3" and err["response"]["status_code"] == 500
        assert "r3" not in {out["custom_id"] for out in client.lines(batch["output_file_id"])}
    only_failing = client.submit(jsonl([chat(grader_prompt(3))]))
    assert only_failing["output_file_id"] is None and only_failing["error_file_id"] is not None


def test_status_advances_with_the_clock(start_fake: StartFake) -> None:
    server, client = start_fake(batch_delay=60.0)
    data = jsonl([chat(f"q {i}") for i in range(48)])
    batch = client.submit(data)
    # Real time: nobody waits a minute, so a fresh batch cannot be done yet.
    assert batch["status"] == "validating" and batch["output_file_id"] is None
    assert batch["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert client.batch(batch["id"])["status"] != "completed"

    now = [1000.0]
    server.batch_api.clock = lambda: now[0]
    batch_id = client.submit(data)["id"]
    seen = []
    for t, status, done in [
        (3, "validating", 0),
        (7, "in_progress", 1),
        (30, "in_progress", 24),
        (55, "finalizing", 48),
    ]:
        now[0] = 1000.0 + t
        view = client.batch(batch_id)
        assert view["status"] == status, t
        assert view["request_counts"]["completed"] == done, t
        assert view["output_file_id"] is None and view["completed_at"] is None
        seen.append(view)
    assert seen[1]["in_progress_at"] is not None and seen[3]["finalizing_at"] is not None
    now[0] = 1060.0
    view = client.batch(batch_id)
    assert view["status"] == "completed" and view["request_counts"]["completed"] == 48
    assert view["completed_at"] == view["created_at"] + 60
    assert len(client.lines(view["output_file_id"])) == 48

    now[0] = 0.0
    invalid = client.submit((line("a", chat("x")) + "\n" + line("a", chat("y"))).encode())
    assert invalid["status"] == "validating" and invalid["errors"] is None
    now[0] = 7.0
    assert client.batch(invalid["id"])["errors"]["data"][0]["code"] == "duplicate_custom_id"


def test_list_finds_a_batch_by_its_input_file(start_fake: StartFake) -> None:
    _, client = start_fake()
    batches = [client.submit(jsonl([chat(f"batch {i}")])) for i in range(3)]
    status, page = client.json("GET", "/batches?limit=2")
    assert status == 200 and page["object"] == "list"
    assert [b["id"] for b in page["data"]] == [batches[2]["id"], batches[1]["id"]]
    assert page["first_id"] == batches[2]["id"] and page["last_id"] == batches[1]["id"] and page["has_more"]
    _, rest = client.json("GET", f"/batches?limit=2&after={page['last_id']}")
    assert [b["id"] for b in rest["data"]] == [batches[0]["id"]] and not rest["has_more"]
    found = [b for b in page["data"] + rest["data"] if b["input_file_id"] == batches[0]["input_file_id"]]
    assert [b["id"] for b in found] == [batches[0]["id"]]
    assert client.json("GET", "/batches?limit=0")[0] == 400


@pytest.mark.parametrize(
    ("lines", "code", "line_no"),
    [
        ([line("a", chat("x")), line("a", chat("y"))], "duplicate_custom_id", 2),
        ([line("a", chat("x")), "{not json"], "invalid_json_line", 2),
        ([line("a", chat("x"), url="/v1/embeddings")], "invalid_url", 1),
        ([line("a", chat("x"), method="GET")], "invalid_method", 1),
        ([line("a", "not an object")], "invalid_body", 1),
        ([json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}})], "invalid_custom_id", 1),
        ([line(f"r{i}", chat("x")) for i in range(3)], "too_many_tasks", None),
    ],
)
def test_invalid_input_fails_the_batch(start_fake: StartFake, lines: list[str], code: str, line_no: int | None) -> None:
    server, client = start_fake(max_batch_requests=2)
    batch = client.submit(("\n".join(lines) + "\n").encode())
    assert batch["status"] == "failed" and isinstance(batch["failed_at"], int)
    assert batch["output_file_id"] is None and batch["error_file_id"] is None
    [error] = batch["errors"]["data"]
    assert batch["errors"]["object"] == "list"
    assert (error["code"], error["line"]) == (code, line_no) and error["message"]
    assert client.batch(batch["id"])["status"] == "failed"
    assert server.batches_created == 1 and server.batch_lines_submitted == len(lines)


def test_cancel(start_fake: StartFake) -> None:
    server, client = start_fake(batch_delay=60.0)
    now = [0.0]
    server.batch_api.clock = lambda: now[0]
    batch = client.submit(jsonl([chat("x"), chat("y")]))
    status, cancelled = client.json("POST", f"/batches/{batch['id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled" and isinstance(cancelled["cancelled_at"], int)
    now[0] = 120.0
    view = client.batch(batch["id"])
    assert view["status"] == "cancelled" and view["output_file_id"] is None and view["error_file_id"] is None
    assert client.json("POST", f"/batches/{batch['id']}/cancel")[1]["status"] == "cancelled"
    done = client.submit(jsonl([chat("z")]))
    now[0] = 240.0
    assert client.batch(done["id"])["status"] == "completed"
    status, error = client.json("POST", f"/batches/{done['id']}/cancel")
    assert status == 400 and "completed" in error["error"]["message"]
    assert client.json("POST", "/batches/batch_nope/cancel")[0] == 404


def test_bad_requests_are_refused(start_fake: StartFake) -> None:
    data = jsonl([chat("x")])
    server, client = start_fake(max_file_bytes=len(data))
    status, error = client.create("file-nope")
    assert status == 404 and error["error"]["type"] == "invalid_request_error"
    assert client.request("GET", "/files/file-nope/content")[0] == 404
    assert client.json("GET", "/batches/batch_nope")[0] == 404
    status, error = client.upload(data + b"\n")
    assert status == 400 and "exceeds" in error["error"]["message"]
    assert client.upload(b"{}\n", purpose="fine-tune")[0] == 400
    assert server.files_uploaded == 0
    status, file = client.upload(data)  # exactly at the limit
    assert status == 200 and server.files_uploaded == 1
    assert client.create(file["id"], endpoint="/v1/embeddings")[0] == 400
    assert client.create(file["id"], completion_window="1h")[0] == 400
    assert server.batches_created == 0
    status, info = client.json("GET", f"/files/{file['id']}")
    assert status == 200 and info == file


def test_reset_clears_counters_but_keeps_batches(start_fake: StartFake) -> None:
    server, client = start_fake()
    batch = client.submit(jsonl([chat(grader_prompt(1))]))
    assert server.batches_created == 1 and len(server.batch_bodies) == 1
    server.reset()
    assert (server.batches_created, server.batch_lines_submitted, server.files_uploaded) == (0, 0, 0)
    assert server.batch_bodies == []
    assert client.batch(batch["id"])["status"] == "completed"
    assert len(client.lines(batch["output_file_id"])) == 1
    quiet, quiet_client = start_fake(record=False)
    quiet_client.submit(jsonl([chat("x")]))
    assert quiet.batch_lines_submitted == 1 and quiet.batch_bodies == []


def test_invalid_batch_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="batch_fail_rate"):
        FakeOpenAI(batch_fail_rate=1.5)
    with pytest.raises(ValueError, match="batch_delay"):
        FakeOpenAI(batch_delay=-1)
    with pytest.raises(ValueError, match="positive"):
        FakeOpenAI(max_batch_requests=0)


def test_main_takes_batch_flags() -> None:
    src = str(Path(healthbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = ["--port", "0", "--batch-fail-rate", "1", "--batch-malformed-rate", "0.5", "--batch-delay", "0"]
    with subprocess.Popen(
        [sys.executable, "-m", "healthbench.testing", *args], stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            client = Client(proc.stdout.readline().strip())
            batch = client.submit(jsonl([chat("x"), chat("y")]))
            assert batch["status"] == "completed" and batch["output_file_id"] is None
            assert batch["request_counts"] == {"total": 2, "completed": 0, "failed": 2}
        finally:
            proc.terminate()
            proc.wait(timeout=10)
