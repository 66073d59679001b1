"""The Policy interface shared by the scripted, local (Holotron) and remote policies."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from holodesk.core.actions import Action, Point
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import SettingsError
from holodesk.policy.reply import ParsedReply, read_point

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryStep:
    """One earlier step of the episode as the policy sees it.

    Attributes:
        index: 0-based step number.
        frame: the frame of that step (policies keep only the last N as images).
        action: the action that was proposed (None when the reply did not parse).
        thought: the model's one-line plan for that step.
        note: durable memory the model asked to carry forward (protocol ``note``), or None.
        raw_text: the model's reply as received.
        outcome: short plain-words result ("performed", "skipped by user", "failed: ...").
    """

    index: int
    frame: Frame | None
    action: Action | None
    thought: str = ""
    note: str | None = None
    raw_text: str = ""
    outcome: str = ""


@dataclass(frozen=True)
class Observation:
    """What the policy gets for one step.

    Attributes:
        task: the user's instruction in plain words.
        frame: the current frame of the chosen monitor.
        history: earlier steps, oldest first.
        deadline: ``time.monotonic()`` seconds by which the task's wall-time cap ends it, or None (no cap);
            a policy that waits on something outside the process (a server) gives up by then.
    """

    task: str
    frame: Frame
    history: tuple[HistoryStep, ...] = ()
    deadline: float | None = None


@dataclass(frozen=True)
class Proposal:
    """A policy's answer for one step.

    Attributes:
        action: the proposed action, valid by construction.
        thought: the model's one-line plan (plain text, shown verbatim).
        note: durable memory for later steps, or None.
        raw_text: the model's reply exactly as produced.
        timings_ms: stage name -> milliseconds (e.g. preprocess, vision, prefill, decode).
        extra: backend-specific details worth recording (token counts, kernel path, image size sent).
        notices: what the user must be told about how this proposal was made, in plain words: a
            fallback the policy took (e.g. "GPU memory ran out with 3 screenshots; retried with 2",
            F21). The session shows each one and records it; nothing falls back silently.
    """

    action: Action
    thought: str = ""
    note: str | None = None
    raw_text: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    notices: tuple[str, ...] = ()


def pointer_after(history: Sequence[HistoryStep]) -> Point | None:
    """Where the pointer is after the performed steps of ``history``: the last point of the last performed
    pointer action, or None when no performed step moved it.

    A step counts as performed when its outcome is ``"performed"`` or starts with ``"sent"`` (sent but not
    verified)."""
    for step in reversed(history):
        if step.action is None or not step_performed(step.outcome):
            continue
        points = step.action.points()
        if points:
            return points[-1]
    return None


DEFAULT_MAX_IMAGES = 3
"""Screenshots in a prompt, current one included, for a policy that does not say (no ``max_images``)."""


def forget_unused_frames(history: list[HistoryStep], policy: object) -> None:
    """Drop, in place, the frames of ``history`` that ``policy`` will never send again, so an episode holds
    a bounded number of screenshots in memory (a 1080p frame is 6 MB; every step's frame is on disk in the
    episode folder).

    A policy sends the current frame plus those of the ``max_images - 1`` most recent history steps that have
    one (:func:`kept_frames`); ``max_images`` is the policy's attribute of that name,
    else :data:`DEFAULT_MAX_IMAGES`. Older steps keep everything but their frame (``frame=None``), as a step
    whose frame was never taken.
    """
    keep = max(0, int(getattr(policy, "max_images", DEFAULT_MAX_IMAGES)) - 1)
    for index in range(len(history) - 1, -1, -1):
        if history[index].frame is None:
            continue
        if keep > 0:
            keep -= 1
        else:
            history[index] = replace(history[index], frame=None)


def step_performed(outcome: str) -> bool:
    """True for a history outcome of a step that was carried out: ``"performed"`` or ``"sent but not
    verified: ..."``."""
    return outcome == "performed" or outcome.startswith("sent")


def kept_frames(history: Sequence[HistoryStep], max_images: int) -> set[int]:
    """Indices of the history steps whose screenshots are still sent: the most recent ``max_images - 1``
    steps that have a frame (the current screenshot is the last image). Older ones are sent as text.

    Raises:
        SettingsError: when ``max_images`` is not an integer >= 1 (the current frame is always sent).
    """
    if isinstance(max_images, bool) or not isinstance(max_images, int) or max_images < 1:
        raise SettingsError(
            f"max_images must be an integer >= 1 (the current screenshot is always sent), got {max_images!r}"
        )
    with_frames = [i for i, step in enumerate(history) if step.frame is not None]
    # max(0, ...) so that a short history is not sliced from a negative (wrapped-around) start
    return set(with_frames[max(0, len(with_frames) - (max_images - 1)):]) if max_images > 1 else set()


