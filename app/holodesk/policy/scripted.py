"""A policy that plays a script of protocol replies, one per step (tests, demos, replaying episodes).

Script file format (also in ``docs/actions.md``): JSON Lines, UTF-8.

* A line that is a JSON **object** is one reply. It is serialised back to text (``json.dumps``,
  non-ASCII kept) and parsed through the action protocol, so exactly the parse path of a real model
  runs. Example::

      {"note": null, "thought": "Open the menu", "tool_call": {"tool_name": "click", "x": 20, "y": 15}}

* A line that is a JSON **string** is a raw reply text, used as is. This is how a script holds a
  malformed reply (prose, a fenced block, a truncated object, ...)::

      "Sure! ```json\\n{\\"note\\": null, \\"thought\\": \\"t\\", \\"tool_call\\": null}\\n```"
      "{\\"tool_call\\": {\\"tool_name\\": \\"click\\", \\"x\\": 1500"

  A raw reply may start with a reasoning block (``<think>...</think>``), read as a model's: see
  :meth:`ScriptedPolicy.propose`.

* Lines are separated by ``\n`` (``\r\n`` accepted) only; other Unicode line separators inside a
  reply are part of it. Blank lines and lines whose first non-blank character is ``#`` are ignored.

* The file names its protocol in a comment line ``# protocol: NAME`` before the first reply (e.g.
  ``# protocol: agent-loop-v1``; :func:`write_script` always writes it). A file without one is an old
  script and is read as ``holo-v1``.

Any other line (a number, a list, invalid JSON, JSON nested deeper than Python reads) makes the script
unreadable: :class:`PolicyError` naming the
file and line. Each :meth:`ScriptedPolicy.propose` consumes one reply, whether it parses or
not; after the last one it raises ``PolicyError("script exhausted after N steps")``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from holodesk.core.actions import Action
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import ActionProtocol, Observation, Proposal, ThoughtSink, ThoughtStream, pointer_after
from holodesk.policy.protocol import PROTOCOL_NAMES
from holodesk.policy.registry import get_protocol
from holodesk.policy.reply import split_reasoning

Reply = str | dict[str, Any]
"""One scripted reply: a raw reply text, or a reply object to be serialised."""


def _reply_text(reply: Any, where: str) -> str:
    if isinstance(reply, str):
        return reply
    if isinstance(reply, dict):
        return json.dumps(reply, ensure_ascii=False)
    raise PolicyError(
        f"{where}: expected a JSON object (one reply) or a JSON string (raw reply text), "
        f"got {type(reply).__name__}"
    )


LEGACY_SCRIPT_PROTOCOL = "holo-v1"
"""The protocol of a script file that names none (files written before protocols were named)."""

_PROTOCOL_LINE = re.compile(r"#\s*protocol:\s*(\S+)\s*")


def script_protocol(path: str | os.PathLike[str]) -> str:
    """The protocol a script file names (``# protocol: NAME`` before its first reply), else
    :data:`LEGACY_SCRIPT_PROTOCOL`.

    Raises:
        PolicyError: the file cannot be read.
    """
    return named_protocol(path) or LEGACY_SCRIPT_PROTOCOL


def named_protocol(path: str | os.PathLike[str]) -> str | None:
    """The protocol a script file names (``# protocol: NAME`` before its first reply), else None.

    Raises:
        PolicyError: the file cannot be read.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read script {p}: {exc}", hint="Check the path given for the script.") from exc
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        match = _PROTOCOL_LINE.fullmatch(stripped)
        if match:
            return match.group(1)
    return None


def read_script(path: str | os.PathLike[str]) -> list[str]:
    """Read a script file (format in the module docstring) into reply texts, in order.

    Raises:
        PolicyError: the file cannot be read, or a line is neither a JSON object nor a JSON string, or is nested
            deeper than Python's recursion limit. A lone surrogate (``"\\ud800"``) is kept: the reply's parser and
            the record deal with it (F24).
    """
    p = Path(path)
    try:
        # Split on "\n" only: str.splitlines would also split inside a reply at U+2028, U+0085, ...
        # which json.dumps(ensure_ascii=False) writes literally.
        lines = [line.removesuffix("\r") for line in p.read_text(encoding="utf-8").split("\n")]
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read script {p}: {exc}", hint="Check the path given for the script.") from exc
    replies: list[str] = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{p}:{number}"
        try:
            value = json.loads(stripped)
        except ValueError as exc:
            raise PolicyError(
                f"{where}: not valid JSON ({exc})",
                hint='Write a malformed reply as a JSON string, e.g. "{\\"tool_call\\": ...".',
            ) from exc
        except RecursionError as exc:
            raise PolicyError(
                f"{where}: the JSON is nested deeper than Python can read",
                hint="A reply is one flat JSON object; write a malformed reply as a JSON string.",
            ) from exc
        replies.append(_reply_text(value, where))
    return replies


class ScriptedPolicy:
    """Plays scripted protocol replies, one per :meth:`propose` call.

    Args:
        path_or_replies: a script file (``str`` or path-like; format in the module docstring), or the
            replies themselves: each a raw reply text (``str``) or a reply object (``dict``, serialised
            with ``json.dumps``).
        protocol: the action protocol name or an :class:`ActionProtocol`. None (default): the protocol the
            script file names (:func:`script_protocol`), or ``holo-v1`` for replies given directly.

    Raises:
        PolicyError: the script cannot be read (see :func:`read_script`), or ``protocol`` differs from
            the one the file names.
        SettingsError: unknown protocol name.
    """

    def __init__(
        self,
        path_or_replies: str | os.PathLike[str] | Iterable[Reply],
        protocol: str | ActionProtocol | None = None,
    ) -> None:
        named = named_protocol(path_or_replies) if isinstance(path_or_replies, (str, os.PathLike)) else None
        self.protocol_named = named is not None or protocol is not None  # else the legacy one is assumed
        if protocol is None:
            protocol = named or LEGACY_SCRIPT_PROTOCOL
        self.protocol = protocol if isinstance(protocol, ActionProtocol) else get_protocol(protocol)
        if named is not None and named != LEGACY_SCRIPT_PROTOCOL and named != self.protocol.name:
            raise PolicyError(
                f"{path_or_replies} names the protocol {named!r}, but {self.protocol.name!r} was asked for",
                hint="Leave the protocol out to play the script in the one it names.",
            )
        if isinstance(path_or_replies, (str, os.PathLike)):
            self.source = str(path_or_replies)
            self.replies = read_script(path_or_replies)
        else:
            self.source = "<replies>"
            self.replies = [
                _reply_text(r, f"reply {i + 1}") for i, r in enumerate(path_or_replies)
            ]
        self.name = f"scripted:{Path(self.source).name}" if self.source != "<replies>" else "scripted"
        self.steps_played = 0
        self.thought_sink: ThoughtSink | None = None

    @property
    def remaining(self) -> int:
        """Replies not yet played."""
        return len(self.replies) - self.steps_played

    def propose(self, observation: Observation) -> Proposal:
        """Play the next reply as a model's reply is read. The observation is not looked at. A reasoning block
        before the reply (``<think>...</think>``) is read as the local and remote policies read one
        (:func:`holodesk.policy.reply.split_reasoning`): recorded as ``extra["reasoning_text"]``, never part of the
        parsed reply (so never written into a later turn); the rest goes through the protocol's parser. The
        step's thought (the reasoning block when there is one, else the reply's ``thought`` field) goes to
        :attr:`thought_sink` word by word before the proposal is returned
        (:class:`~holodesk.policy.base.StreamsThought`).

        Returns:
            Proposal with ``raw_text`` = the reply text (reasoning block included), ``timings_ms["policy"]``
            (parse time, ms) and ``extra`` = ``{"script_step": n (1-based), "source": ..., "warnings": [...]}``
            plus ``reasoning_text`` when the reply has a reasoning block.
        Raises:
            PolicyOutputError: the reply does not parse (the step is consumed); its ``raw_text`` is the whole
                reply and its ``extra`` the step's.
            PolicyError: ``"script exhausted after N steps"`` when no reply is left.
        """
        if self.steps_played >= len(self.replies):
            raise PolicyError(
                f"script exhausted after {self.steps_played} steps",
                hint=f"{self.source} has no reply left; add replies or end the task earlier.",
            )
        text = self.replies[self.steps_played]
        self.steps_played += 1
        start = time.perf_counter()
        thought, reply = split_reasoning(text)
        extra: dict[str, Any] = {"script_step": self.steps_played, "source": self.source}
        if thought:
            extra["reasoning_text"] = thought  # recorded with the step; never written into a later prompt
        try:
            parsed = self.protocol.parse(reply, pointer=pointer_after(observation.history))
        except PolicyOutputError as exc:  # recorded with the step, as a real policy's would be
            speaks = None if self.protocol_named else self._other_protocol(reply, observation)
            if speaks is not None:  # a file without its "# protocol:" line, in another protocol
                exc.hint = (f"{self.source} names no protocol, so its replies are read as {self.protocol.name}; this "
                            f"reply is {speaks}: add the line `# protocol: {speaks}` at the top of the file.")
            exc.raw_text = text
            exc.timings_ms = {"policy": (time.perf_counter() - start) * 1000.0}
            exc.extra = extra
            self._stream(thought or "")
            raise
        self._stream(thought or parsed.thought)
        elapsed_ms = (time.perf_counter() - start) * 1000.0
        return Proposal(
            action=parsed.action,
            thought=parsed.thought,
            note=parsed.note,
            raw_text=text,
            timings_ms={"policy": elapsed_ms},
            extra={**extra, "warnings": list(parsed.warnings)},
        )

    def _stream(self, thought: str) -> None:
        """Hand ``thought`` to :attr:`thought_sink` one word (with the spaces before it) at a time."""
        stream = ThoughtStream(self.thought_sink, interval_s=0.0)
        for end in (m.end() for m in re.finditer(r"\s*\S+", thought)):
            stream.offer(thought[:end])
        stream.finish(thought.strip())

    def _other_protocol(self, text: str, observation: Observation) -> str | None:
        """The name of another known protocol that parses ``text``, else None."""
        for name in PROTOCOL_NAMES:
            if name == self.protocol.name:
                continue
            try:
                get_protocol(name).parse(text, pointer=pointer_after(observation.history))
            except PolicyOutputError:
                continue
            return name
        return None

    def close(self) -> None:
        """Nothing to release."""


def write_script(
    path: str | os.PathLike[str],
    replies: Iterable[Reply | Action],
    *,
    protocol: str | ActionProtocol = "holo-v1",
    header: str | None = None,
) -> Path:
    """Write a script file that :class:`ScriptedPolicy` plays back.

    Args:
        path: file to (over)write, UTF-8.
        replies: each a reply object (``dict``, written as a JSON object line), a raw reply text
            (``str``, written as a JSON string line, kept exactly), or an :class:`Action` (written as
            the protocol's reply object with an empty thought and a null note).
        protocol: protocol used to serialise actions; named in the file's first line
            (``# protocol: NAME``).
        header: optional comment written after it (each line prefixed with ``# ``).
    Returns:
        The path written.
    Raises:
        PolicyError: a reply of another type.
    """
    proto = protocol if isinstance(protocol, ActionProtocol) else get_protocol(protocol)
    lines: list[str] = [f"# protocol: {proto.name}"]
    if header:
        lines += [f"# {line}" for line in header.splitlines()]
    for i, reply in enumerate(replies):
        if isinstance(reply, Action):
            lines.append(proto.to_reply(reply))
        elif isinstance(reply, (dict, str)):  # object line, or raw text as a JSON string line
            lines.append(json.dumps(reply, ensure_ascii=False))
        else:
            raise PolicyError(f"reply {i + 1}: cannot script a {type(reply).__name__}")
    p = Path(path)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p
