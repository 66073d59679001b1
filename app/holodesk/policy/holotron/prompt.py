"""Chat prompt for Holotron: protocol messages -> text -> token ids with image placeholders.

Layout (Nemotron Nano 2, as its chat template renders it; docs/holotron-runtime.md, "One step")::

    <s><SPECIAL_10>System\\n{system}\\n<SPECIAL_11>User\\n{user}\\n<SPECIAL_11>Assistant\\n<think></think>

NVIDIA's chat template iterates list-form content parts (``{"type": "image"}`` renders ``<image>``).
:func:`render_prompt` hands the checkpoint's template that form and counts the ``<image>`` placeholders;
only a template that renders another number gets the string form (images as a private sentinel), and
that is reported. Without a template, :func:`fallback_chat` reproduces the layout (BOS included). Each
image then becomes ``<img>`` + ``<image>`` x (256 x tiles) + ``</img>`` (no per-tile markers).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from holodesk.core.geometry import Frame
from holodesk.errors import PolicyError

IMAGE_PLACEHOLDER = "<image>"
"""What NVIDIA's chat template renders for one ``{"type": "image"}`` content part."""

BOS = "<s>"
"""Nemotron's beginning-of-sequence token; the rendered prompt starts with it."""

IMAGE_SENTINEL = "\ue000holodesk:image\ue000"
"""Stands for one image inside rendered chat text (Unicode private-use characters around a tag)."""

_CONTROL_TAGS = ("/no_think", "/think")

log = logging.getLogger(__name__)


def reasoning_requested(messages: Sequence[dict[str, str]]) -> bool:
    """Nemotron Nano 2 rule: the last ``/think`` or ``/no_think`` in system/user text decides; default on."""
    state = True
    for message in messages:
        if message["role"] not in ("system", "user"):
            continue
        text = message["content"]
        last = max(((text.rfind(tag), tag) for tag in _CONTROL_TAGS), default=(-1, ""))
        if last[0] >= 0:
            state = last[1] == "/think"
    return state


def _strip_controls(text: str) -> str:
    """``text`` without ``/think`` / ``/no_think``, stripped."""
    for tag in _CONTROL_TAGS:
        text = text.replace(tag, "")
    return text.strip()


def message_text(content: str | Sequence[dict[str, Any]]) -> str:
    """The text a template renders for one message's content: a string as is; list-form parts
    concatenated, each ``{"type": "image"}`` as :data:`IMAGE_PLACEHOLDER`."""
    if isinstance(content, str):
        return content
    return "".join(IMAGE_PLACEHOLDER if part.get("type") == "image" else str(part.get("text", "")) for part in content)


def fallback_chat(messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True, bos: str = BOS) -> str:
    """Render the Nemotron Nano 2 chat layout (module docstring) without a template.

    ``bos`` first, then the system turn (``<SPECIAL_10>System\\n...\\n``, empty when absent), then
    ``<SPECIAL_11>User\\n...\\n`` and ``<SPECIAL_11>Assistant\\n...\\n<SPECIAL_12>\\n`` turns. Content
    is a string or list-form parts (:func:`message_text`). ``/think`` and ``/no_think`` are removed from
    system and user text and select the generation prompt's ending: ``<think>\\n`` (reasoning) or
    ``<think></think>``.
    """
    texts = [{"role": m["role"], "content": message_text(m["content"])} for m in messages]
    # the last system message wins, as in the template
    system = next((m["content"] for m in reversed(texts) if m["role"] == "system"), "")
    parts = [bos + "<SPECIAL_10>System\n" + _strip_controls(system) + "\n"]
    for message in texts:
        if message["role"] == "user":
            parts.append("<SPECIAL_11>User\n" + _strip_controls(message["content"]) + "\n")
        elif message["role"] == "assistant":
            parts.append("<SPECIAL_11>Assistant\n" + message["content"].strip() + "\n<SPECIAL_12>\n")
    if add_generation_prompt:
        ending = "<think>\n" if reasoning_requested(texts) else "<think></think>"
        parts.append("<SPECIAL_11>Assistant\n" + ending)
    return "".join(parts)


def special_token_strings(tokenizer: Any) -> list[str]:
    """Every special or added control token of ``tokenizer`` as text (``<image>``, ``</think>``, ...),
    longest first."""
    found = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    for entry in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values():
        if getattr(entry, "special", False):
            found.add(str(entry.content))
    return sorted((t for t in found if t), key=len, reverse=True)


