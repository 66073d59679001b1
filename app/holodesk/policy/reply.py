"""The reply reader shared by the action protocols: one JSON object found in a model's reply, its
coordinates checked, and every failure turned into one :class:`~holodesk.errors.PolicyOutputError`.

A reply is read whole as JSON; else the object is found in prose, markdown fences or after a ``<think>``
reasoning block, each tolerance noted in plain words (field cases F07, F10, F25: linear in the reply's
length). Coordinates are integers in ``[0, 1000]`` of the image sent (:class:`~holodesk.core.actions.Point`):
fractions in [0, 1] and values above 1000 are named as another convention (F08), and nothing is clamped
(F05). ``holo-v1`` (:mod:`holodesk.policy.protocol`) and ``agent-loop-v1`` (:mod:`holodesk.policy.contract`)
both read their replies here.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings as _pywarnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from holodesk.core.actions import NORM_MAX, Action, Point
from holodesk.errors import ActionError, PolicyOutputError

MAX_REPLY_CHARS: Final = 200_000
"""Longest reply the parser reads (characters). A valid reply is far shorter (typed text <= 10,000)."""

MAX_CANDIDATE_OBJECTS: Final = 64
"""More brace-delimited groups than this in one reply is rejected as unreadable."""


_INT_STRING = re.compile(r"[+-]?\d{1,12}(?:\.0*)?")
_FLOAT_STRING = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class ParsedReply:
    """One reply of the policy model, parsed.

    Attributes:
        action: the action, valid by construction.
        thought: the model's one-line plan, verbatim ("" when absent).
        note: durable memory for later steps, verbatim, or None.
        raw_text: the reply exactly as received.
        warnings: what the parser tolerated (prose around the JSON, a coordinate given as a string, ...),
            in plain words; empty for a reply that followed the protocol exactly.
    """

    action: Action
    thought: str
    note: str | None
    raw_text: str
    warnings: tuple[str, ...] = ()


class ReplyError(Exception):
    """A reply that cannot be read, with its message and a hint for the model; :func:`reading` turns it into
    :class:`~holodesk.errors.PolicyOutputError` at the protocol's boundary."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ReplyError(f"the JSON object has the key {key!r} twice, so its meaning is ambiguous")
        out[key] = value
    return out


def _json_loads(text: str) -> Any:
    """json.loads that rejects NaN/Infinity and duplicate keys. Raises ValueError or ReplyError."""
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs_no_duplicates)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


def _is_json_value(value: Any, depth: int = 0) -> bool:
    """True when ``value`` (from ast.literal_eval) is made only of JSON types."""
    if depth > 64:
        return False
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v, depth + 1) for k, v in value.items())
    return False


def _outside_strings(text: str) -> Iterator[tuple[int, int]]:
    """Yield ``(index, depth)`` for each character of ``text`` that is not inside a quoted string: ``depth``
    is the number of brace groups open before it. Quotes open a string only within a group (text between
    groups is prose), single or double, with backslash escapes. One pass, linear in ``len(text)``."""
    depth = 0
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        yield i, depth
        if depth and ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1


def _scan_objects(text: str) -> tuple[list[tuple[int, int]], bool]:
    """Find the top-level brace-delimited groups of ``text`` (braces in quoted strings within a group do not
    count: :func:`_outside_strings`).

    Returns (spans as [start, end) pairs, True when a group is still open at the end of the text, i.e. a
    closing brace is missing).
    """
    spans: list[tuple[int, int]] = []
    start = -1
    for i, depth in _outside_strings(text):
        ch = text[i]
        if depth == 0 and ch == "{":
            start = i
        elif depth == 1 and ch == "}":
            spans.append((start, i + 1))
    return spans, start >= 0 and (not spans or spans[-1][0] != start)


def _depth_zero_find(text: str, tag: str) -> int:
    """Index of the first ``tag`` in ``text`` that lies outside every brace-delimited group, else -1
    (the groups as in :func:`_scan_objects`; one pass, linear in ``len(text)``)."""
    first = tag[0]
    for i, depth in _outside_strings(text):
        if depth == 0 and text[i] == first and text.startswith(tag, i):
            return i
    return -1


_THINK: Final = "<think>"
_END_THINK: Final = "</think>"


