"""The HTTP side of an OpenAI-compatible chat-completions server (vLLM serving Holotron-12B): one request with
bounded retries that ends by a deadline, however the server sends; a reply body of bounded size; and every
failure turned into a :class:`~holodesk.errors.PolicyError` that says what to do.

HTTP client: ``httpx`` (already a Holodesk dependency) rather than the ``openai`` package. We need
exactly one call shape, full control of which failures are retried (429 / 5xx / connection errors
only, with our own bounded backoff), the raw error bodies (vLLM's image-limit and model-not-found
texts drive the advice we print), and vLLM's extra request fields; the ``openai`` client would add a
dependency, retry 408/409 on its own schedule, and wrap those bodies in its own exception types.

The API key is sent as ``Authorization: Bearer ...`` and appears nowhere else: not in ``repr``, logs or
error messages (server error texts are scrubbed of it before they are quoted). :class:`~holodesk.policy.remote.
RemotePolicy` asks through it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from holodesk.errors import PolicyError

log = logging.getLogger(__name__)

MAX_RETRIES = 10
"""Upper bound on ``retries`` so a misconfiguration cannot loop for long."""

MAX_REPLY_BYTES = 8 * 1024 * 1024
"""Most bytes of one HTTP reply body kept in memory (a chat reply of a few thousand tokens is under 100 kB);
a longer reply is cut and the step fails with :class:`ReplyTooLargeError`."""

_IMAGE_LIMIT_RE = re.compile(r"at most (\d+) image", re.IGNORECASE)
_IMAGE_LIMIT_WORDS = ("limit-mm-per-prompt", "limit_mm_per_prompt", "image(s) may be provided", "too many image")
_CONTEXT_WORDS = ("maximum context length", "max_model_len", "context length", "prompt is too long",
                  "too many tokens", "longer than the maximum")


class ReplyTooLargeError(PolicyError):
    """The server's reply body is longer than :data:`MAX_REPLY_BYTES`; it was cut, not kept."""


class _OutOfTime(Exception):
    """Internal: the request's deadline passed before its reply was complete."""


class ServerUnreachableError(PolicyError):
    """No HTTP reply at all: connection refused, unknown host, connection reset (after retries)."""


