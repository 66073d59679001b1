"""A Policy served by an OpenAI-compatible chat-completions server (vLLM serving Holotron-12B).

One step = one ``POST {endpoint}/chat/completions``. The prompt comes from the same action protocol
as the local runtime (:meth:`ActionProtocol.build_messages`, which also owns the history policy: how
many screenshots stay as images, F21); each image part becomes an ``image_url`` data URL; the reply is
parsed by the same protocol parser. Coordinates in the reply are normalised ``[0, 1000]`` to the image
that was sent, and because a resize (only when ``max_image_side`` asks for it) keeps the aspect ratio,
they map back onto the same :class:`~holodesk.core.geometry.Frame` through ``core.geometry``.

HTTP client: ``httpx`` (already a Holodesk dependency) rather than the ``openai`` package. We need
exactly one call shape, full control of which failures are retried (429 / 5xx / connection errors
only, with our own bounded backoff), the raw error bodies (vLLM's image-limit and model-not-found
texts drive the advice we print), and vLLM's extra request fields; the ``openai`` client would add a
dependency, retry 408/409 on its own schedule, and wrap those bodies in its own exception types.

Constrained decoding: when ``options.constrained_decoding`` is on, the request carries the protocol's JSON schema
as ``response_format={"type": "json_schema", ...}`` (the OpenAI form, which vLLM turns into a
grammar). A server that rejects it is asked again without it; that fallback is logged at WARNING and
recorded in every later ``Proposal.extra["structured_output"]`` -- never silent. The protocol parser
checks every reply either way.

The API key is sent as ``Authorization: Bearer ...`` and appears nowhere else: not in ``repr``, logs,
``Proposal.extra`` or error messages (server error texts are scrubbed of it before they are quoted).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
from PIL import Image

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import Observation, Proposal, pointer_after
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.protocol import ActionProtocol
from holodesk.policy.registry import get_protocol

log = logging.getLogger(__name__)

ImageFormat = Literal["png", "jpeg"]

MAX_RETRIES = 10
"""Upper bound on ``retries`` so a misconfiguration cannot loop for long."""

MAX_REPLY_BYTES = 8 * 1024 * 1024
"""Most bytes of one HTTP reply body kept in memory (a chat reply of a few thousand tokens is under 100 kB);
a longer reply is cut and the step fails with :class:`ReplyTooLargeError`."""

_IMAGE_LIMIT_RE = re.compile(r"at most (\d+) image", re.IGNORECASE)
_IMAGE_LIMIT_WORDS = ("limit-mm-per-prompt", "limit_mm_per_prompt", "image(s) may be provided", "too many image")
_STRUCTURED_WORDS = ("response_format", "json_schema", "structured output", "structured_output", "guided",
                     "grammar", "xgrammar", "outlines", "guidance")
_CONTEXT_WORDS = ("maximum context length", "max_model_len", "context length", "prompt is too long",
                  "too many tokens", "longer than the maximum")


class ReplyCutOffError(PolicyError):
    """The server stopped generating at the token limit (``finish_reason == "length"``).

    Attributes:
        raw_text: the partial reply as received (for display and the episode record).
    """

    def __init__(self, message: str, *, raw_text: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.raw_text = raw_text


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


@dataclass(frozen=True)
class _EncodedImage:
    data_url: str
    info: dict[str, Any]


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


class RemotePolicy:
    """Proposes one action per step by asking an OpenAI-compatible chat-completions server.

    Args:
        endpoint: server base URL, e.g. ``http://gpu-box:8000/v1`` (``/v1`` is added when the URL has
            no path).
        model: the served model name as ``GET /v1/models`` lists it (vLLM ``--served-model-name``).
        api_key: bearer token, or None for a server without ``--api-key``. Resolve it with
            :func:`holodesk.secrets.resolve_api_key`; never read it from settings.
        options: how replies are generated (:class:`~holodesk.policy.generation.GenerationOptions`), used
            unchanged: ``protocol``; ``max_images`` screenshots as images, the current one included (F21);
            ``constrained_decoding`` asks the server to constrain the reply to the protocol's JSON schema;
            ``reasoning`` asks the model to think before answering, by the chat-template variable of
            ``reasoning_switch`` where the registry declares one, else by the system prompt's ``/think`` line
            (Holotron-12B, and a model the registry does not know, whose switch is unknown: logged), with
            ``reasoning_effort`` sent as the request's ``reasoning_effort`` when set; ``token_budget`` is the
            request's ``max_tokens`` (a reply cut at it raises :class:`ReplyCutOffError`); ``sampling``: greedy is
            sent as temperature 0, else its temperature, top_p and, for step ``n``, the seed ``step_seed(n)``
            (vLLM's per-request ``seed``). None: :meth:`GenerationOptions.for_model` ``model`` greedy, reasoning
            off.
        protocol: an action protocol instance to speak instead of ``options.protocol`` (test doubles).
        image_format: ``"png"`` (lossless, default) or ``"jpeg"`` (smaller uploads).
        max_image_side: when set, frames whose longer side exceeds it are downscaled (aspect kept,
            bicubic) to that many pixels before sending; None sends frames at their captured size.
        jpeg_quality: JPEG quality 1..95 when ``image_format == "jpeg"``.
        timeout_s: seconds allowed for one request, from sending it to the last byte of the reply, retries
            included (connect is capped at 10 s); a step also ends its request at the observation's
            ``deadline`` (the task's wall-time cap) when that comes first. A reply body is kept up to
            :data:`MAX_REPLY_BYTES`.
        retries: extra attempts after the first for 429 / 5xx / connection errors (0..10), with
            exponential backoff ``backoff_s * 2**n`` capped at ``backoff_max_s`` (a ``Retry-After``
            header is honoured up to the same cap).
        chat_template_kwargs: sent as the request's ``chat_template_kwargs`` (vLLM passes them to the chat
            template); None: ``options.reasoning_switch``'s (e.g. ``{"thinking":
            false}`` for Holo2, ``{"enable_thinking": false}`` for Holo3.x; nothing for Holotron-12B, whose
            switch is the system prompt's ``/no_think`` line, or for a model the registry does not know).
        transport: optional ``httpx`` transport (tests); normal use leaves it None.

    Raises:
        PolicyError: for an invalid endpoint or argument.
    """

    name = "remote"

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        api_key: str | None,
        options: GenerationOptions | None = None,
        protocol: ActionProtocol | None = None,
        image_format: ImageFormat = "png",
        max_image_side: int | None = None,
        jpeg_quality: int = 90,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        chat_template_kwargs: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not model:
            raise PolicyError("no model name given", hint="Pass the served model name, e.g. --model Holotron-12B.")
        if image_format not in ("png", "jpeg"):
            raise PolicyError(f"image_format must be 'png' or 'jpeg', got {image_format!r}")
        if max_image_side is not None and max_image_side < 16:
            raise PolicyError(f"max_image_side must be at least 16 pixels, got {max_image_side}")
        if not 0 <= retries <= MAX_RETRIES:
            raise PolicyError(f"retries must be in 0..{MAX_RETRIES}, got {retries}")
        if timeout_s <= 0:
            raise PolicyError(f"timeout_s must be positive, got {timeout_s}")
        if not 1 <= jpeg_quality <= 95:
            raise PolicyError(f"jpeg_quality must be in 1..95, got {jpeg_quality}")
        self.endpoint = normalize_base_url(endpoint)
        self.model = model
        self.options = options if options is not None else GenerationOptions.for_model(model, reasoning="off",
                                                                                         greedy=True)
        self.protocol = protocol if protocol is not None else get_protocol(self.options.protocol)
        self.image_format: ImageFormat = image_format
        self.max_image_side = max_image_side
        self.jpeg_quality = jpeg_quality
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        switch = self.options.reasoning_switch
        self.reasoning_line = switch is None or switch.prompt_line
        if switch is None:
            log.info("remote model %r is not in the registry: reasoning is switched by a /think or /no_think line "
                     "in the system prompt (Nemotron Nano 2's switch)", model)
        if chat_template_kwargs is None:
            chat_template_kwargs = switch.template_kwargs(self.options.reasoning) if switch is not None else {}
        self.chat_template_kwargs = dict(chat_template_kwargs)
        self._api_key = api_key or None
        # None = not tried yet, True = accepted, False = rejected (then the detail says why).
        self._structured_accepted: bool | None = None
        self._structured_detail = ""
        self._image_cache: OrderedDict[Frame, _EncodedImage] = OrderedDict()
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
    def max_images(self) -> int:
        """Screenshots sent as images, the current one included (``options.max_images``; the session keeps
        that many frames, :func:`~holodesk.policy.base.forget_unused_frames`)."""
        return self.options.max_images

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"RemotePolicy(endpoint={self.endpoint!r}, model={self.model!r}, api_key=<{key}>)"

    # ------------------------------------------------------------------ Policy API

    def propose(self, observation: Observation) -> Proposal:
        """Ask the server for the next action.

        Returns:
            A Proposal whose ``timings_ms`` has ``build_prompt``, ``encode_images``, ``request`` (the
            successful HTTP exchange), ``request_all_attempts`` (with retries and backoff),
            ``parse`` and ``total``; ``extra`` records the endpoint, model, protocol, each image sent
            (``images_sent``: sent and frame sizes, format, bytes, whether resized), the structured
            output state, ``finish_reason``, token ``usage``, ``attempts`` and parser warnings.
        Raises:
            PolicyOutputError: the reply is not a valid action (raw text attached).
            ReplyCutOffError: the reply stopped at ``max_tokens``.
            ReplyTooLargeError: the reply body is longer than :data:`MAX_REPLY_BYTES`.
            TooManyImagesError: the server's per-request image limit is below what was sent.
            PolicyError: the server could not be reached, refused the request, or its reply did not end
                within ``timeout_s`` or by ``observation.deadline`` (the message says what to do).
        """
        t_start = time.perf_counter()
        messages = self.protocol.build_messages(
            observation, max_images=self.options.max_images, reasoning=self.options.reasoning,
            reasoning_line=self.reasoning_line
        )
        t_built = time.perf_counter()
        wire_messages, images_sent = self._to_wire(messages)
        t_encoded = time.perf_counter()

        body = self._request_body(wire_messages, max_tokens=self.options.token_budget, step=len(observation.history))
        data, stats = self._chat(body, images=len(images_sent), task_deadline=observation.deadline)
        t_replied = time.perf_counter()

        choice, text, finish_reason = self._first_choice(data)
        before_parse = {
            "build_prompt": (t_built - t_start) * 1000.0,
            "encode_images": (t_encoded - t_built) * 1000.0,
            "request": stats["request_ms"],
            "request_all_attempts": (t_replied - t_encoded) * 1000.0,
        }
        facts: dict[str, Any] = {
            "endpoint": self.endpoint,
            "model": self.model,
            "server_model": data.get("model"),
            "protocol": self.protocol.name,
            "chat_template_kwargs": dict(self.chat_template_kwargs),
            "images_sent": images_sent,
            "structured_output": self.structured_output_state,
            "finish_reason": finish_reason,
            "usage": data.get("usage"),
            "attempts": stats["attempts"],
        }
        if finish_reason == "length":
            raise ReplyCutOffError(
                f"The model's reply was cut off at the token limit (finish_reason 'length', "
                f"max_tokens={self.options.token_budget}).",
                raw_text=text,
                hint="Raise the reply token limit, or turn reasoning off so the reply stays short.",
            )
        try:
            parsed = self.protocol.parse(text, pointer=pointer_after(observation.history))
        except PolicyOutputError as exc:  # the rejected step is recorded with what the request cost
            exc.timings_ms, exc.extra = before_parse, facts
            raise
        t_parsed = time.perf_counter()

        extra: dict[str, Any] = {**facts, "warnings": list(parsed.warnings)}
        extra["sampling"] = self.options.sampling.record()
        if "seed" in body:
            extra["step_seed"] = body["seed"]
        message = choice.get("message") or {}
        reasoning_text = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning_text, str) and reasoning_text:
            extra["reasoning_text"] = reasoning_text
        timings = {
            **before_parse,
            "parse": (t_parsed - t_replied) * 1000.0,
            "total": (t_parsed - t_start) * 1000.0,
        }
        return Proposal(
            action=parsed.action,
            thought=parsed.thought,
            note=parsed.note,
            raw_text=parsed.raw_text,
            timings_ms=timings,
            extra=extra,
        )

    def close(self) -> None:
        """Close the HTTP connection pool. Idempotent."""
        self._client.close()
        self._image_cache.clear()

    def __enter__(self) -> RemotePolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def structured_output_state(self) -> str:
        """``"off"``, ``"json_schema"`` (sent and accepted / not yet tried), or ``"rejected: ..."``."""
        if not self.options.constrained_decoding:
            return "off"
        if self._structured_accepted is False:
            return f"rejected by server, strict parse only ({self._structured_detail})"
        return "json_schema"

    # ------------------------------------------------------------------ doctor

    def list_models(self) -> list[str]:
        """Model ids the server serves (``GET /models``), one attempt per retry policy.

        Raises:
            PolicyError: unreachable server, rejected key, or a reply that is not a model list.
        """
        resp, _ = self._send("GET", "/models", None, images=0)
        if resp.status_code != 200:
            raise self._http_error(resp, images=0, path="/models", list_on_404=False)
        try:
            items = resp.json().get("data", [])
            return [str(item["id"]) for item in items if isinstance(item, dict) and "id" in item]
        except (ValueError, AttributeError, KeyError, RecursionError) as exc:
            raise PolicyError(
                f"The reply of {self.endpoint}/models is not an OpenAI model list.",
                hint="Check that the endpoint is an OpenAI-compatible server (e.g. vLLM) and ends in /v1.",
            ) from exc

    def check_endpoint(self) -> dict[str, Any]:
        """Probe the server for ``holodesk doctor``. Never raises.

        Sends ``GET /models`` and, when the model is listed, one tiny chat request with a 32x32 image
        and ``max_tokens=1`` (with the JSON schema when structured output is on, again without it if
        the server rejects the schema).

        Returns:
            ``{"endpoint", "model", "reachable": bool, "models": [str], "model_listed": bool,
            "accepts_images": bool | None, "structured_output": bool | None, "latency_ms": float |
            None, "error": str | None}`` -- None where the check could not run.
        """
        report: dict[str, Any] = {
            "endpoint": self.endpoint,
            "model": self.model,
            "reachable": False,
            "models": [],
            "model_listed": False,
            "accepts_images": None,
            "structured_output": None,
            "latency_ms": None,
            "error": None,
        }
        saved_retries, self.retries = self.retries, 0
        try:
            t0 = time.perf_counter()
            try:
                report["models"] = self.list_models()
            except ServerUnreachableError as exc:
                report["error"] = str(exc)
                return report
            except PolicyError as exc:
                report["reachable"] = True
                report["error"] = str(exc)
                return report
            report["reachable"] = True
            report["latency_ms"] = (time.perf_counter() - t0) * 1000.0
            report["model_listed"] = self.model in report["models"]
            if not report["model_listed"]:
                report["error"] = (
                    f"Model {self.model!r} is not served here; the server has: "
                    f"{', '.join(report['models']) or 'no models'}."
                )
                return report
            probe_monitor = Monitor(index=1, left=0, top=0, width=32, height=32, name="probe")
            probe = Frame(np.full((32, 32, 3), 200, dtype=np.uint8), probe_monitor)
            content = [
                {"type": "text", "text": "Reply with {}."},
                {"type": "image_url", "image_url": {"url": self._encode(probe).data_url}},
            ]
            body = self._request_body([{"role": "user", "content": content}], max_tokens=1)
            try:
                self._chat(body, images=1)
                report["accepts_images"] = True
                if self.options.constrained_decoding:
                    report["structured_output"] = self._structured_accepted is not False
            except TooManyImagesError as exc:
                report["accepts_images"] = False
                report["error"] = str(exc)
            except PolicyError as exc:
                report["error"] = str(exc)
            return report
        finally:
            self.retries = saved_retries

    # ------------------------------------------------------------------ request building

    def _request_body(self, messages: list[dict[str, Any]], *, max_tokens: int, step: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": False,
        }
        sampling = self.options.sampling
        if not sampling.greedy:
            body.update(temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.step_seed(step))
        if self.options.reasoning and self.options.reasoning_effort is not None:
            body["reasoning_effort"] = self.options.reasoning_effort
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        if self.options.constrained_decoding and self._structured_accepted is not False:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": re.sub(r"[^A-Za-z0-9_-]", "_", f"holodesk_{self.protocol.name}"),
                    "schema": self.protocol.json_schema(),
                    "strict": True,
                },
            }
        return body

    def _to_wire(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Protocol messages -> OpenAI chat messages; images become data URLs.

        Returns:
            (messages, images_sent) where images_sent lists one info dict per image, in prompt order.
        """
        wire: list[dict[str, Any]] = []
        images: list[dict[str, Any]] = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                wire.append({"role": message["role"], "content": content})
                continue
            parts: list[dict[str, Any]] = []
            for part in content or ():
                kind = part.get("type")
                if kind == "text":
                    parts.append({"type": "text", "text": part["text"]})
                elif kind == "image":
                    encoded = self._encode(part["frame"])
                    images.append(encoded.info)
                    parts.append({"type": "image_url", "image_url": {"url": encoded.data_url}})
                else:
                    raise PolicyError(f"the action protocol produced a message part of unknown type {kind!r}")
            if len(parts) == 1 and parts[0]["type"] == "text":
                wire.append({"role": message["role"], "content": parts[0]["text"]})
            else:
                wire.append({"role": message["role"], "content": parts})
        return wire, images

    def _encode(self, frame: Frame) -> _EncodedImage:
        """Encode one frame (cached per Frame object, so history images are encoded once)."""
        cached = self._image_cache.get(frame)
        if cached is not None:
            self._image_cache.move_to_end(frame)
            return cached
        image = Image.fromarray(np.ascontiguousarray(frame.pixels, dtype=np.uint8), "RGB")
        width, height = image.size
        resized = False
        if self.max_image_side is not None and max(width, height) > self.max_image_side:
            scale = self.max_image_side / max(width, height)
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            image = image.resize(size, Image.Resampling.BICUBIC)
            resized = True
        buf = io.BytesIO()
        if self.image_format == "png":
            image.save(buf, format="PNG", compress_level=1)
            mime = "image/png"
        else:
            image.save(buf, format="JPEG", quality=self.jpeg_quality)
            mime = "image/jpeg"
        payload = buf.getvalue()
        info = {
            "width": image.size[0],
            "height": image.size[1],
            "frame_width": width,
            "frame_height": height,
            "resized": resized,
            "format": self.image_format,
            "bytes": len(payload),
        }
        encoded = _EncodedImage(f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}", info)
        self._image_cache[frame] = encoded
        while len(self._image_cache) > self.options.max_images + 2:
            self._image_cache.popitem(last=False)
        return encoded

    # ------------------------------------------------------------------ HTTP

    def _chat(self, body: dict[str, Any], *, images: int,
              task_deadline: float | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """POST /chat/completions; on a schema rejection, log it and ask once more without the schema (both
        within one ``timeout_s`` and ``task_deadline``, ``time.monotonic()`` seconds)."""
        log.debug("chat request to %s: %s", self.endpoint, describe_request(body))
        deadline = self._deadline(task_deadline)
        resp, stats = self._send("POST", "/chat/completions", body, images=images, deadline=deadline)
        if resp.status_code == 400 and "response_format" in body:
            message = self._server_message(resp)
            low = message.lower()
            if not self._is_image_limit(low) and any(word in low for word in _STRUCTURED_WORDS):
                self._structured_accepted = False
                self._structured_detail = message[:200]
                log.warning(
                    "server %s rejected JSON-schema constrained output (%s); falling back to "
                    "unconstrained generation with strict parsing of every reply",
                    self.endpoint,
                    message[:200],
                )
                body = {k: v for k, v in body.items() if k != "response_format"}
                resp, more = self._send("POST", "/chat/completions", body, images=images, deadline=deadline)
                stats = {"attempts": stats["attempts"] + more["attempts"], "request_ms": more["request_ms"]}
        if resp.status_code != 200:
            raise self._http_error(resp, images=images, path="/chat/completions")
        if "response_format" in body:
            self._structured_accepted = True
        try:
            data = resp.json()
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python's stack
            data = None
        if not isinstance(data, dict):
            raise PolicyError(
                f"The reply of {self.endpoint}/chat/completions is not JSON.",
                hint="Check that the endpoint is an OpenAI-compatible server (e.g. vLLM) and ends in /v1.",
            )
        return data, stats

    def _deadline(self, task_deadline: float | None) -> tuple[float, str]:
        """The deadline of one request, ``(time.monotonic() seconds, what sets it in words)``: ``timeout_s``
        from now, or the task's wall-time cap when that comes first."""
        own = time.monotonic() + self.timeout_s
        if task_deadline is not None and task_deadline < own:
            left = max(0.0, task_deadline - time.monotonic())
            return task_deadline, f"{left:.1f} s, the time left of the task's wall-time cap (--max-seconds)"
        return own, f"{self.timeout_s:g} s"

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, *, images: int,
        deadline: tuple[float, str] | None = None,
    ) -> tuple[httpx.Response, dict[str, Any]]:
        """One request with bounded retries on 429 / 5xx / connection errors, all ended by ``deadline`` (from
        :meth:`_deadline`; None: ``timeout_s`` from now).

        Returns:
            (final non-retryable response, {"attempts": int, "request_ms": float of the last attempt})
        Raises:
            ReplyTooLargeError: a reply body longer than :data:`MAX_REPLY_BYTES`.
            PolicyError: connection failure, no complete reply by the deadline, or 429 / 5xx on every attempt.
        """
        until, limit = deadline if deadline is not None else self._deadline(None)
        attempts = 1 + self.retries
        t_first = time.perf_counter()
        failure: _RetryableFailure | None = None
        for attempt in range(attempts):
            t0 = time.perf_counter()
            try:
                resp = self._exchange(method, path, body, until)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError, httpx.WriteError) as exc:
                failure = _RetryableFailure("connect", self._scrub(str(exc)) or type(exc).__name__)
            except (httpx.TimeoutException, _OutOfTime) as exc:
                raise self._out_of_time(limit) from exc
            except httpx.HTTPError as exc:
                raise PolicyError(
                    f"Request to {self.endpoint} failed: {type(exc).__name__}: {self._scrub(str(exc))}"
                ) from exc
            else:
                status = resp.status_code
                if status == 429 or 500 <= status <= 599:
                    kind = "429" if status == 429 else "5xx"
                    failure = _RetryableFailure(kind, self._server_message(resp), resp)
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

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None, until: float) -> httpx.Response:
        """One HTTP exchange that ends by ``until`` (``time.monotonic()`` seconds), however the server sends.

        The exchange runs in a worker thread and this thread waits for it until ``until``: a reply that
        trickles (each read within httpx's read timeout) or never ends cannot hold the step past it. A worker
        left behind stops at its next chunk of the body or at its read timeout (a server that trickles its
        headers keeps it, and its connection, until it stops sending).

        Returns:
            the response, its body read (at most :data:`MAX_REPLY_BYTES`).
        Raises:
            _OutOfTime: the reply was not complete by ``until``.
            ReplyTooLargeError: the body is longer than :data:`MAX_REPLY_BYTES`.
            httpx.HTTPError: from the exchange.
        """
        outcome: dict[str, Any] = {}
        done = threading.Event()
        abandoned = threading.Event()

        def work() -> None:
            try:
                outcome["response"] = self._read_reply(method, path, body, until, abandoned)
            except BaseException as exc:  # handed to the waiting thread, which raises it
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="holodesk-policy-request", daemon=True).start()
        if not done.wait(max(0.0, until - time.monotonic())):
            abandoned.set()
            raise _OutOfTime()
        if "error" in outcome:
            raise outcome["error"]
        response: httpx.Response = outcome["response"]
        return response

    def _read_reply(self, method: str, path: str, body: dict[str, Any] | None, until: float,
                    abandoned: threading.Event) -> httpx.Response:
        """Send the request and read its reply body in chunks, checking size and ``abandoned`` at each."""
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

    # ------------------------------------------------------------------ errors

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

    def _http_error(
        self, resp: httpx.Response, *, images: int, path: str, list_on_404: bool = True
    ) -> PolicyError:
        """Turn a final non-200 reply into a PolicyError that says what to do.

        ``list_on_404``: on 404, ask ``GET /models`` whether the model or the URL path is wrong.
        """
        code = resp.status_code
        message = self._server_message(resp)
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
        if code in (400, 413, 422) and self._is_image_limit(low):
            match = _IMAGE_LIMIT_RE.search(message)
            limit = int(match.group(1)) if match else None
            said = f"at most {limit} image(s)" if limit is not None else "fewer images"
            target = f"{limit} or less" if limit is not None else "a lower number"
            return TooManyImagesError(
                f"The server at {self.endpoint} accepts {said} per request, but this step sent {images}.",
                server_limit=limit,
                sent=images,
                hint=f"Lower 'screenshots kept in the prompt' (now {self.options.max_images}) to {target}, or "
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
                hint=f"Keep fewer screenshots in the prompt (now {self.options.max_images}) or set a maximum image "
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
    def _is_image_limit(low: str) -> bool:
        return bool(_IMAGE_LIMIT_RE.search(low)) or any(word in low for word in _IMAGE_LIMIT_WORDS)

    def _server_message(self, resp: httpx.Response) -> str:
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
        text = self._scrub(text)
        return text if len(text) <= 500 else text[:500] + "…"

    def _scrub(self, text: str) -> str:
        """Remove the API key from a text that will be shown or logged."""
        return text.replace(self._api_key, "***") if self._api_key else text

    @staticmethod
    def _first_choice(data: dict[str, Any]) -> tuple[dict[str, Any], str, str | None]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise PolicyError(
                "The server's reply has no choices.",
                hint="Check that the endpoint is an OpenAI-compatible chat-completions server.",
            )
        choice = choices[0]
        message = choice.get("message") or {}
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content if isinstance(content, str) else ""
        finish = choice.get("finish_reason")
        return choice, text, finish if isinstance(finish, str) else None


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