def _reasoning_end(text: str, opened: bool) -> int | None:
    """Index just after the ``</think>`` that ends the reasoning block of ``text``; None when there is no block;
    -1 when ``text`` starts with ``<think>`` that is never closed.

    The block is a leading ``<think>`` to the first ``</think>``; else, when ``opened`` (the prompt ended inside
    the block, holotron.md "Prompt layout"), everything up to the first ``</think>``; else what comes before a
    ``</think>`` outside every brace-delimited group (a template that opened the block unknown to the caller: a
    ``</think>`` quoted inside the reply's object is the reply's text). Linear in ``len(text)`` (field case F25).
    """
    start = len(text) - len(text.lstrip())
    if text.startswith(_THINK, start):
        close = text.find(_END_THINK, start)
        return -1 if close < 0 else close + len(_END_THINK)
    close = text.find(_END_THINK) if opened else _depth_zero_find(text, _END_THINK)
    return None if close < 0 else close + len(_END_THINK)


def split_reasoning(raw_text: str, *, opened: bool = False) -> tuple[str | None, str]:
    """Split a model's reply into the thought written before it (its ``<think>...</think>`` block) and the reply.

    The one reading of a reasoning block, for every policy that gets one in the reply's text (local runtimes,
    scripted replies, a server that returns it in the content); the block is found as :func:`_reasoning_end`
    says (``opened``: the prompt ended inside the block, so the reply may hold only its closing tag).

    Returns:
        ``(thought, reply)``: the block's text with a leading ``<think>`` dropped, stripped (None when there is
        no block or it is empty), and the text after the block (``raw_text`` whole when there is no block, or
        when a leading ``<think>`` is never closed, which the reply's parser then refuses with its reason).
    """
    end = _reasoning_end(raw_text, opened)
    if end is None or end < 0:
        return None, raw_text
    thought = raw_text[:end - len(_END_THINK)].strip().removeprefix(_THINK).strip()
    return thought or None, raw_text[end:]


def _strip_reasoning(text: str) -> tuple[str, bool]:
    """Drop a reasoning block (``<think>...</think>``, :func:`_reasoning_end`) before the reply: (the text after
    it, whether there was one). Raises ReplyError for a leading ``<think>`` never closed."""
    end = _reasoning_end(text, opened=False)
    if end is not None and end < 0:
        raise ReplyError("the reasoning block <think> is never closed, so there is no reply after it")
    return (text, False) if end is None else (text[end:], True)


def read_object(raw_text: str) -> tuple[dict[str, Any], list[str]]:
    """Find the one JSON object of a reply. Returns (object, warnings); raises ReplyError.

    The reply is read whole as JSON first; else a reasoning block is dropped, the top-level brace groups
    are found in one scan (:func:`_scan_objects`), each is read as JSON or as an unambiguous literal
    (:func:`_read_fragment`), and all that parse must be the same object. Linear in ``len(raw_text)``
    (field case F25): every scan is one pass, and the groups are disjoint, so each character is parsed
    at most once as part of a group.
    """
    _check_reply_size(raw_text)
    # 1. The whole reply is JSON (the normal case).
    whole = _whole_reply_object(raw_text)
    if whole is not None:
        return whole, []
    # 2. JSON inside prose / markdown fences / after a reasoning block.
    warnings: list[str] = []
    body, had_reasoning = _strip_reasoning(raw_text)
    if had_reasoning:
        warnings.append("a <think> reasoning block before the reply was ignored")
    spans = _candidate_spans(body)
    found = _read_candidates(body, spans, warnings)
    distinct = {json.dumps(obj, sort_keys=True) for obj in found}
    if len(distinct) > 1:
        raise ReplyError(
            f"the reply contains {len(distinct)} different JSON objects; exactly one is expected, and "
            "which one was meant is not guessed",
            hint="Reply with one JSON object per step.",
        )
    if len(found) > 1:
        warnings.append(f"the same JSON object was repeated {len(found)} times; it is used once")
    before = body[: spans[0][0]].strip()
    after = body[spans[-1][1]:].strip()
    if before.startswith("```") or after.endswith("```"):
        warnings.append("the JSON object was fenced in markdown")
    elif before or after:
        warnings.append("text outside the JSON object was ignored")
    return found[0], warnings


