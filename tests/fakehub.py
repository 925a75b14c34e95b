"""A loopback fake of the two Hugging Face Hub requests `hf_hub_download` makes for one file.

huggingface_hub (file_download.py) sends `HEAD {endpoint}/datasets/{repo}/resolve/{revision}/{filename}`,
reads the commit from `X-Repo-Commit`, the version from `ETag` and the size from `Content-Length`, then
GETs the same path at the commit it was given. This server answers just those, from commits held in
memory, the way the Hub does: `X-Error-Code` on errors, 401 without a token and 403 with a wrong one when
the repository is gated. It records each request's method and path, never a token.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import unquote


@dataclass
class _State:
    repo_id: str
    token: str | None
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    status: int | None = None
    status_method: str | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    authorized: list[bool] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: _State

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest shows what a failing test needs."""

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _answer(self, *, send_body: bool) -> None:
        state = self.state
        auth = self.headers.get("Authorization")
        with state.lock:
            state.requests.append((self.command, self.path))
            state.authorized.append(state.token is not None and auth == f"Bearer {state.token}")
            if state.status is not None and state.status_method in (None, self.command):
                return self._error(state.status, "GatedRepo" if state.status in (401, 403) else None)
            if state.token is not None and auth != f"Bearer {state.token}":
                return self._error(401 if auth is None else 403, "GatedRepo")
            prefix = f"/datasets/{state.repo_id}/resolve/"
            if not self.path.startswith(prefix) or "/" not in self.path[len(prefix) :]:
                return self._error(404, "RepoNotFound")
            revision, filename = self.path[len(prefix) :].split("/", 1)
            commit = state.refs.get(unquote(revision), unquote(revision))
            if commit not in state.commits:
                return self._error(404, "RevisionNotFound")
            body = state.commits[commit].get(unquote(filename))
            if body is None:
                return self._error(404, "EntryNotFound", commit)
        self.send_response(200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, commit: str | None = None) -> None:
        self.send_response(status)
        if code is not None:
            self.send_header("X-Error-Code", code)
        if commit is not None:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", "0")
        self.end_headers()


class FakeHub:
    """A Hub holding one dataset repository, served on 127.0.0.1 for as long as the `with` block lasts."""

    def __init__(self, repo_id: str, *, token: str | None = None) -> None:
        self._state = _State(repo_id=repo_id, token=token)
        handler = type("Handler", (_Handler,), {"state": self._state})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """The endpoint to put in HF_ENDPOINT."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        """Every request so far, as (method, path)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def authorized(self) -> list[bool]:
        """For each request, whether it carried the repository's token."""
        with self._state.lock:
            return list(self._state.authorized)

    def commit(self, files: dict[str, bytes], *, ref: str = "main") -> str:
        """A new commit holding `files`, which `ref` then points at; its 40-hex sha is returned."""
        with self._state.lock:
            sha = hashlib.sha1(f"{len(self._state.commits)}".encode() + b"".join(files.values())).hexdigest()
            self._state.commits[sha] = dict(files)
            self._state.refs[ref] = sha
        return sha

    def rewrite(self, commit: str, filename: str, body: bytes) -> None:
        """Change a file inside an existing commit, as a drifted mirror would."""
        with self._state.lock:
            self._state.commits[commit][filename] = body

    def fail_with(self, status: int | None, *, method: str | None = None) -> None:
        """Answer every request (or every one with `method`) with this status; None answers normally again."""
        with self._state.lock:
            self._state.status = status
            self._state.status_method = method

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
