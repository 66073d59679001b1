"""Chat prompt for Holotron: protocol messages -> text -> token ids with image placeholders.

Layout (Nemotron Nano 2, docs/holotron.md "Prompt layout")::

    <SPECIAL_10>System\\n{system}\\n<SPECIAL_11>User\\n{user}\\n<SPECIAL_11>Assistant\\n<think></think>

Each image becomes ``<img>`` + ``<image>`` x (256 x tiles) + ``</img>`` (no per-tile markers). The
tokenizer's own ``chat_template`` renders the text when the checkpoint ships one; :func:`fallback_chat`
reproduces the layout otherwise (tested against the template of the tiny checkpoint). Images are carried
through the template as a private sentinel string and replaced by token ids afterwards, so the template
never has to know about images.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from holodesk.core.geometry import Frame
from holodesk.errors import PolicyError

IMAGE_SENTINEL = "\ue000holodesk:image\ue000"
"""Stands for one image inside rendered chat text (Unicode private-use characters around a tag)."""

_CONTROL_TAGS = ("/no_think", "/think")


def flatten_messages(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, str]], list[Frame]]:
    """Turn protocol messages (content = list of text/image parts) into plain-text chat messages.

    Parts of one message are joined with ``"\\n"``; every image part becomes :data:`IMAGE_SENTINEL`.

    Returns:
        (messages with string content, frames in prompt order).
    Raises:
        PolicyError: for an unknown role or part type, or an image part without a Frame.
    """
    out: list[dict[str, str]] = []
    frames: list[Frame] = []
    for message in messages:
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise PolicyError(f"chat message has an unknown role {role!r}")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        pieces: list[str] = []
        for part in content or ():
            kind = part.get("type")
            if kind == "text":
                # the sentinel's own characters in text (a task, a reply) must not read as an image
                pieces.append(str(part.get("text", "")).replace(IMAGE_SENTINEL, IMAGE_SENTINEL[:-1] + "\u200b\ue000"))
            elif kind == "image":
                frame = part.get("frame")
                if not isinstance(frame, Frame):
                    raise PolicyError("an image part of the chat has no Frame")
                frames.append(frame)
                pieces.append(IMAGE_SENTINEL)
            else:
                raise PolicyError(f"chat message part has an unknown type {kind!r}")
        out.append({"role": role, "content": "\n".join(pieces)})
    return out, frames


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
    for tag in _CONTROL_TAGS:
        text = text.replace(tag, "")
    return text.strip()


def fallback_chat(messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
    """Render the Nemotron Nano 2 chat layout without a template (docs/holotron.md, "Prompt layout").

    System first (``<SPECIAL_10>System\\n...\\n``, empty when absent), then ``<SPECIAL_11>User\\n...\\n``
    and ``<SPECIAL_11>Assistant\\n...\\n<SPECIAL_12>\\n`` turns; ``/think`` and ``/no_think`` are removed
    from system and user text and select the generation prompt's ending: ``<think>\\n`` (reasoning) or
    ``<think></think>``.
    """
    system = ""
    for message in messages:
        if message["role"] == "system":
            system = message["content"]  # the last system message wins, as in the template
    parts = ["<SPECIAL_10>System\n" + _strip_controls(system) + "\n"]
    for message in messages:
        if message["role"] == "user":
            parts.append("<SPECIAL_11>User\n" + _strip_controls(message["content"]) + "\n")
        elif message["role"] == "assistant":
            parts.append("<SPECIAL_11>Assistant\n" + message["content"].strip() + "\n<SPECIAL_12>\n")
    if add_generation_prompt:
        ending = "<think>\n" if reasoning_requested(messages) else "<think></think>"
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


def neutralize_special_tokens(messages: Sequence[dict[str, str]], specials: Sequence[str]) -> list[dict[str, str]]:
    """Copies of ``messages`` where, outside the system message, special-token text is broken up with a
    zero-width space after its first character, so that it is tokenized as ordinary text.

    Why: that content is user and model text (the task, earlier replies, notes). Rendered into the chat
    text and tokenized, a literal ``<image>`` would become an image token (and the prompt would hold more
    image slots than images), ``</think>`` would end a thought, ``<SPECIAL_12>`` a turn. Only the chat
    template places special tokens. (The reasoning switches ``/think`` / ``/no_think`` in that text are
    disarmed for every runtime by the protocol's ``build_messages``.)
    """
    out = []
    for message in messages:
        content = message["content"]
        if message["role"] != "system":
            for token in specials:
                if token in content and token != IMAGE_SENTINEL:
                    content = content.replace(token, token[0] + "\u200b" + token[1:])
        out.append({**message, "content": content})
    return out


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> tuple[str, str]:
    """Render plain-text messages with the tokenizer's chat template, or the fallback.

    Returns:
        (prompt text ending with the generation prompt, ``"chat_template"`` or ``"fallback"``).
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


def tokenize_prompt(
    tokenizer: Any,
    text: str,
    image_token_counts: Sequence[int],
    *,
    img_start_id: int,
    img_end_id: int,
    image_token_id: int,
) -> list[int]:
    """Token ids of a rendered prompt with each sentinel expanded to ``<img> <image>*n </img>``.

    Text between sentinels is tokenized without added special tokens (the chat text already holds
    them, as with ``apply_chat_template``).

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
    ids: list[int] = []
    for i, segment in enumerate(segments):
        if segment:
            ids.extend(int(t) for t in tokenizer.encode(segment, add_special_tokens=False))
        if i < len(image_token_counts):
            ids.append(img_start_id)
            ids.extend([image_token_id] * int(image_token_counts[i]))
            ids.append(img_end_id)
    return ids