def _check_reply_size(raw_text: str) -> None:
    """Raises ReplyError for a reply that is not text, is blank, or is longer than :data:`MAX_REPLY_CHARS`."""
    if not isinstance(raw_text, str):
        raise ReplyError(f"the reply is not text but {type(raw_text).__name__}")
    if not raw_text.strip():
        raise ReplyError("the reply is empty")
    if len(raw_text) > MAX_REPLY_CHARS:
        raise ReplyError(f"the reply has {len(raw_text)} characters, more than {MAX_REPLY_CHARS}")


def _whole_reply_object(raw_text: str) -> dict[str, Any] | None:
    """The reply as one JSON object when the whole (stripped) reply is JSON, else None.

    Raises:
        ReplyError: the whole reply is JSON but not an object (a list, string, number, ...).
    """
    try:
        whole = _json_loads(raw_text.strip())
    except ValueError:
        return None
    if isinstance(whole, dict):
        return whole
    raise ReplyError(f"the reply is JSON but a {json_type(whole)}, not one object")


def _candidate_spans(body: str) -> list[tuple[int, int]]:
    """The top-level brace groups of ``body`` as [start, end) pairs (:func:`_scan_objects`).

    Raises:
        ReplyError: a group is never closed, there is none, or there are more than
            :data:`MAX_CANDIDATE_OBJECTS`.
    """
    spans, unterminated = _scan_objects(body)
    if unterminated:
        raise ReplyError(
            "a JSON object in the reply is never closed (missing closing brace); it is not guessed",
            hint="Reply with one complete JSON object.",
        )
    if not spans:
        raise ReplyError("the reply contains no JSON object", hint="Reply with one JSON object only.")
    if len(spans) > MAX_CANDIDATE_OBJECTS:
        raise ReplyError(f"the reply contains {len(spans)} brace-delimited groups; expected one JSON object")
    return spans


def _read_candidates(body: str, spans: list[tuple[int, int]], warnings: list[str]) -> list[dict[str, Any]]:
    """The objects read from the groups ``spans`` of ``body``, in order (at least one). A group without a
    colon that does not parse is prose in braces and is skipped.

    Raises:
        ReplyError: a group with a colon is neither JSON nor an unambiguous literal, or no group is an object.
    """
    found: list[dict[str, Any]] = []
    malformed: list[str] = []
    for start, end in spans:
        fragment = body[start:end]
        obj = _read_fragment(fragment, warnings)
        if obj is None:
            if ":" in fragment:
                malformed.append(fragment)
            continue
        found.append(obj)
    if malformed:
        shown = malformed[0] if len(malformed[0]) <= 120 else malformed[0][:120] + "…"
        raise ReplyError(
            f"the reply contains an object that is neither valid JSON nor an unambiguous literal: {shown}",
            hint="Use double quotes, null/true/false, and no trailing commas.",
        )
    if not found:
        raise ReplyError("the reply contains no JSON object", hint="Reply with one JSON object only.")
    return found


def _read_fragment(fragment: str, warnings: list[str]) -> dict[str, Any] | None:
    """Read one brace group as JSON, else as a Python dict literal made of JSON types; else None."""
    try:
        obj = _json_loads(fragment)
    except ValueError:
        pass
    else:
        return obj if isinstance(obj, dict) else None
    try:
        with _pywarnings.catch_warnings():  # invalid escapes in model text warn (or raise under -W error)
            _pywarnings.simplefilter("ignore")
            obj = ast.literal_eval(fragment)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, Warning):
        return None
    if isinstance(obj, dict) and _is_json_value(obj):
        warnings.append("the reply used single-quoted (Python-style) pseudo-JSON; read as a literal")
        return obj
    return None


