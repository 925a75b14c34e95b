"""A client of the fake's files and batches routes, for the tests of its Batch API (`FakeOpenAI` started by the
`start_fake` fixture comes with one)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from healthbench.testing import FakeOpenAI

# Never route loopback through a proxy configured in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_BOUNDARY = "fakebatch-test-boundary"


class Client:
    """A minimal synchronous client for the fake's files and batches routes."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def request(self, method: str, path: str, data: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with _OPENER.open(req, timeout=30) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, bytes(exc.read())

    def json(self, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        status, raw = self.request(method, path, data, "application/json" if data is not None else "")
        return status, json.loads(raw)

    def upload(self, data: bytes, purpose: str = "batch") -> tuple[int, Any]:
        head = f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
        head += f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        head += "Content-Type: application/jsonl\r\n\r\n"
        body = head.encode() + data + f"\r\n--{_BOUNDARY}--\r\n".encode()
        status, raw = self.request("POST", "/files", body, f"multipart/form-data; boundary={_BOUNDARY}")
        return status, json.loads(raw)

    def create(self, file_id: str, **fields: Any) -> tuple[int, Any]:
        request = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        return self.json("POST", "/batches", {**request, **fields})

    def submit(self, data: bytes) -> dict[str, Any]:
        status, file = self.upload(data)
        assert status == 200, file
        status, batch = self.create(file["id"])
        assert status == 200, batch
        return dict(batch)

    def batch(self, batch_id: str) -> dict[str, Any]:
        status, batch = self.json("GET", f"/batches/{batch_id}")
        assert status == 200, batch
        return dict(batch)

    def lines(self, file_id: str | None) -> list[dict[str, Any]]:
        assert file_id is not None
        status, raw = self.request("GET", f"/files/{file_id}/content")
        assert status == 200
        return [json.loads(text) for text in raw.decode().splitlines()]

    def live(self, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = self.json("POST", "/chat/completions", body)
        assert status == 200
        return dict(reply)


StartFake = Callable[..., tuple[FakeOpenAI, Client]]
"""The `start_fake` fixture: a FakeOpenAI started with the given arguments, and its client."""