class TooManyImagesError(PolicyError):
    """The server refused the number of images in one request (vLLM ``--limit-mm-per-prompt``).

    Attributes:
        server_limit: the most images the server accepts per request, when its message says so.
        sent: how many images this request carried.
    """

    def __init__(self, message: str, *, server_limit: int | None, sent: int, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.server_limit = server_limit
        self.sent = sent


class _RetryableFailure(Exception):
    """Internal: one attempt failed in a way that may be retried."""

    def __init__(self, kind: str, detail: str, response: httpx.Response | None = None) -> None:
        super().__init__(detail)
        self.kind = kind  # "connect", "429", "5xx"
        self.detail = detail
        self.response = response


def normalize_base_url(endpoint: str) -> str:
    """The API base URL for ``endpoint``: ``http://host:8000`` -> ``http://host:8000/v1``.

    A URL that already has a path (``.../v1``, a proxy prefix) is kept as given, minus a trailing
    slash.

    Raises:
        PolicyError: when ``endpoint`` is not an http(s) URL with a host.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PolicyError(
            f"{endpoint!r} is not a server URL",
            hint="Give the full address of the OpenAI-compatible server, e.g. http://gpu-box:8000/v1.",
        )
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


@dataclass(kw_only=True, eq=False)
class ChatServer:
    """An OpenAI-compatible server as one client talks to it: its base URL, the served model, the key, and how
    long and how often a request is tried.

    Attributes:
        endpoint: the API base URL (:func:`normalize_base_url`).
        model: the served model name (named in errors; :meth:`http_error` checks it against ``GET /models``).
        timeout_s: seconds allowed for one request, retries included (connect capped at 10 s).
        retries: extra attempts after the first for 429 / 5xx / connection errors, with exponential backoff
            ``backoff_s * 2**n`` capped at ``backoff_max_s`` (a ``Retry-After`` header is honoured up to it).
    Args:
        api_key: bearer token, or None (kept out of every attribute a repr or log shows).
        transport: optional ``httpx`` transport (tests).
    """

    endpoint: str
    model: str
    timeout_s: float
    retries: int
    backoff_s: float
    backoff_max_s: float
    api_key: InitVar[str | None]
    transport: InitVar[httpx.BaseTransport | None] = None

    def __post_init__(self, api_key: str | None, transport: httpx.BaseTransport | None) -> None:
        self._api_key = api_key or None
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.Client(
            base_url=self.endpoint,
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            transport=transport,
            follow_redirects=False,
        )

    @property
    def has_key(self) -> bool:
        """True when requests carry an API key."""
        return self._api_key is not None

    def close(self) -> None:
        """Close the HTTP connection pool. Idempotent."""
        self._client.close()

    def list_models(self) -> list[str]:
        """Model ids the server serves (``GET /models``), one attempt per retry policy.

        Raises:
            PolicyError: unreachable server, rejected key, or a reply that is not a model list.
        """
        resp, _ = self.send("GET", "/models", None)
        if resp.status_code != 200:
            raise self.http_error(resp, images=0, path="/models", max_images=0, list_on_404=False)
        try:
            items = resp.json().get("data", [])
            return [str(item["id"]) for item in items if isinstance(item, dict) and "id" in item]
        except (ValueError, AttributeError, KeyError, RecursionError) as exc:
            raise PolicyError(
                f"The reply of {self.endpoint}/models is not an OpenAI model list.",
                hint="Check that the endpoint is an OpenAI-compatible server (e.g. vLLM) and ends in /v1.",
            ) from exc

    def deadline(self, task_deadline: float | None) -> tuple[float, str]:
        """The deadline of one request, ``(time.monotonic() seconds, what sets it in words)``: ``timeout_s``
        from now, or the task's wall-time cap when that comes first."""
        own = time.monotonic() + self.timeout_s
        if task_deadline is not None and task_deadline < own:
            left = max(0.0, task_deadline - time.monotonic())
            return task_deadline, f"{left:.1f} s, the time left of the task's wall-time cap (--max-seconds)"
        return own, f"{self.timeout_s:g} s"

    def send(
        self, method: str, path: str, body: dict[str, Any] | None, *, deadline: tuple[float, str] | None = None,
        chunk_reader: Callable[[], Callable[[bytes], None]] | None = None,
    ) -> tuple[httpx.Response, dict[str, Any]]:
        """One request with bounded retries on 429 / 5xx / connection errors, all ended by ``deadline`` (from
        :meth:`_deadline`; None: ``timeout_s`` from now). ``chunk_reader`` is called at the start of each attempt
        for the function that gets each piece of that attempt's reply body as it arrives, on the calling thread (a
        streamed reply, :class:`SseEvents`): a retried reply is read from its start by a new reader, never appended
        to the failed one's. The body is also kept whole, up to :data:`MAX_REPLY_BYTES`.

        Returns:
            (final non-retryable response, {"attempts": int, "request_ms": float of the last attempt})
        Raises:
            ReplyTooLargeError: a reply body longer than :data:`MAX_REPLY_BYTES`.
            PolicyError: connection failure, no complete reply by the deadline, or 429 / 5xx on every attempt.
        """
        until, limit = deadline if deadline is not None else self.deadline(None)
        attempts = 1 + self.retries
        t_first = time.perf_counter()
        failure: _RetryableFailure | None = None
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                resp = self._exchange(method, path, body, until, chunk_reader() if chunk_reader else None)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError, httpx.WriteError) as exc:
                failure = _RetryableFailure("connect", self.scrub(str(exc)) or type(exc).__name__)
            except (httpx.TimeoutException, _OutOfTime) as exc:
                raise self._out_of_time(limit) from exc
            except httpx.HTTPError as exc:
                raise PolicyError(
                    f"Request to {self.endpoint} failed: {type(exc).__name__}: {self.scrub(str(exc))}"
                ) from exc
            else:
                status = resp.status_code
                if status == 429 or 500 <= status <= 599:
                    kind = "429" if status == 429 else "5xx"
                    failure = _RetryableFailure(kind, self.server_message(resp), resp)
                else:
                    return resp, {"attempts": attempt + 1, "request_ms": (time.perf_counter() - t0) * 1000.0}
            if attempt + 1 < attempts:
                delay = self._backoff(attempt, failure.response)
                if time.monotonic() + delay >= until:
                    break  # no time left for another attempt
                log.info(
                    "%s %s failed (%s); retry %d of %d in %.2f s",
                    method, path, failure.kind, attempt + 1, self.retries, delay,
                )
                time.sleep(delay)
        assert failure is not None
        raise self._retry_exhausted(failure, attempt + 1, time.perf_counter() - t_first)

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None, until: float,
                  on_chunk: Callable[[bytes], None] | None = None) -> httpx.Response:
        """One HTTP exchange that ends by ``until`` (``time.monotonic()`` seconds), however the server sends.

        The exchange runs in a worker thread and this thread waits for it until ``until``: a reply that
        trickles (each read within httpx's read timeout) or never ends cannot hold the step past it. A worker
        left behind stops at its next chunk of the body or at its read timeout (a server that trickles its
        headers keeps it, and its connection, until it stops sending). With ``on_chunk``, the worker hands each
        chunk of the body to this thread, which calls ``on_chunk`` with it while it waits.

        Returns:
            the response, its body read (at most :data:`MAX_REPLY_BYTES`).
        Raises:
            _OutOfTime: the reply was not complete by ``until``.
            ReplyTooLargeError: the body is longer than :data:`MAX_REPLY_BYTES`.
            httpx.HTTPError: from the exchange.
        """
        outcome: dict[str, Any] = {}
        arrived: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # chunks for on_chunk; None: done
        abandoned = threading.Event()

        def work() -> None:
            try:
                outcome["response"] = self._read_reply(method, path, body, until, abandoned,
                                                       arrived.put if on_chunk is not None else None)
            except BaseException as exc:  # handed to the waiting thread, which raises it
                outcome["error"] = exc
            finally:
                arrived.put(None)

        threading.Thread(target=work, name="holodesk-policy-request", daemon=True).start()
        while True:
            try:
                chunk = arrived.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                abandoned.set()
                raise _OutOfTime() from None
            if chunk is None:
                break
            if on_chunk is not None:
                on_chunk(chunk)
        if "error" in outcome:
            raise outcome["error"]
        response: httpx.Response = outcome["response"]
        return response

    def _read_reply(self, method: str, path: str, body: dict[str, Any] | None, until: float,
                    abandoned: threading.Event, arrived: Callable[[bytes], None] | None = None) -> httpx.Response:
        """Send the request and read its reply body in chunks, checking size and ``abandoned`` at each, and
        handing each of a 200 reply to ``arrived`` when given."""
        left = max(0.001, until - time.monotonic())
        timeout = httpx.Timeout(left, connect=min(10.0, left))
        with self._client.stream(method, path, json=body, timeout=timeout) as resp:
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
                raise self._too_large(f"it announces {int(declared)} bytes")
            content = bytearray()
            for chunk in resp.iter_bytes():
                if abandoned.is_set():
                    raise _OutOfTime()
                content += chunk
                if len(content) > MAX_REPLY_BYTES:
                    raise self._too_large(f"more than {MAX_REPLY_BYTES} bytes arrived")
                if arrived is not None and resp.status_code == 200:  # an error's body is no stream
                    arrived(chunk)
            # The body is decoded already: the rebuilt response carries no transfer or content encoding.
            headers = [(k, v) for k, v in resp.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
            return httpx.Response(resp.status_code, headers=headers, content=bytes(content), request=resp.request)

    def _too_large(self, what: str) -> ReplyTooLargeError:
        return ReplyTooLargeError(
            f"The reply of {self.endpoint} is longer than Holodesk keeps ({MAX_REPLY_BYTES // (1024 * 1024)} MiB): "
            f"{what}; it was cut and the step failed.",
            hint="Check that the endpoint is an OpenAI-compatible chat server (e.g. vLLM) and that its reply "
            "token limit is sane; a model reply is a few kilobytes.",
        )

    def _out_of_time(self, limit: str) -> PolicyError:
        return PolicyError(
            f"The server at {self.endpoint} sent no reply within {limit} (a reply still arriving then is cut).",
            hint="The server may be overloaded or still loading the model: check the server's log, "
            "or give it more time with the setting request_timeout_s (Settings > Advanced > Server "
            "reply timeout, or HOLODESK_REQUEST_TIMEOUT_S), or the task more time with --max-seconds.",
        )

    def _backoff(self, attempt: int, resp: httpx.Response | None) -> float:
        """Seconds to wait before retry ``attempt + 1``: exponential, Retry-After honoured, capped."""
        delay = min(self.backoff_max_s, self.backoff_s * (2.0**attempt))
        if resp is not None:
            header = resp.headers.get("retry-after", "")
            with contextlib.suppress(ValueError):
                delay = min(self.backoff_max_s, max(delay, float(header)))
        return delay

    def _retry_exhausted(self, failure: _RetryableFailure, attempts: int, elapsed_s: float) -> PolicyError:
        tried = f"{attempts} attempt{'s' if attempts != 1 else ''} over {elapsed_s:.1f} s"
        if failure.kind == "connect":
            refused = "refused" in failure.detail.lower()
            what = "connection refused" if refused else failure.detail
            return ServerUnreachableError(
                f"Cannot connect to the policy server at {self.endpoint}: {what} ({tried}).",
                hint="Check that the server is running (e.g. `vllm serve ...`, see docs/scaling.md) and "
                "that the endpoint's host and port are right; `holodesk doctor` tests the connection.",
            )
        assert failure.response is not None
        code = failure.response.status_code
        if failure.kind == "429":
            return PolicyError(
                f"The server at {self.endpoint} is rate limiting requests (HTTP 429) on all {tried}.",
                hint="Wait a little and try again, point fewer agents at this server, or give it more "
                "capacity (e.g. vLLM --max-num-seqs, more replicas; see docs/scaling.md).",
            )
        return PolicyError(
            f"The server at {self.endpoint} failed with HTTP {code} on all {tried}: {failure.detail}",
            hint="Check the server's log: it may be out of GPU memory, crashed, or still loading the model.",
        )

    def http_error(
        self, resp: httpx.Response, *, images: int, path: str, max_images: int, list_on_404: bool = True
    ) -> PolicyError:
        """Turn a final non-200 reply into a PolicyError that says what to do.

        ``images``: how many images the request carried; ``max_images``: the screenshots the policy keeps in
        a prompt (named in the advice). ``list_on_404``: on 404, ask ``GET /models`` whether the model or the
        URL path is wrong.
        """
        code = resp.status_code
        message = self.server_message(resp)
        low = message.lower()
        if code in (401, 403):
            if self._api_key is None:
                return PolicyError(
                    f"The server at {self.endpoint} requires an API key (HTTP {code}) and none is set.",
                    hint="Store the key for this server in the system keychain (Holodesk settings), or set "
                    "HOLODESK_API_KEY for this session only.",
                )
            return PolicyError(
                f"The server at {self.endpoint} rejected the API key (HTTP {code}).",
                hint="Store the right key for this server in the system keychain (Holodesk settings), or "
                "set HOLODESK_API_KEY for this session only. The key itself is never shown.",
            )
        if code == 404:
            return self._not_found(message, path, list_models=list_on_404)
        if code in (400, 413, 422) and self.is_image_limit(low):
            match = _IMAGE_LIMIT_RE.search(message)
            limit = int(match.group(1)) if match else None
            said = f"at most {limit} image(s)" if limit is not None else "fewer images"
            target = f"{limit} or less" if limit is not None else "a lower number"
            return TooManyImagesError(
                f"The server at {self.endpoint} accepts {said} per request, but this step sent {images}.",
                server_limit=limit,
                sent=images,
                hint=f"Lower 'screenshots kept in the prompt' (now {max_images}) to {target}, or "
                "restart the server with a larger --limit-mm-per-prompt (see docs/scaling.md).",
            )
        if code == 413:
            return PolicyError(
                f"The server at {self.endpoint} refused the request as too large (HTTP 413).",
                hint="Send smaller images: choose JPEG, set a maximum image side, or keep fewer "
                "screenshots in the prompt.",
            )
        if code in (400, 422) and any(word in low for word in _CONTEXT_WORDS):
            return PolicyError(
                f"The prompt is longer than the server allows: {message}",
                hint=f"Keep fewer screenshots in the prompt (now {max_images}) or set a maximum image "
                "side; or restart the server with a larger --max-model-len.",
            )
        if code in (400, 422):
            return PolicyError(
                f"The server at {self.endpoint} refused the request (HTTP {code}): {message}",
                hint="Check the model name and the server's flags (docs/scaling.md).",
            )
        return PolicyError(f"Unexpected HTTP {code} from {self.endpoint}{path}: {message}")

    def _not_found(self, message: str, path: str, *, list_models: bool) -> PolicyError:
        models: list[str] | None = None
        if list_models:
            with contextlib.suppress(PolicyError):
                models = self.list_models()
        if models is not None and self.model not in models:
            listed = ", ".join(models) if models else "no models"
            return PolicyError(
                f"Model {self.model!r} is not served at {self.endpoint}. The server has: {listed}.",
                hint="Pass one of those names as the model (vLLM names it with --served-model-name).",
            )
        return PolicyError(
            f"{self.endpoint}{path} was not found (HTTP 404): {message}",
            hint="Check that the endpoint URL points at the OpenAI-compatible API, usually ending in /v1 "
            "(e.g. http://gpu-box:8000/v1).",
        )

    @staticmethod
    def is_image_limit(low: str) -> bool:
        return bool(_IMAGE_LIMIT_RE.search(low)) or any(word in low for word in _IMAGE_LIMIT_WORDS)

    def server_message(self, resp: httpx.Response) -> str:
        """The error text of an OpenAI / vLLM error body (``{"error": {"message": ...}}`` and variants),
        scrubbed of the API key and cut to 500 characters."""
        text = ""
        try:
            data = resp.json()
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            err = data.get("error")
            if isinstance(err, dict):
                text = str(err.get("message") or "")
            elif isinstance(err, str):
                text = err
            if not text:
                text = str(data.get("message") or data.get("detail") or "")
        if not text:
            text = resp.text.strip() or resp.reason_phrase
        text = self.scrub(text)
        return text if len(text) <= 500 else text[:500] + "…"

    def scrub(self, text: str) -> str:
        """Remove the API key from a text that will be shown or logged."""
        return text.replace(self._api_key, "***") if self._api_key else text



def describe_request(body: dict[str, Any]) -> str:
    """A short, key-free summary of a chat request for debug logs (no image bytes)."""
    parts = 0
    images = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            parts += len(content)
            images += sum(1 for p in content if p.get("type") == "image_url")
        else:
            parts += 1
    return json.dumps(
        {"model": body.get("model"), "messages": len(body.get("messages", [])), "parts": parts,
         "images": images, "schema": "response_format" in body}
    )


class SseEvents:
    """Server-sent events read from a body as it arrives: the ``data:`` lines of each event (an event ends at a
    blank line), as an OpenAI-compatible server streams a chat completion (``"stream": true``: one JSON chunk
    per event, ``data: [DONE]`` last; WHATWG HTML "Server-sent events"). Other fields (``event:``, ``id:``,
    ``retry:``) and comments are skipped. Written here rather than with httpx-sse because the body's bytes must
    pass through :meth:`ChatServer.send`'s size cap and deadline, which read the body themselves."""

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The data (lines joined by ``\\n``) of each event that ``chunk`` completes, in order."""
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        events = []
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))
        return events

    def end(self) -> list[str]:
        """The data of an event the body ended without a blank line after."""
        return self.feed(b"\n\n") if self._partial or self._data else []


def stream_chunks(body: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a streamed chat completion's whole body (:class:`SseEvents`; ``[DONE]`` ends it).

    Raises:
        PolicyError: an event that is not a JSON object, or an ``error`` event (vLLM reports a failure met
            mid-stream so).
    """
    reader = SseEvents()
    chunks: list[dict[str, Any]] = []
    for data in [*reader.feed(body), *reader.end()]:
        if data.strip() == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            chunk = None
        if not isinstance(chunk, dict):
            raise PolicyError("The server's streamed reply holds an event that is not a JSON object.",
                              hint="Check that the endpoint is an OpenAI-compatible chat-completions server.")
        if "error" in chunk and "choices" not in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise PolicyError(f"The server failed while streaming its reply: {str(message)[:300]}")
        chunks.append(chunk)
    return chunks


def delta_fields(chunk: dict[str, Any]) -> tuple[str, str, str | None]:
    """``(content, reasoning, finish_reason)`` of one streamed chunk's first choice: its delta's ``content`` and
    its reasoning (vLLM's ``reasoning_content``, or ``reasoning`` as newer vLLM and other servers name it);
    "" / None where absent."""
    choices = chunk.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = choice.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    finish = choice.get("finish_reason")
    return (content if isinstance(content, str) else "", reasoning if isinstance(reasoning, str) else "",
            finish if isinstance(finish, str) else None)


def assemble_stream(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed chat completion's chunks (:func:`stream_chunks`) as the reply a request without streaming
    gets: ``{"model", "choices": [{"message": {"role", "content", "reasoning_content"}, "finish_reason"}],
    "usage"}`` (usage from the last chunk carrying it, ``stream_options.include_usage``)."""
    content, reasoning, finish, model, usage = [], [], None, None, None
    for chunk in chunks:
        text, thought, ended = delta_fields(chunk)
        content.append(text)
        reasoning.append(thought)
        finish = ended or finish
        model = chunk.get("model", model)
        usage = chunk.get("usage") or usage
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    return {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