def json_type(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else type(value).__name__


def short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def _check_convention(values: dict[str, Any], where: str, protocol: str) -> None:
    """Flag coordinates that follow another convention (field case F08): all floats in [0, 1]."""
    if not values:
        return
    fractional = all(
        (isinstance(v, float) and 0.0 <= v <= 1.0)
        or (
            isinstance(v, str)
            and "." in v
            and _FLOAT_STRING.fullmatch(v.strip()) is not None
            and 0.0 <= float(v) <= 1.0
        )
        for v in values.values()
    )
    if fractional:
        raise ReplyError(
            f"every coordinate in {where} is a fraction between 0 and 1 ({short(values)}): this looks "
            f"like the 0..1 normalised convention, but {protocol} wants integers in [0, {NORM_MAX}]",
            hint=f"Multiply by {NORM_MAX} and round, e.g. 0.5 -> 500.",
        )


def to_int(value: Any, name: str, where: str, warnings: list[str]) -> int:
    """An integer field that may arrive as an integral float (500.0) or a numeric string ("500")."""
    if isinstance(value, bool):
        raise ReplyError(f"{name} in {where} must be an integer, got the boolean {short(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ReplyError(f"{name} in {where} must be an integer, got the non-integral number {value!r}")
        warnings.append(f"{name} was given as the float {value!r}; read as {int(value)}")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INT_STRING.fullmatch(text):
            number = int(float(text)) if "." in text else int(text)
            warnings.append(f"{name} was given as the string {value!r}; read as {number}")
            return number
        if _FLOAT_STRING.fullmatch(text):
            raise ReplyError(f"{name} in {where} must be an integer, got the non-integral string {value!r}")
        raise ReplyError(f"{name} in {where} must be an integer, got the non-numeric string {short(value)}")
    raise ReplyError(f"{name} in {where} must be an integer, got a {json_type(value)}: {short(value)}")


def coordinates(
    values: dict[str, Any], where: str, warnings: list[str], protocol: str
) -> dict[str, int]:
    """Validate coordinate fields: convention (F08), integers, range [0, 1000] never clamped (F05)."""
    _check_convention(values, where, protocol)
    ints = {name: to_int(v, name, where, warnings) for name, v in values.items()}
    for name, v in ints.items():
        if v > NORM_MAX:
            raise ReplyError(
                f"coordinate {name}={v} in {where} lies outside the image the model saw (allowed 0.."
                f"{NORM_MAX}); values above {NORM_MAX} look like pixel coordinates, but {protocol} wants "
                f"integers normalised to [0, {NORM_MAX}]. The point is not clamped.",
                hint=f"Give x and y as thousandths of the screenshot's width and height (0..{NORM_MAX}).",
            )
        if v < 0:
            raise ReplyError(
                f"coordinate {name}={v} in {where} lies outside the image the model saw (allowed 0.."
                f"{NORM_MAX}). The point is not clamped."
            )
    return ints


@contextmanager
def reading(raw_text: Any, invalid: str = "the reply is not a valid action") -> Iterator[None]:
    """The boundary of a protocol's parser: what the block raises becomes one PolicyOutputError carrying
    ``raw_text`` (as text; ``repr`` of anything else).

    Raises:
        PolicyOutputError: for a :class:`ReplyError` (its message and hint), or for an ActionError,
            ValueError, TypeError, ArithmeticError or RecursionError (``"<invalid>: <error>"``).
    """
    try:
        yield
    except ReplyError as exc:
        raise PolicyOutputError(exc.message, raw_text=_as_text(raw_text), hint=exc.hint) from None
    except (ActionError, ValueError, TypeError, ArithmeticError, RecursionError) as exc:
        raise PolicyOutputError(f"{invalid}: {exc}", raw_text=_as_text(raw_text)) from None


def read_point(raw_text: str, protocol: str) -> Point:
    """Read a localization reply ``{"x": int, "y": int}`` (packaging and coordinates as in :func:`read_object`
    and :func:`coordinates`; ``protocol`` names the convention in messages).

    Raises:
        PolicyOutputError: (with ``raw_text``) when the reply is not exactly one such object.
    """
    with reading(raw_text, "the localization reply is not valid"):
        obj, warnings = read_object(raw_text)
        missing = [k for k in ("x", "y") if k not in obj]
        if missing:
            raise ReplyError(
                f"the localization reply lacks {', '.join(missing)}; expected "
                '{"x": int, "y": int}'
            )
        extra = sorted(set(obj) - {"x", "y"})
        if extra:
            raise ReplyError(f"the localization reply has unexpected field(s) {', '.join(extra)}")
        c = coordinates({"x": obj["x"], "y": obj["y"]}, "the localization reply", warnings, protocol)
        return Point(c["x"], c["y"])


def disarm(value: str) -> str:
    """Break ``/think`` and ``/no_think`` in user or model text with a zero-width space after the slash:
    only the system prompt may switch Nemotron's reasoning (the template reads the last one in user text)."""
    for tag in ("/no_think", "/think"):
        value = value.replace(tag, "/\u200b" + tag[1:])
    return value


def _as_text(raw: Any) -> str:
    return raw if isinstance(raw, str) else repr(raw)