class ActionProtocol:
    """What the policy model is asked to emit and how its reply becomes an action: the interface of the
    protocols ``holo-v1`` (:class:`holodesk.policy.protocol.HoloV1Protocol`) and ``agent-loop-v1``
    (:class:`holodesk.policy.contract.AgentLoopProtocol`), which read replies with
    :mod:`holodesk.policy.reply`. Get one through :func:`holodesk.policy.registry.get_protocol`.

    Attributes:
        name: the protocol's versioned name.
        instructions: the system prompt without the reasoning switch line.
    """

    name: str
    instructions: str

    def system_prompt(self, *, reasoning: bool = False, reasoning_line: bool = True) -> str:
        """The system turn: :attr:`instructions`, then, with ``reasoning_line`` (models switched in the system
        prompt, Nemotron Nano 2: :attr:`holodesk.policy.models.Reasoning.prompt_line`), a last line ``/think``
        when ``reasoning`` else ``/no_think`` (holotron.md, "Prompt layout"). Without it no switch is
        written: models switched by a chat-template variable (Holo2, Holo3, Holotron-3-Nano) would read the
        line as text."""
        if not reasoning_line:
            return self.instructions
        return self.instructions + ("\n/think" if reasoning else "\n/no_think")

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of one reply, for constrained decoding; a fresh copy on every call."""
        raise NotImplementedError

    def localization_schema(self) -> dict[str, Any]:
        """JSON Schema of a localization reply ``{"x": int, "y": int}`` in [0, 1000]; a fresh copy."""
        raise NotImplementedError

    def parse(self, raw_text: str, *, pointer: Point | None = None) -> ParsedReply:
        """One reply as an action; ``pointer`` is where the pointer is (None when not known).

        Raises:
            PolicyOutputError: (with ``raw_text``) the reply is not a valid action.
        """
        raise NotImplementedError

    def to_reply(self, action: Action, *, thought: str = "", note: str | None = None) -> str:
        """``action`` written as a reply of this protocol (one line of JSON).

        Raises:
            ActionError: the protocol has no tool for the action.
        """
        raise NotImplementedError

    def format_step(self, step: HistoryStep) -> str:
        """Text form of a past step for the prompt (protocols that write history as text)."""
        raise NotImplementedError

    def build_messages(
        self, observation: Observation, *, max_images: int = DEFAULT_MAX_IMAGES, reasoning: bool = False,
        reasoning_line: bool = True,
    ) -> list[dict[str, Any]]:
        """Chat messages for one step, shared by the local and the remote runtime; parts are
        ``{"type": "text", "text": str}`` or ``{"type": "image", "frame": Frame}``.

        Raises:
            SettingsError: when ``max_images`` < 1 (the current frame is always sent).
        """
        raise NotImplementedError

    def localization_prompt(self, target: str) -> str:
        """The grounding-only prompt for ``target`` (the element in words)."""
        raise NotImplementedError

    def localization_messages(self, image: Any, target: str) -> list[dict[str, Any]]:
        """The element-localization request for ``target`` on ``image`` (an ``(H, W, 3)`` uint8 RGB array, a crop
        of the frame): one user turn, the image (as a :class:`Frame` of its own size) then
        :meth:`localization_prompt`, in the parts :meth:`build_messages` uses; no system turn (H Company's element
        localization, hub.hcompany.ai/element-localization). The local and the remote runtime both send it."""
        crop = Frame(image, Monitor(1, 0, 0, int(image.shape[1]), int(image.shape[0])))
        return [{"role": "user", "content": [{"type": "image", "frame": crop},
                                             {"type": "text", "text": self.localization_prompt(target)}]}]

    def parse_localization(self, raw_text: str) -> Point:
        """A localization reply ``{"x": int, "y": int}`` as a point in [0, 1000]: packaging is tolerated and
        coordinates follow the rules of :func:`holodesk.policy.reply.coordinates` (integral floats and
        numeric strings accepted, fractions in [0, 1] flagged as another convention, values outside
        [0, 1000] rejected and never clamped).

        Raises:
            PolicyOutputError: (with ``raw_text``) when the reply is not exactly one such object.
        """
        return read_point(raw_text, self.name)


@runtime_checkable
class Policy(Protocol):
    """Anything that proposes one action per observation.

    ``propose`` raises :class:`~holodesk.errors.PolicyOutputError` (reply is not a valid action; the
    raw text travels with it) or :class:`~holodesk.errors.PolicyError` (no reply at all).
    """

    name: str
    protocol: ActionProtocol
    """The action protocol the policy's replies are parsed in (an edited step is read in it too)."""

    def propose(self, observation: Observation) -> Proposal: ...

    def close(self) -> None: ...


