"""The core both local runtimes share: :class:`LocalPolicy`.

A local policy runs a checkpoint in this process, with Holodesk's Holotron runtime
(:class:`~holodesk.policy.holotron.HolotronPolicy`) or transformers' classes
(:class:`~holodesk.policy.native.NativePolicy`). What does not depend on the runtime is written here once:
the generation options and the protocol, the reply grammar compiled once, the out-of-memory retry with one
screenshot fewer (F21), the reply's handling (record, parse, errors), element localization's errors, and
closing. A runtime gives one reply (:meth:`LocalPolicy.reply`), one localization reply
(:meth:`LocalPolicy.localization_reply`) and compiles a grammar (:meth:`LocalPolicy.compile_constraint`).

Importing this module needs neither torch nor transformers (torch is imported when memory is freed).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from holodesk.core.actions import Point
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import Observation, Proposal, ThoughtSink, ThoughtStream, pointer_after
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.registry import get_protocol
from holodesk.policy.reply import split_reasoning

if TYPE_CHECKING:
    from holodesk.policy.holotron.checkpoint import ProgressFn

log = logging.getLogger(__name__)

LOCALIZATION_MAX_TOKENS = 32
"""Token budget of an element-localization reply (``{"x":1000,"y":1000}`` is a dozen tokens)."""


def is_oom(exc: BaseException) -> bool:
    """True for a CUDA out-of-memory error (``torch.OutOfMemoryError``, or an older ``RuntimeError`` whose text
    says "out of memory"). Imports torch."""
    import torch  # lazy: torch (optional, heavy); this module loads without it

    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


_FROZEN_BY = [0]
"""How many loaded local policies froze the collector's objects (:func:`freeze_loaded`)."""
_FREEZE_LOCK = threading.Lock()


def freeze_loaded(change: int) -> int:
    """Keep loaded policies' objects out of the garbage collector's scans while one is loaded.

    A process with a local model tracks about 400,000-600,000 objects (torch, transformers, the model's modules,
    compiled code); a full collection walks all of them (327-339 ms for 598,524 objects on an H100 machine's host
    after a Holotron-12B proposal, docs/benchmarks.md run 27; 129-139 ms for 388,880 with the tiny checkpoint on
    this project's 2-core CI host) and fires inside whichever step crosses the collector's threshold.

    ``change`` +1 (a load finished): ``gc.collect()``, then ``gc.freeze()`` moves every tracked object into the
    permanent generation, which collections skip (objects made later are collected as usual). ``change`` -1 (a
    policy closed, its model dropped): ``gc.unfreeze()`` and ``gc.collect()``, so that the closed model's reference
    cycles are collected, then ``gc.freeze()`` again while another loaded policy is left. Frozen objects are still
    freed by reference counting; only cyclic garbage among them waits.

    Returns:
        the loaded policies counted after the change.
    """
    with _FREEZE_LOCK:
        _FROZEN_BY[0] = max(0, _FROZEN_BY[0] + change)
        if change < 0:
            gc.unfreeze()
        gc.collect()
        if _FROZEN_BY[0]:
            gc.freeze()
        return _FROZEN_BY[0]


def free_cuda_memory(*, collect: bool = True) -> None:
    """Collect garbage (unless ``collect`` is False: the caller just did) and return PyTorch's cached CUDA blocks
    to the driver (no-op without CUDA). Imports torch."""
    import torch  # lazy: torch (optional, heavy); this module loads without it

    if collect:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class CheckpointLoading(TypedDict, total=False):
    """How a checkpoint is loaded, the same for both runtimes (the keyword arguments ``load`` of
    :class:`~holodesk.policy.holotron.HolotronPolicy` and :class:`~holodesk.policy.native.NativePolicy`, and
    :func:`~holodesk.policy.local.load_local_policy`, pass to their loader; each is optional, the loader's default
    applies).

    Keys:
        dtype: ``"bfloat16"`` (the loaders' default), ``"float16"`` (native only) or ``"float32"`` (tests).
        device: torch device string (``"cuda"``, ``"cuda:1"``, ``"cpu"``); None: CUDA when available.
        progress: ``progress(stage, fraction)`` during the download and the load.
        attn_implementation: transformers' attention backend (default ``"sdpa"``).
        cancel: when set, a hub download in progress stops within a second (resumable).
    """

    dtype: str
    device: str | None
    progress: ProgressFn | None
    attn_implementation: str | None
    cancel: threading.Event | None


@dataclass
class Reply:
    """One reply of a local runtime, unparsed.

    Attributes:
        text: the reply as decoded (thought included when the model reasoned).
        timings_ms: stage name -> milliseconds (preprocess, prefill, decode, ...).
        extra: what the step records about it; must hold ``stop_reason`` (``"eos"``, ``"grammar"``,
            ``"max_new_tokens"``, ...).
    """

    text: str
    timings_ms: dict[str, float]
    extra: dict[str, Any]


