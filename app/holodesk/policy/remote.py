"""A Policy served by an OpenAI-compatible chat-completions server (vLLM serving Holotron-12B).

One step = one ``POST {endpoint}/chat/completions``. The prompt comes from the same action protocol
as the local runtime (:meth:`ActionProtocol.build_messages`, which also owns the history policy: how
many screenshots stay as images, F21); each image part becomes an ``image_url`` data URL; the reply is
parsed by the same protocol parser. Coordinates in the reply are normalised ``[0, 1000]`` to the image
that was sent, and because a resize (only when ``max_image_side`` asks for it) keeps the aspect ratio,
they map back onto the same :class:`~holodesk.core.geometry.Frame` through ``core.geometry``.

The HTTP side (bounded retries, deadlines, reply size, the errors that say what to do) is
:class:`~holodesk.policy.chat_server.ChatServer`; this module builds the request and reads the reply.

Constrained decoding: when ``options.constrained_decoding`` is on, the request carries the protocol's JSON schema
as ``response_format={"type": "json_schema", ...}`` (the OpenAI form, which vLLM turns into a
grammar). A server that rejects it is asked again without it; that fallback is logged at WARNING and
recorded in every later ``Proposal.extra["structured_output"]`` -- never silent. The protocol parser
checks every reply either way.

The API key is sent as ``Authorization: Bearer ...`` and appears nowhere else: not in ``repr``, logs,
``Proposal.extra`` or error messages (:class:`~holodesk.policy.chat_server.ChatServer` scrubs server texts).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import numpy as np
from PIL import Image

from holodesk.core.actions import Point
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import ActionProtocol, Observation, Proposal, ThoughtSink, ThoughtStream, pointer_after
from holodesk.policy.chat_server import (
    MAX_RETRIES,
    ChatServer,
    ServerUnreachableError,
    SseEvents,
    TooManyImagesError,
    assemble_stream,
    delta_fields,
    describe_request,
    normalize_base_url,
    stream_chunks,
)
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.local_core import LOCALIZATION_MAX_TOKENS
from holodesk.policy.registry import get_protocol
from holodesk.policy.reply import split_reasoning

log = logging.getLogger(__name__)

ImageFormat = Literal["png", "jpeg"]

_STRUCTURED_WORDS = ("response_format", "json_schema", "structured output", "structured_output", "guided",
                     "grammar", "xgrammar", "outlines", "guidance")
class ReplyCutOffError(PolicyError):
    """The server stopped generating at the token limit (``finish_reason == "length"``).

    Attributes:
        raw_text: the partial reply as received (for display and the episode record).
    """

    def __init__(self, message: str, *, raw_text: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.raw_text = raw_text


@dataclass(frozen=True)
class _EncodedImage:
    data_url: str
    info: dict[str, Any]


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
        switch = self.options.reasoning_switch
        self.reasoning_line = switch is None or switch.prompt_line
        if switch is None:
            log.info("remote model %r is not in the registry: reasoning is switched by a /think or /no_think line "
                     "in the system prompt (Nemotron Nano 2's switch)", model)
        if chat_template_kwargs is None:
            chat_template_kwargs = switch.template_kwargs(self.options.reasoning) if switch is not None else {}
        self.chat_template_kwargs = dict(chat_template_kwargs)
        # None = not tried yet, True = accepted, False = rejected (then the detail says why).
        self._structured_accepted: bool | None = None
        self._structured_detail = ""
        self._image_cache: OrderedDict[Frame, _EncodedImage] = OrderedDict()
        self.thought_sink: ThoughtSink | None = None
        self.localization_reply_tokens: list[int] = []  # the server's usage for each localize() (the eval's mean)
        self.server = ChatServer(endpoint=self.endpoint, model=model, api_key=api_key, timeout_s=self.timeout_s,
                                 retries=retries, backoff_s=backoff_s, backoff_max_s=backoff_max_s, transport=transport)

    @property
    def max_images(self) -> int:
        """Screenshots sent as images, the current one included (``options.max_images``; the session keeps
        that many frames, :func:`~holodesk.policy.base.forget_unused_frames`)."""
        return self.options.max_images

    def __repr__(self) -> str:
        key = "set" if self.server.has_key else "none"
        return f"RemotePolicy(endpoint={self.endpoint!r}, model={self.model!r}, api_key=<{key}>)"

    # ------------------------------------------------------------------ Policy API

    def propose(self, observation: Observation) -> Proposal:
        """Ask the server for the next action. With reasoning on and a :attr:`thought_sink` set
        (:class:`~holodesk.policy.base.StreamsThought`), the request asks for a streamed reply (``"stream":
        true``, server-sent events, usage included) and the reasoning deltas go to the sink as they arrive; the
        deadline, the reply cap and every error are those of a reply without streaming.

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
        thought = ThoughtStream(self.thought_sink if self.options.reasoning else None)
        chunk_reader = None
        if thought.active:  # the reasoning deltas are handed out as they arrive
            body.update(stream=True, stream_options={"include_usage": True})
            chunk_reader = functools.partial(self._thought_reader, thought)
        data, stats = self._chat(body, images=len(images_sent), task_deadline=observation.deadline,
                                 chunk_reader=chunk_reader)
        t_replied = time.perf_counter()

        choice, text, finish_reason = self._first_choice(data)
        message = choice.get("message") or {}
        reasoning_text = message.get("reasoning_content") or message.get("reasoning")
        reasoning_text = reasoning_text.strip() if isinstance(reasoning_text, str) else ""
        if not reasoning_text:  # a server without a reasoning parser returns the block in the content
            block, reply_text = split_reasoning(text)
            reasoning_text = block or ""
        else:
            reply_text = text
        thought.finish(reasoning_text)
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
            parsed = self.protocol.parse(reply_text, pointer=pointer_after(observation.history))
        except PolicyOutputError as exc:  # the rejected step is recorded with what the request cost
            exc.raw_text = text
            exc.timings_ms, exc.extra = before_parse, facts
            raise
        t_parsed = time.perf_counter()

        extra: dict[str, Any] = {**facts, "warnings": list(parsed.warnings)}
        extra["sampling"] = self.options.sampling.record()
        if "seed" in body:
            extra["step_seed"] = body["seed"]
        if reasoning_text:
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
            raw_text=text,
            timings_ms=timings,
            extra=extra,
        )

    @staticmethod
    def _thought_reader(thought: ThoughtStream) -> Callable[[bytes], None]:
        """The reader of a streamed reply's chunks (:class:`~holodesk.policy.chat_server.SseEvents`) that offers
        ``thought`` the reasoning so far (vLLM's ``reasoning_content`` / ``reasoning`` deltas). An event that is
        not JSON is skipped here: the whole body is read again when complete, and judged then."""
        events = SseEvents()
        reasoning: list[str] = []

        def read(chunk: bytes) -> None:
            for data in events.feed(chunk):
                try:
                    parsed = json.loads(data)
                except (ValueError, RecursionError):
                    continue
                piece = delta_fields(parsed)[1] if isinstance(parsed, dict) else ""
                if piece:
                    reasoning.append(piece)
                    thought.offer(lambda: "".join(reasoning))  # joined only when a piece is due

        return read

    def localize(self, image: Any, target: str) -> Point:
        """H Company's element localization over the same server (the approval card's "Click more precisely",
        :class:`~holodesk.policy.base.Localizer`): the protocol's localization request
        (:meth:`~holodesk.policy.base.ActionProtocol.localization_messages`: ``image``, then the published
        localization prompt for ``target``, one user turn), at temperature 0 with reasoning off, at most
        :data:`~holodesk.policy.local_core.LOCALIZATION_MAX_TOKENS` tokens, constrained to the protocol's
        localization schema when ``options.constrained_decoding`` is on; the reply is read by the protocol
        (:meth:`~holodesk.policy.base.ActionProtocol.parse_localization`). The request has the same deadline
        (``timeout_s``), reply cap, retries and key scrubbing as a step's.

        Args:
            image: an ``(H, W, 3)`` uint8 RGB array (a crop of the frame); downscaled like a frame when
                ``max_image_side`` asks for it (the aspect is kept, so the point is the same).
            target: the element in words.
        Returns:
            The point in ``[0, 1000]`` of ``image``.
        Raises:
            PolicyOutputError: the reply is not a point (``raw_text`` carries it).
            ReplyCutOffError: the reply stopped at the token limit.
            PolicyError: the server could not be reached, refused the request or did not answer in time.
        """
        wire, images_sent = self._to_wire(self.protocol.localization_messages(image, target))
        body = self._request_body(wire, max_tokens=LOCALIZATION_MAX_TOKENS, localization=True)
        data, _stats = self._chat(body, images=len(images_sent))
        _choice, text, finish_reason = self._first_choice(data)
        tokens = (data.get("usage") or {}).get("completion_tokens")
        if isinstance(tokens, int):
            self.localization_reply_tokens.append(tokens)
        if finish_reason == "length":
            raise ReplyCutOffError(
                f"The model's localization reply was cut off at {LOCALIZATION_MAX_TOKENS} tokens.", raw_text=text,
                hint="Check that the served model is a localization-capable model (Holo2, Holo3, Holotron).")
        return self.protocol.parse_localization(text)

    def close(self) -> None:
        """Close the HTTP connection pool. Idempotent."""
        self.server.close()
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
        """Model ids the server serves (:meth:`~holodesk.policy.chat_server.ChatServer.list_models`).

        Raises:
            PolicyError: unreachable server, rejected key, or a reply that is not a model list.
        """
        return self.server.list_models()

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
        saved_retries, self.server.retries = self.server.retries, 0
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
            self.server.retries = saved_retries

    # ------------------------------------------------------------------ request building

    def _request_body(self, messages: list[dict[str, Any]], *, max_tokens: int, step: int = 0,
                      localization: bool = False) -> dict[str, Any]:
        """The chat-completions body: a step's (``options``' sampling for ``step``, reasoning switch, reply schema)
        or, with ``localization``, an element localization's (temperature 0, reasoning off, localization
        schema)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": False,
        }
        sampling = self.options.sampling
        if not sampling.greedy and not localization:
            body.update(temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.step_seed(step))
        if self.options.reasoning and self.options.reasoning_effort is not None and not localization:
            body["reasoning_effort"] = self.options.reasoning_effort
        template_kwargs = self.chat_template_kwargs
        switch = self.options.reasoning_switch
        if localization and switch is not None:
            template_kwargs = {**template_kwargs, **switch.template_kwargs(False)}
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        if self.options.constrained_decoding and self._structured_accepted is not False:
            schema = self.protocol.localization_schema() if localization else self.protocol.json_schema()
            kind = "localization" if localization else self.protocol.name
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": re.sub(r"[^A-Za-z0-9_-]", "_", f"holodesk_{kind}"),
                    "schema": schema,
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

    def _chat(self, body: dict[str, Any], *, images: int, task_deadline: float | None = None,
              chunk_reader: Callable[[], Callable[[bytes], None]] | None = None,
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """POST /chat/completions; on a schema rejection, log it and ask once more without the schema (both
        within one ``timeout_s`` and ``task_deadline``, ``time.monotonic()`` seconds). A streamed reply
        (``body["stream"]``, server-sent events) is handed as it arrives to a reader ``chunk_reader`` makes for each
        attempt (:meth:`~holodesk.policy.chat_server.ChatServer.send`) and returned assembled
        as a reply without streaming is (:func:`~holodesk.policy.chat_server.assemble_stream`)."""
        log.debug("chat request to %s: %s", self.endpoint, describe_request(body))
        deadline = self.server.deadline(task_deadline)
        resp, stats = self.server.send("POST", "/chat/completions", body, deadline=deadline,
                                       chunk_reader=chunk_reader)
        if resp.status_code == 400 and "response_format" in body:
            message = self.server.server_message(resp)
            low = message.lower()
            if not self.server.is_image_limit(low) and any(word in low for word in _STRUCTURED_WORDS):
                self._structured_accepted = False
                self._structured_detail = message[:200]
                log.warning(
                    "server %s rejected JSON-schema constrained output (%s); falling back to "
                    "unconstrained generation with strict parsing of every reply",
                    self.endpoint,
                    message[:200],
                )
                body = {k: v for k, v in body.items() if k != "response_format"}
                resp, more = self.server.send("POST", "/chat/completions", body, deadline=deadline,
                                              chunk_reader=chunk_reader)
                stats = {"attempts": stats["attempts"] + more["attempts"], "request_ms": more["request_ms"]}
        if resp.status_code != 200:
            raise self.server.http_error(resp, images=images, path="/chat/completions", max_images=self.max_images)
        if "response_format" in body:
            self._structured_accepted = True
        if body.get("stream") and resp.headers.get("content-type", "").startswith("text/event-stream"):
            return assemble_stream(stream_chunks(resp.content)), stats
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