@runtime_checkable
class Localizer(Protocol):
    """A policy that can also localize one element (H Company's element localization,
    hub.hcompany.ai/element-localization): the approval card's "Click more precisely" asks it."""

    def localize(self, image: Any, target: str) -> Point:
        """The point of ``target`` (the element in words) in ``image`` (an ``(H, W, 3)`` uint8 RGB array).

        Returns:
            The point in ``[0, 1000]`` of ``image``.
        Raises:
            PolicyOutputError: the reply is not a point (``raw_text`` carries it).
            PolicyError: no reply at all.
        """
        ...


ThoughtSink = Callable[[str], None]
"""Takes the next piece of the model's thought (its reasoning text) while a step is generated; the pieces of one
step joined are the thought recorded with it (``Proposal.extra["reasoning_text"]``)."""

THOUGHT_INTERVAL_S = 0.075
"""Least seconds between two pieces handed to a :data:`ThoughtSink` (a card repainted about 13 times a second;
a token every ~8 ms would otherwise be a call each)."""


def thought_so_far(text: str) -> str:
    """The thought in ``text``, a reply as generated so far: what comes before ``</think>`` (all of it while the
    block is open), a leading ``<think>`` dropped, stripped as :func:`holodesk.policy.contract.reasoning_text`
    strips it, and a trailing U+FFFD held back (the first bytes of a character whose next token has not come)."""
    head = text.partition("</think>")[0]
    return head.strip().removeprefix("<think>").strip().rstrip("\ufffd").rstrip()


class ThoughtStream:
    """One step's thought handed out while it is generated: to ``sink``, in pieces at most every
    ``interval_s`` seconds, each piece what the thought grew by since the last one; the one home of the
    throttle, shared by every policy that streams.

    A policy offers the reply so far (:meth:`offer`) as often as it likes, as text or as a function that makes
    it (called only when a piece is due, so detokenizing costs nothing between pieces), and ends with the
    recorded thought (:meth:`finish`), which hands out what is left. An exception raised by ``sink`` is logged
    once and the sink is not called again in this step: the step never breaks for it.

    Args:
        sink: where the pieces go; None: nothing is streamed (every call is a no-op).
        interval_s: least seconds between two pieces; None: :data:`THOUGHT_INTERVAL_S`.
        clock: monotonic seconds (tests pass a fake clock).
    Attributes:
        sent: the thought handed out so far (the pieces joined).
    """

    def __init__(self, sink: ThoughtSink | None, *, interval_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self.interval_s = THOUGHT_INTERVAL_S if interval_s is None else interval_s
        self._clock = clock
        self._last = -float("inf")
        self.sent = ""

    @property
    def active(self) -> bool:
        """Whether pieces are still handed out (a sink is set and has not failed)."""
        return self._sink is not None

    def offer(self, reply: str | Callable[[], str]) -> None:
        """The reply generated so far (its text, or a function returning it): a piece is handed out when
        ``interval_s`` has passed since the last one and the thought grew (a thought that no longer starts
        with what was sent waits for :meth:`finish`)."""
        if self._sink is None:
            return
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        self._send(thought_so_far(reply() if callable(reply) else reply))

    def finish(self, thought: str | None) -> None:
        """Hand out the rest of ``thought``, the step's recorded thought (None or "": nothing more). A recorded
        thought that does not continue what was sent is logged (the pieces then differ from it)."""
        if self._sink is None or not thought:
            return
        if not thought.startswith(self.sent):
            log.warning("the recorded thought differs from the %d characters streamed", len(self.sent))
            return
        self._send(thought)

    def _send(self, thought: str) -> None:
        if len(thought) <= len(self.sent) or not thought.startswith(self.sent):
            return
        piece = thought[len(self.sent):]
        self.sent = thought
        sink = self._sink
        if sink is None:
            return
        try:
            sink(piece)
        except Exception:  # the step goes on without the stream
            log.exception("the thought sink failed; the rest of this step's thought is not streamed")
            self._sink = None


@runtime_checkable
class StreamsThought(Protocol):
    """A policy that hands out its thought while a step is generated: the session sets :attr:`thought_sink`
    before :meth:`Policy.propose` and clears it after. The policy runs the sink on the thread that called
    ``propose`` (through a :class:`ThoughtStream`); the scripted, local and remote policies stream."""

    thought_sink: ThoughtSink | None
