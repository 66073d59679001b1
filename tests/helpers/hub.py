"""A loopback stand-in for the Hugging Face hub (``HF_ENDPOINT=http://127.0.0.1:PORT``), with faults.

A real HTTP server (``http.server.ThreadingHTTPServer`` on 127.0.0.1) answering the endpoints
huggingface_hub calls to download a model, with the headers it reads (checked against
``huggingface_hub/file_download.py`` and ``utils/_http.py`` 2.4):

* ``GET /api/models/{owner}/{name}/revision/{rev}[?blobs=true]`` -> ``{"id", "sha", "siblings": [{"rfilename",
  "size", "blobId", "lfs": {"size", "sha256", "pointerSize"}}]}`` (``lfs`` for files of ``lfs_min`` bytes
  and more, as git-lfs tracks large files);
* ``HEAD|GET /{owner}/{name}/resolve/{rev}/{file}`` -> ``X-Repo-Commit``, ``ETag`` (git blob id, quoted),
  ``X-Linked-Etag``/``X-Linked-Size`` for LFS files, ``Accept-Ranges: bytes``; ``Range: bytes=N-`` answered
  206 with ``Content-Range`` (or 416 past the end);
* errors carry ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``EntryNotFound``) as the hub sends them.

Faults (attributes of :class:`Faults`, changeable while the server runs): ``api_status`` /
``resolve_status`` (answer that status), ``gated`` (resolve answers 401 GatedRepo unless the request
carries ``Authorization: Bearer <token>``), ``ignore_range``
(always 200 with the whole file), ``drop_after`` (close the connection after N body bytes, the full
Content-Length having been announced), ``truncate_to`` (serve the file as if it had N bytes: short body with
a matching Content-Length), ``corrupt`` (name of a file whose middle byte is flipped), ``silent`` (accept, read the
request, never answer), ``bytes_per_s`` (throttle), ``before_body`` (callback run before a GET body).

``requests`` records ``(method, path, range header)`` of every request.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit


def partial_sizes(cache: Path, repo_id: str) -> dict[Path, int]:
    """The partial blobs (``blobs/*.incomplete``) of model ``repo_id`` in the huggingface_hub cache ``cache``,
    each with its size in bytes, in path order; empty when the repo has no folder yet.

    A download that is running renames a partial file when it completes: a file gone between the listing
    and its stat is left out, so this can poll a running download.
    """
    from holodesk.download.cache import repo_folder

    blobs = repo_folder(repo_id, cache) / "blobs"
    sizes: dict[Path, int] = {}
    for path in sorted(blobs.glob("*.incomplete")):  # none when the folder does not exist
        try:
            sizes[path] = path.stat().st_size
        except FileNotFoundError:
            continue
    return sizes


def git_blob_id(data: bytes) -> str:
    """git's object id of a blob: sha1 of ``b"blob <size>\\0" + data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Faults:
    api_status: int | None = None
    resolve_status: int | None = None
    gated: bool = False
    token: str | None = None
    ignore_range: bool = False
    drop_after: int | None = None
    truncate_to: int | None = None
    corrupt: str | None = None
    silent: bool = False
    bytes_per_s: float | None = None
    before_body: Callable[[str], None] | None = None


@dataclass
class HubRepo:
    repo_id: str
    commit: str
    files: dict[str, bytes]


@dataclass
class LoopbackHub:
    """The server; use :func:`loopback_hub` to start and stop it."""

    lfs_min: int = 1024
    repos: dict[str, HubRepo] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""
    released: threading.Event = field(default_factory=threading.Event)

    def add_repo(self, repo_id: str, files: dict[str, bytes]) -> HubRepo:
        """Publish ``files`` (name -> bytes) as ``repo_id`` at a fresh commit."""
        repo = HubRepo(repo_id, secrets.token_hex(20), dict(files))
        self.repos[repo_id] = repo
        return repo

    def gets(self, name: str) -> list[str | None]:
        """Range headers of the GET requests for the file ``name`` (None: no Range)."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + name)]

    def listing(self, repo: HubRepo) -> dict[str, Any]:
        siblings = []
        for name, data in repo.files.items():
            entry: dict[str, Any] = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
            if len(data) >= self.lfs_min:
                entry["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            siblings.append(entry)
        return {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit, "private": False,
                "siblings": siblings}


def _handler(hub: LoopbackHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _error(self, status: int, code: str | None = None, message: str = "", commit: str | None = None,
                   ) -> None:
            body = json.dumps({"error": message or f"error {status}"}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            if message:
                self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _serve(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            faults = hub.faults
            if faults.silent:
                hub.released.wait()
                self.close_connection = True
                return
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"]:
                self._api(parts[2:])
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
            else:
                self._error(404, message="no such endpoint")

        def _api(self, rest: list[str]) -> None:
            faults = hub.faults
            repo_id = "/".join(rest[:2])
            if faults.api_status:
                self._error(faults.api_status, message="the stand-in hub is failing on purpose")
                return
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            body = json.dumps(hub.listing(repo)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _resolve(self, repo_id: str, revision: str, name: str) -> None:
            faults = hub.faults
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            if faults.gated and self.headers.get("Authorization") != f"Bearer {faults.token}":
                self._error(401, "GatedRepo", "Access to model is restricted. You must have access to it and "
                            "be authenticated to access it. Please log in.", repo.commit)
                return
            if faults.resolve_status:
                self._error(faults.resolve_status, message="the stand-in hub is failing on purpose")
                return
            if revision not in ("main", repo.commit) or name not in repo.files:
                self._error(404, "EntryNotFound", f"{name} does not exist", repo.commit)
                return
            data = repo.files[name]
            if faults.truncate_to is not None:
                data = data[:faults.truncate_to]
            if faults.corrupt == name:
                middle = len(data) // 2
                data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
            full = repo.files[name]
            start = 0
            wanted = self.headers.get("Range")
            if wanted and not faults.ignore_range and wanted.startswith("bytes=") and wanted.endswith("-"):
                start = int(wanted[len("bytes="):-1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            body = data[start:]
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{git_blob_id(full)}"')
            if len(full) >= hub.lfs_min:
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(full).hexdigest()}"')
                self.send_header("X-Linked-Size", str(len(full)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(body)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            if faults.before_body is not None:
                faults.before_body(name)
            self._send_body(body)

        def _send_body(self, body: bytes) -> None:
            faults = hub.faults
            limit = len(body) if faults.drop_after is None else min(len(body), faults.drop_after)
            step = 64 * 1024
            started = time.monotonic()
            sent = 0
            try:
                while sent < limit:
                    piece = body[sent:min(limit, sent + step)]
                    self.wfile.write(piece)
                    sent += len(piece)
                    if faults.bytes_per_s:
                        lag = sent / faults.bytes_per_s - (time.monotonic() - started)
                        if lag > 0 and hub.released.wait(lag):
                            break
            except (BrokenPipeError, ConnectionResetError):
                pass
            if sent < len(body):
                self.close_connection = True

        def do_GET(self) -> None:
            self._serve()

        def do_HEAD(self) -> None:
            self._serve()

    return Handler


@contextmanager
def loopback_hub(lfs_min: int = 1024) -> Iterator[LoopbackHub]:
    """Start a :class:`LoopbackHub` on a free port of 127.0.0.1; stop it (and release silent or throttled
    handlers) on exit."""
    hub = LoopbackHub(lfs_min=lfs_min)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="loopback hub", daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