def _break_specials(text: str, specials: Sequence[str]) -> str:
    """``text`` with every special-token string in it broken up by a zero-width space after its first
    character, so that it is tokenized as ordinary text."""
    for token in specials:
        if token in text:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> tuple[str, str]:
    """Render plain-text messages with the tokenizer's chat template, or :func:`fallback_chat`: (prompt text
    ending with the generation prompt, ``"chat_template"`` | ``"fallback"``).

    Raises:
        PolicyError: when the checkpoint's template fails to render.
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        except Exception as exc:
            raise PolicyError(f"the checkpoint's chat template failed: {exc}") from exc
        return str(text), "chat_template"
    return fallback_chat(messages), "fallback"


def _content_parts(messages: Sequence[dict[str, Any]],
                   specials: Sequence[str]) -> tuple[list[tuple[str, list[dict[str, Any]]]], list[Frame]]:
    """Protocol messages as ``(role, parts)`` with text parts made safe. The sentinel's own characters in
    any text cannot read as an image. Outside the system message, special-token text (``<image>``
    included) is broken up (:func:`_break_specials`): that text is the task, earlier replies, notes, and
    tokenized as is a literal ``<image>`` would become an image slot, ``</think>`` would end a thought,
    ``<SPECIAL_12>`` a turn; only the chat template places special tokens. (``/think`` / ``/no_think`` in
    that text are disarmed for every runtime by the protocol's ``build_messages``.)

    Returns:
        (messages as ``(role, [{"type": "text", "text"} | {"type": "image"}])``, frames in prompt order).
    Raises:
        PolicyError: for an unknown role or part type, or an image part without a Frame.
    """
    out: list[tuple[str, list[dict[str, Any]]]] = []
    frames: list[Frame] = []
    specials = [*specials, IMAGE_PLACEHOLDER] if IMAGE_PLACEHOLDER not in specials else list(specials)
    for message in messages:
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise PolicyError(f"chat message has an unknown role {role!r}")
        content = message.get("content")
        parts: list[dict[str, Any]] = []
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ()):
            kind = part.get("type")
            if kind == "text":
                text = str(part.get("text", "")).replace(IMAGE_SENTINEL, IMAGE_SENTINEL[:-1] + "\u200b\ue000")
                if role != "system":
                    text = _break_specials(text, specials)
                parts.append({"type": "text", "text": text})
            elif kind == "image":
                frame = part.get("frame")
                if not isinstance(frame, Frame):
                    raise PolicyError("an image part of the chat has no Frame")
                frames.append(frame)
                parts.append({"type": "image"})
            else:
                raise PolicyError(f"chat message part has an unknown type {kind!r}")
        out.append((str(role), parts))
    return out, frames


def template_parts(messages: Sequence[dict[str, Any]],
                   specials: Sequence[str]) -> tuple[list[dict[str, Any]], list[Frame]]:
    """Protocol messages in the list form NVIDIA's template iterates (``{"type": "image"}`` and
    ``{"type": "text", "text": ...}`` parts; text only: one string), and the frames in prompt order.
    Text is made safe and errors raised by :func:`_content_parts`."""
    parts, frames = _content_parts(messages, specials)
    out = [{"role": role, "content": "".join(p["text"] for p in content)
            if all(p["type"] == "text" for p in content) else content} for role, content in parts]
    return out, frames


def flatten_messages(messages: Sequence[dict[str, Any]],
                     specials: Sequence[str] = ()) -> tuple[list[dict[str, str]], list[Frame]]:
    """Protocol messages as plain-text chat messages (for a template that reads strings; parts joined
    with ``"\\n"``, each image as :data:`IMAGE_SENTINEL`), and the frames in prompt order. Text is made
    safe and errors raised by :func:`_content_parts`."""
    parts, frames = _content_parts(messages, specials)
    return [{"role": role, "content": "\n".join(IMAGE_SENTINEL if p["type"] == "image" else p["text"]
                                                 for p in content)} for role, content in parts], frames


def render_prompt(tokenizer: Any, messages: Sequence[dict[str, Any]],
                  specials: Sequence[str]) -> tuple[str, list[Frame], str]:
    """Render protocol messages to prompt text with one :data:`IMAGE_SENTINEL` per image.

    The checkpoint's template gets list-form parts (:func:`template_parts`) and must render exactly one
    :data:`IMAGE_PLACEHOLDER` per image. A template that fails on that form or renders another number of
    placeholders gets the string form (:func:`flatten_messages`), and that is logged and reported as
    ``"chat_template (string content)"``. Without a template, :func:`fallback_chat` renders the list form.

    Returns:
        (prompt text ending with the generation prompt, frames in prompt order, how: ``"chat_template"``,
        ``"chat_template (string content)"`` or ``"fallback"``).
    Raises:
        PolicyError: the template fails on both forms, or a form renders the wrong number of images.
    """
    parts, frames = template_parts(messages, specials)
    if not getattr(tokenizer, "chat_template", None):
        text = fallback_chat(parts, bos=str(getattr(tokenizer, "bos_token", None) or BOS))
        return text.replace(IMAGE_PLACEHOLDER, IMAGE_SENTINEL), frames, "fallback"
    problem = ""
    try:
        text = str(tokenizer.apply_chat_template(parts, tokenize=False, add_generation_prompt=True))
    except Exception as exc:
        problem = f"it failed on list-form content: {exc}"
    else:
        found = text.count(IMAGE_PLACEHOLDER)
        if found == len(frames):
            return text.replace(IMAGE_PLACEHOLDER, IMAGE_SENTINEL), frames, "chat_template"
        problem = f"it rendered {found} image placeholder(s) for {len(frames)} image(s)"
    log.warning("the checkpoint's chat template does not take list-form content (%s); using string content",
                problem)
    flat, frames = flatten_messages(messages, specials)
    text, _how = render_chat(tokenizer, flat)
    return text, frames, "chat_template (string content)"


def image_token_runs(ids: Sequence[int], image_token_id: int) -> list[tuple[int, int]]:
    """``(first position, length)`` of every run of ``image_token_id`` in ``ids``: one per image, in
    prompt order (``tokenize_prompt`` separates images with ``</img>`` / ``<img>``)."""
    runs: list[tuple[int, int]] = []
    previous = None
    for pos, token in enumerate(ids):
        if token == image_token_id:
            if previous != image_token_id:
                runs.append((pos, 0))
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        previous = token
    return runs


def special_splitter(tokenizer: Any) -> re.Pattern[str] | None:
    """A pattern that cuts text at ``tokenizer``'s special tokens (kept as their own pieces), where tokenizing
    the pieces one by one gives the ids of the whole text, else None.

    A fast tokenizer cuts its input at added tokens before anything else and then normalises and
    pre-tokenizes each piece on its own (huggingface ``tokenizers``: ``AddedVocabulary``, ``PreTokenizedString``),
    so the pieces' ids concatenate to the whole's, provided that no added token strips or joins what is
    next to it (``lstrip``, ``rstrip``, ``single_word``), that there is no normaliser, and that the
    pre-tokenizer treats every piece alike (no ``Metaspace``, whose ``prepend_scheme="first"`` marks only the
    first piece). A tokenizer without a readable ``backend_tokenizer`` gets None.

    Only those three parts are read (the pre-tokenizer as the JSON its pickling writes): serialising the whole
    tokenizer and parsing it again took about 0.8 s of CPU at each load with a 131,072-id vocabulary."""
    try:
        backend = tokenizer.backend_tokenizer
        normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
        pre_state = b"null" if pre_tokenizer is None else bytes(pre_tokenizer.__getstate__())
        added = [a for a in backend.get_added_tokens_decoder().values() if a.special and a.content]
    except Exception:  # a slow or foreign tokenizer: no cutting
        return None
    if normalizer is not None or b"Metaspace" in pre_state:
        return None
    if not added or any(a.lstrip or a.rstrip or a.single_word for a in added):
        return None
    contents = sorted({str(a.content) for a in added}, key=len, reverse=True)  # leftmost, then longest
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")


def segment_encoder(tokenizer: Any, size: int = 256) -> Callable[[str], tuple[int, ...]]:
    """``tokenizer``'s ids of a piece of prompt text without added special tokens, from pieces remembered for
    the ``size`` used last. A step's prompt repeats most of the step before (the system prompt and task, each
    earlier turn), and tokenizing it again costs 10-30 ms a step with a 131,072-id vocabulary (issue 34). The
    text is cut at the chat template's special tokens where that gives the same ids (:func:`special_splitter`;
    else it is one piece), so a turn that moves into the first piece when history is cleaned is still
    remembered. The ids are those of ``tokenizer.encode`` of the whole text (tests/policy/holotron/test_prompt.py)."""
    splitter = special_splitter(tokenizer)

    @functools.lru_cache(maxsize=size)
    def piece(text: str) -> tuple[int, ...]:
        return tuple(int(t) for t in tokenizer.encode(text, add_special_tokens=False))

    def encode(text: str) -> tuple[int, ...]:
        if splitter is None:
            return piece(text)
        return tuple(t for part in splitter.split(text) if part for t in piece(part))

    return encode


def tokenize_prompt(tokenizer: Any, text: str, image_token_counts: Sequence[int], *, img_start_id: int,
                    img_end_id: int, image_token_id: int,
                    encode: Callable[[str], Sequence[int]] | None = None) -> list[int]:
    """Token ids of a rendered prompt with each sentinel expanded to ``<img> <image>*n </img>``.

    Text between sentinels is tokenized without added special tokens (the chat text already holds
    them, as with ``apply_chat_template``), by ``encode`` when given (:func:`segment_encoder` of the same
    tokenizer), else by ``tokenizer.encode``.

    Raises:
        PolicyError: when the number of sentinels differs from ``len(image_token_counts)`` (a chat
            template that dropped or duplicated content).
    """
    segments = text.split(IMAGE_SENTINEL)
    if len(segments) != len(image_token_counts) + 1:
        raise PolicyError(
            f"the rendered prompt holds {len(segments) - 1} image(s) but {len(image_token_counts)} were sent",
            hint="The checkpoint's chat template alters message content; report this checkpoint.",
        )
    encode = encode or (lambda segment: tokenizer.encode(segment, add_special_tokens=False))
    ids: list[int] = []
    for i, segment in enumerate(segments):
        if segment:
            ids.extend(encode(segment))
        if i < len(image_token_counts):
            ids.append(img_start_id)
            ids.extend([image_token_id] * int(image_token_counts[i]))
            ids.append(img_end_id)
    return ids