class LocalPolicy:
    """The part of a local policy that does not depend on its runtime (module docstring).

    Subclasses set :attr:`name` and :attr:`kind`, keep their loaded checkpoint in ``loaded`` and implement
    :meth:`reply`, :meth:`localization_reply` and :meth:`compile_constraint`.

    Attributes:
        options: the generation options (:class:`~holodesk.policy.generation.GenerationOptions`), unchanged.
        protocol: the action protocol named by ``options.protocol``.
        kind: the policy in words, as its errors name it (``"Holotron"``, ``"native"``).
        oom_hint: what the error says to do when memory runs out with one screenshot.
    """

    name: str
    kind: str
    oom_hint = "Close other GPU programs, or use a remote policy."
    loaded: Any

    def __init__(self, options: GenerationOptions) -> None:
        """Raises SettingsError for an unknown protocol name."""
        self.options = options
        self.protocol = get_protocol(options.protocol)
        self._constraint: Any = None
        self._localization_constraint: Any = None
        self._closed = False
        self._frozen = False
        self.thought_sink: ThoughtSink | None = None
        self.thought = ThoughtStream(None)

    @property
    def max_images(self) -> int:
        """Screenshots sent as images, the current one included (``options.max_images``)."""
        return self.options.max_images

    @property
    def runtime_device(self) -> dict[str, str | None]:
        """Where the loaded model runs: ``{"device": the torch device ("cuda:0", "cpu") or None, "device_name":
        the GPU's name (``torch.cuda.get_device_name``) or None}``, from ``loaded.device``."""
        device = getattr(getattr(self, "loaded", None), "device", None)
        if device is None:
            return {"device": None, "device_name": None}
        name = None
        if getattr(device, "type", None) == "cuda":
            import torch  # lazy: a model on a CUDA device means torch is loaded already

            name = str(torch.cuda.get_device_name(device))
        return {"device": str(device), "device_name": name}

    @property
    def runtime_label(self) -> str:
        """Who generated, as messages and logs name it (default :attr:`kind`)."""
        return self.kind

    # ------------------------------------------------------------------------------------ runtime hooks
    def reply(self, observation: Observation, max_images: int, notices: list[str]) -> Reply:
        """One reply to ``observation`` with at most ``max_images`` screenshots; a fallback the runtime takes is
        appended to ``notices`` in words. Raises torch's errors as they come (:meth:`propose` handles them)."""
        raise NotImplementedError

    def localization_reply(self, image: Any, target: str, constraint: Any) -> str:
        """The reply text to the protocol's localization prompt for ``target`` on ``image`` (``(H, W, 3)`` uint8
        RGB), thinking off, greedy, at most :data:`LOCALIZATION_MAX_TOKENS` tokens, under ``constraint`` (None:
        free)."""
        raise NotImplementedError

    def compile_constraint(self, schema: dict[str, Any], max_string_chars: int | None) -> Any:
        """The runtime's grammar for the JSON ``schema``, every string capped at ``max_string_chars`` (None: not
        capped)."""
        raise NotImplementedError

    def thought_watch(self) -> Callable[[Sequence[int]], None] | None:
        """For a runtime's decoder: a function of the reply's token ids so far that hands this step's thought out
        (:attr:`thought`, throttled; the ids are detokenized only when a piece is due), or None when nothing is
        streamed (no :attr:`thought_sink`, or reasoning off)."""
        stream = self.thought
        if not stream.active:
            return None
        tokenizer = self.loaded.tokenizer

        def watch(ids: Sequence[int]) -> None:
            stream.offer(lambda: str(tokenizer.decode(list(ids), skip_special_tokens=False)))

        return watch

    # ------------------------------------------------------------------------------------ shared steps
    def reply_constraint(self) -> Any:
        """The grammar of the protocol's reply schema (``options.max_string_chars`` applied), compiled once."""
        if self._constraint is None:
            self._constraint = self.compile_constraint(self.protocol.json_schema(), self.options.max_string_chars)
        return self._constraint

    def localization_constraint(self) -> Any:
        """The grammar of ``{"x": int, "y": int}`` (the protocol's localization schema), compiled once."""
        if self._localization_constraint is None:
            self._localization_constraint = self.compile_constraint(self.protocol.localization_schema(), None)
        return self._localization_constraint

    def ready(self) -> None:
        """End of a load: compile the reply grammar now, not in the first step (when decoding is constrained),
        then collect garbage and freeze what lives (:func:`freeze_loaded`), so that no later collection walks the
        loaded model, its runtime and the libraries again; :meth:`close` unfreezes. Called once per policy."""
        if self.options.constrained_decoding:
            self.reply_constraint()
        if not self._frozen:
            self._frozen = True
            freeze_loaded(+1)

    def _check_open(self) -> None:
        if self._closed:
            raise PolicyError(f"the {self.kind} policy was closed")

    def localize(self, image: Any, target: str) -> Point:
        """H Company's element localization (hub.hcompany.ai/element-localization): ``image`` and the protocol's
        localization prompt for ``target`` in one user turn, thinking off, greedy, the reply constrained to
        ``{"x": int, "y": int}`` in ``[0, 1000]`` when the policy decodes under a grammar; the approval card's
        "Click more precisely" asks it (:class:`~holodesk.policy.base.Localizer`).

        Args:
            image: an ``(H, W, 3)`` uint8 RGB array (a crop of the frame).
            target: the element in words.
        Returns:
            The point in ``[0, 1000]`` of ``image``.
        Raises:
            PolicyOutputError: the reply is not a point (``raw_text`` carries it).
            PolicyError: the policy is closed, or generation failed.
        """
        self._check_open()
        try:
            constraint = self.localization_constraint() if self.options.constrained_decoding else None
            text = self.localization_reply(image, target, constraint)
        except (PolicyError, PolicyOutputError):
            raise
        except Exception as exc:
            raise PolicyError(f"{self.runtime_label} localization failed: {type(exc).__name__}: {exc}") from exc
        return self.protocol.parse_localization(text)

    def propose(self, observation: Observation) -> Proposal:
        """Propose the next action for ``observation``.

        On a CUDA out-of-memory error the step is retried with one screenshot fewer each time (down to the
        current one only); each retry is logged and told to the user through ``Proposal.notices`` (also in
        ``Proposal.extra["warnings"]``) (F21).

        With reasoning on, the thought goes to :attr:`thought_sink` (when set) in pieces while it is generated
        (:meth:`thought_watch`), the last piece when the reply is read: the pieces joined are
        ``extra["reasoning_text"]``.

        Returns:
            Proposal with the parsed action, thought, note, raw reply, the runtime's ``timings_ms`` and ``extra``
            (its facts, plus ``max_images_used``, ``warnings``, :meth:`GenerationOptions.step_record`,
            ``reasoning_text`` when the model reasoned, ``parse_warnings``).
        Raises:
            PolicyOutputError: the reply is not a valid action (``raw_text`` carries it; its ``timings_ms`` and
                ``extra`` are the step's, and its hint says when the reply was cut at the token cap).
            PolicyError: the policy is closed, or generation failed (also out of memory with one screenshot).
        """
        self._check_open()
        notices: list[str] = []
        images = self.options.max_images
        # the thought is handed to ``thought_sink`` while it is generated (StreamsThought), when the model reasons
        self.thought = ThoughtStream(self.thought_sink if self.options.reasoning else None)
        while True:
            try:
                reply = self.reply(observation, images, notices)
                break
            except (PolicyError, PolicyOutputError):
                raise
            except Exception as exc:
                if not is_oom(exc):
                    raise PolicyError(f"{self.runtime_label} generation failed: {type(exc).__name__}: {exc}") from exc
                free_cuda_memory()
                if images <= 1:
                    raise PolicyError("the GPU ran out of memory even with only the current screenshot",
                                      hint=self.oom_hint) from exc
                message = (f"GPU memory ran out with {images} screenshot(s); retried with {images - 1} "
                           "(older screenshots sent as text only)")
                log.warning("%s: %s", self.runtime_label, message)
                notices.append(message)
                images -= 1
        return self._proposal(observation, reply, images, notices)

    def _proposal(self, observation: Observation, reply: Reply, images: int, notices: list[str]) -> Proposal:
        """``reply`` recorded and parsed into a :class:`Proposal` (:meth:`propose`)."""
        raw, timings, extra = reply.text, reply.timings_ms, reply.extra
        extra["max_images_used"] = images
        if notices:
            extra["warnings"] = notices
        extra.update(self.options.step_record(len(observation.history)))
        # with reasoning on the prompt ended inside the <think> block: the reply holds its closing tag
        thought_text, reply_text = split_reasoning(raw, opened=self.options.reasoning)
        if thought_text:
            extra["reasoning_text"] = thought_text  # recorded with the step; never written into a later prompt
        self.thought.finish(thought_text)
        try:
            parsed = self.protocol.parse(reply_text, pointer=pointer_after(observation.history))
        except PolicyOutputError as exc:
            exc.raw_text = raw
            if extra.get("stop_reason") == "max_new_tokens":
                exc.hint = ((exc.hint + " " if exc.hint else "")
                            + f"The reply was cut at {self.options.max_reply_tokens} tokens.")
            exc.timings_ms, exc.extra = timings, extra  # the rejected step is recorded with them
            raise
        if parsed.warnings:
            extra["parse_warnings"] = list(parsed.warnings)
        return Proposal(action=parsed.action, thought=parsed.thought, note=parsed.note, raw_text=raw,
                        timings_ms=timings, extra=extra, notices=tuple(notices))

    def close(self) -> None:
        """Drop the model and free GPU memory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._constraint = None
        self._localization_constraint = None
        with contextlib.suppress(AttributeError):
            del self.loaded.model
        collected = self._frozen
        if self._frozen:  # so that what the model held can be collected (freeze_loaded collects)
            self._frozen = False
            freeze_loaded(-1)
        with contextlib.suppress(ImportError):
            free_cuda_memory(collect=not collected)


__all__ = ["LOCALIZATION_MAX_TOKENS", "CheckpointLoading", "LocalPolicy", "Reply", "free_cuda_memory", "freeze_loaded",
           "is_oom"]
