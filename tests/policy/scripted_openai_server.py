"""A scripted OpenAI-compatible HTTP server for the remote-policy tests. NOT a model server.

It is a real HTTP server (stdlib ``http.server``) on 127.0.0.1, started as its own process by the
tests. It implements ``GET /v1/models`` and ``POST /v1/chat/completions`` with vLLM's status codes and
error bodies (401 ``{"error": "Unauthorized"}``, 404 "The model `x` does not exist.", 400 "At most N
image(s) may be provided in one prompt. ..."), and answers chat requests from a script of behaviours
that the test sets through control routes under ``/_control`` (not part of the OpenAI API):

* ``POST /_control/script`` ``{"chat": [behaviour, ...]}`` -- replies for the next chat requests, in
  order; when the list is used up, the reply is ``{"content": <--default-content>}``.
* ``GET /_control/requests`` -- every request received (method, path, whether the bearer key matched,
  JSON body), oldest first.
* ``POST /_control/reset`` -- clear script and request log.

A behaviour is a dict: ``content`` (assistant text), ``finish_reason`` (default "stop"), ``status`` +
``error`` (an error reply; ``error`` may be a dict, a string or raw text via ``raw_body``),
``headers`` (extra reply headers), ``drop`` (close the connection without replying), ``delay_s``,
``trickle_s`` (send the reply's headers, then one byte of its body every that many seconds, never ending),
``body`` (a 200 reply of this raw text), ``endless_chunks`` (a 200 reply whose chunked body sends that many
64 KiB chunks of spaces, then ``{}``), ``reasoning`` (the reply's reasoning; a request with ``"stream": true`` gets
server-sent events, see ``Handler._stream``: ``reasoning_field``, ``hold_after``, ``endless_reasoning``).
``POST /_control/release`` lets a held stream go on.

Run: ``python scripted_openai_server.py [--api-key K] [--models a,b] [--limit-images N]
[--reject-response-format]``; it prints ``PORT <n>`` on stdout once listening and exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_REQUEST_BYTES = 64 * 1024 * 1024


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.api_key: str | None = args.api_key
        self.models: list[str] = [m for m in args.models.split(",") if m]
        self.limit_images: int | None = args.limit_images
        self.reject_response_format: bool = args.reject_response_format
        self.default_content: str = args.default_content
        self.lock = threading.Lock()
        self.script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()


def count_images(body: dict[str, Any]) -> int:
    n = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            n += sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url")
    return n


class Handler(BaseHTTPRequestHandler):
    server_version = "scripted-openai/1"
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    # -- helpers
    def _reply(self, status: int, payload: Any, headers: dict[str, str] | None = None, raw: str | None = None):
        data = raw.encode() if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if raw is None else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, every_s: float) -> None:
        """Announce a 1 MB JSON body, then send one byte every ``every_s`` seconds until the client leaves."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(1_000_000))
        self.end_headers()
        self.wfile.write(b"{")
        try:
            while True:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(every_s)
        except OSError:  # the client closed the connection
            pass

    def _chunked(self, chunks: int) -> None:
        """A chunked 200 reply of ``chunks`` 64 KiB chunks of spaces (valid JSON whitespace), then ``{}``."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = b" " * 65536
        try:
            for _ in range(chunks):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            self.wfile.write(b"2\r\n{}\r\n0\r\n\r\n")
        except OSError:  # the client closed the connection
            pass

    def _stream(self, model: Any, behaviour: dict[str, Any], content: str, images: int) -> None:
        """A streamed chat completion as vLLM sends it: server-sent events, one ``chat.completion.chunk`` each:
        the reasoning word by word in ``delta.<reasoning_field>`` (default ``reasoning_content``), then the
        content, the finish reason, the usage and ``[DONE]``. With ``hold_after`` N, the stream stops after N
        reasoning events until ``POST /_control/release``; with ``drop_after`` N, the connection is closed after N
        reasoning events, the chunked body unfinished (a server or proxy failing mid-stream: the client's read
        fails and the request is retried); ``endless_reasoning`` sends reasoning events forever."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        field = behaviour.get("reasoning_field", "reasoning_content")

        def event(payload: Any) -> None:
            data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        words = [w for w in behaviour.get("reasoning", "").split(" ")]
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)] if behaviour.get("reasoning") else []
        try:
            event(chunk({"role": "assistant"}))
            if behaviour.get("endless_reasoning"):
                while True:
                    event(chunk({field: "x" * 4096}))
            for i, piece in enumerate(pieces):
                if i == behaviour.get("hold_after"):
                    self.state.release.wait(60)
                if i == behaviour.get("drop_after"):
                    return  # close_connection: the socket closes with the chunked body unfinished
                event(chunk({field: piece}))
            event(chunk({"content": content}))
            event(chunk({}, behaviour.get("finish_reason", "stop")))
            event({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model, "choices": [],
                   "usage": {"prompt_tokens": 100 * (images + 1), "completion_tokens": len(content) // 4,
                             "total_tokens": 100 * (images + 1) + len(content) // 4}})
            event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client closed the connection
            pass

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _auth_ok(self) -> bool:
        if self.state.api_key is None:
            return True
        return self.headers.get("Authorization") == f"Bearer {self.state.api_key}"

    def _record(self, body: Any) -> None:
        with self.state.lock:
            self.state.requests.append(
                {"method": self.command, "path": self.path, "auth_ok": self._auth_ok(),
                 "auth_sent": "Authorization" in self.headers, "body": body, "t": time.time()}
            )

    # -- routes
    def do_GET(self) -> None:
        if self.path == "/_control/requests":
            with self.state.lock:
                self._reply(200, self.state.requests)
            return
        self._record(None)
        if self.path == "/v1/models":
            if not self._auth_ok():
                self._reply(401, {"error": "Unauthorized"})
                return
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in self.state.models]
            self._reply(200, {"object": "list", "data": data})
            return
        self._reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        try:
            body = self._read_body()
        except ValueError as exc:
            self._reply(400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}})
            return
        if self.path == "/_control/script":
            with self.state.lock:
                self.state.script = list(body.get("chat", []))
            self._reply(200, {"ok": True})
            return
        if self.path == "/_control/release":
            self.state.release.set()
            self._reply(200, {"ok": True})
            return
        if self.path == "/_control/reset":
            with self.state.lock:
                self.state.script = []
                self.state.requests = []
            self.state.release.clear()
            self._reply(200, {"ok": True})
            return
        self._record(body)
        if self.path != "/v1/chat/completions":
            self._reply(404, {"detail": "Not Found"})
            return
        self._chat(body or {})

    def _chat(self, body: dict[str, Any]) -> None:
        st = self.state
        if not self._auth_ok():
            self._reply(401, {"error": "Unauthorized"})
            return
        model = body.get("model")
        if model not in st.models:
            self._reply(404, {"error": {"message": f"The model `{model}` does not exist.",
                                        "type": "NotFoundError", "param": None, "code": 404}})
            return
        images = count_images(body)
        if st.limit_images is not None and images > st.limit_images:
            msg = (f"At most {st.limit_images} image(s) may be provided in one prompt. "
                   "Set `--limit-mm-per-prompt` to increase this limit.")
            self._reply(400, {"error": {"message": msg, "type": "BadRequestError", "param": None, "code": 400}})
            return
        if st.reject_response_format and "response_format" in body:
            msg = "response_format json_schema is not supported by this server"
            self._reply(400, {"error": {"message": msg, "type": "BadRequestError", "param": "response_format",
                                        "code": 400}})
            return
        with st.lock:
            behaviour = st.script.pop(0) if st.script else {"content": st.default_content}
        if behaviour.get("delay_s"):
            time.sleep(float(behaviour["delay_s"]))
        if behaviour.get("trickle_s"):
            self._trickle(float(behaviour["trickle_s"]))
            return
        if behaviour.get("endless_chunks"):
            self._chunked(int(behaviour["endless_chunks"]))
            return
        if "body" in behaviour:  # a 200 reply whose body is this text as is
            self._reply(200, None, behaviour.get("headers"), behaviour["body"])
            return
        if behaviour.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status = int(behaviour.get("status", 200))
        if status != 200:
            self._reply(status, behaviour.get("error", {}), behaviour.get("headers"), behaviour.get("raw_body"))
            return
        content = behaviour.get("content", "")
        if body.get("stream"):
            self._stream(model, behaviour, content, images)
            return
        self._reply(200, {
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                                 **({"reasoning_content": behaviour["reasoning"]}
                                                    if "reasoning" in behaviour else {})},
                         "finish_reason": behaviour.get("finish_reason", "stop")}],
            "usage": {"prompt_tokens": 100 * (images + 1), "completion_tokens": len(content) // 4,
                      "total_tokens": 100 * (images + 1) + len(content) // 4},
        }, behaviour.get("headers"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--models", default="Holotron-12B")
    ap.add_argument("--limit-images", type=int, default=None)
    ap.add_argument("--reject-response-format", action="store_true")
    ap.add_argument("--default-content", default="")
    args = ap.parse_args()
    Handler.state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        sys.exit(0)


if __name__ == "__main__":
    main()
