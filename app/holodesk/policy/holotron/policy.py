"""HolotronPolicy: the in-process Holotron-12B policy (Frame + task + history -> Proposal)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.core.actions import Point
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import Observation, Proposal, pointer_after
from holodesk.policy.contract import reasoning_text
from holodesk.policy.holotron.checkpoint import ProgressFn
from holodesk.policy.holotron.loader import LoadedHolotron, load_holotron
from holodesk.policy.holotron.prompt import render_prompt, segment_encoder, special_token_strings, tokenize_prompt
from holodesk.policy.models import GREEDY, Sampling
from holodesk.policy.protocol import DEFAULT_PROTOCOL

if TYPE_CHECKING:
    from holodesk.policy.holotron.engine import StaticEngine
    from holodesk.policy.holotron.runtime import Constraint, Generation, Sampler

log = logging.getLogger(__name__)

LOCALIZATION_MAX_TOKENS = 32
"""Token budget of an element-localization reply (``{"x":1000,"y":1000}`` is a dozen tokens)."""


def _is_oom(exc: BaseException) -> bool:
    """True for a CUDA out-of-memory error (torch.OutOfMemoryError, or older RuntimeError text)."""
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _free_cuda_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class HolotronPolicy:
    """Holotron-12B run in this process with transformers' native classes (no remote code).

    One :meth:`propose` call: the protocol builds the chat (system prompt, task, notes, history as text,
    the last ``max_images`` screenshots as images), each screenshot's tiling is planned once
    (:meth:`CheckpointInfo.tiling`: its token count in the prompt and its tiles), the vision tower +
    projector encode the tiles, the LM prefills and decodes (greedy, or sampled after the grammar mask with
    ``sampling``'s temperature, top_p and the step's seed), constrained to the protocol's JSON
    schema unless ``constrained=False``, and the reply is parsed by the protocol
    (docs/holotron-runtime.md, "One step").

    Decoders: ``"static"`` (default) runs each step through
    :class:`~holodesk.policy.holotron.engine.StaticEngine`: preallocated decoder state, decode replayed
    as CUDA graphs captured when the policy is built, and the parts of the prompt shared with earlier
    steps taken from the state instead of recomputed (the system prompt and tool schema once per loaded
    model, the task once per task, and when the oldest screenshot leaves the window everything before its
    turn: :func:`~holodesk.policy.holotron.engine.snapshot_positions`). ``"stock"``
    (:func:`~holodesk.policy.holotron.runtime.generate`) uses transformers' forward and cache, untouched, for every
    step (slower; the reference, for comparison and troubleshooting). A prompt too long for the static cache runs on
    the stock decoder and the user is told.

    Attributes:
        name: ``"holotron-local"``.
        loaded: the model, tokenizer and checkpoint facts.
        protocol: the action protocol (``holodesk.policy.protocol.ActionProtocol``).
        engine: the static decoder, or None with ``decoder="stock"``.
    """

    name = "holotron-local"

    def __init__(
        self,
        loaded: LoadedHolotron,
        *,
        reasoning: bool = False,
        max_images: int = 3,
        constrained: bool = True,
        protocol: str = DEFAULT_PROTOCOL,
        max_new_tokens: int = 1024,
        max_think_tokens: int = 1024,
        max_string_chars: int | None = None,
        decoder: str = "static",
        jump_forward: bool = True,
        sampling: Sampling = GREEDY,
    ) -> None:
        from holodesk.policy.registry import get_protocol

        if max_images < 1:
            raise PolicyError(f"max_images must be >= 1, got {max_images}")
        if decoder not in ("static", "stock"):
            raise PolicyError(f"decoder must be 'static' or 'stock', got {decoder!r}")
        self.loaded = loaded
        self.protocol = get_protocol(protocol)
        self.reasoning = reasoning
        self.max_images = max_images
        self.constrained = constrained
        self.max_new_tokens = max_new_tokens
        self.max_think_tokens = max_think_tokens
        self.max_string_chars = max_string_chars
        self._constraint: Constraint | None = None
        self._localization_constraint: Constraint | None = None
        self._specials: list[str] | None = None
        self._special_ids: frozenset[int] | None = None
        self._encode_segment = segment_encoder(loaded.tokenizer)  # the pieces of text a step's prompt repeats
        self._closed = False
        self.decoder = decoder
        self.jump_forward = jump_forward
        self.sampling = sampling
        """How tokens are chosen (temperature, top_p, greedy and the seed of step n, ``sampling.step_seed(n)``):
        :meth:`sampler` builds each step's :class:`~holodesk.policy.holotron.runtime.Sampler`; recorded with every
        proposal."""
        self.engine: StaticEngine | None = None
        if decoder == "static":
            from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens

            max_len = static_cache_tokens(loaded, max_images=max_images, max_new_tokens=max_new_tokens,
                                          max_think_tokens=max_think_tokens, reasoning=reasoning)
            self.engine = StaticEngine(loaded, max_len=max_len, max_images=max_images)
            log.info("Holotron static decoder: %s", self.engine.describe())

    @classmethod
    def load(
        cls,
        source: str | Path,
        *,
        dtype: str = "bfloat16",
        quantization: str | None = None,
        device: str | None = None,
        reasoning: bool = False,
        max_images: int = 3,
        constrained: bool = True,
        protocol: str = DEFAULT_PROTOCOL,
        progress: ProgressFn | None = None,
        max_new_tokens: int = 1024,
        max_think_tokens: int = 1024,
        max_string_chars: int | None = None,
        attn_implementation: str | None = "sdpa",
        decoder: str = "static",
        jump_forward: bool = True,
        cancel: threading.Event | None = None,
        sampling: Sampling = GREEDY,
    ) -> HolotronPolicy:
        """Load a checkpoint folder or hub repo id and return a ready policy.

        Args:
            source: folder with config.json + safetensors + tokenizer, or ``owner/name`` on the hub.
            dtype: ``"bfloat16"`` (default) or ``"float32"``.
            quantization: None, ``"8bit"`` or ``"4bit"`` (bitsandbytes, CUDA only).
            device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``; default CUDA when available.
            reasoning: let the model think (``/think``) before replying.
            max_images: screenshots sent as images (current one included); older steps are text.
            constrained: force replies to the protocol's JSON schema with xgrammar.
            protocol: action protocol name (default H Company's agent-loop contract, ``agent-loop-v1``).
            progress: ``progress(stage, fraction)`` during download and load.
            max_new_tokens: reply budget after any thinking; max_think_tokens: thinking budget.
            max_string_chars: when set, every JSON string in a constrained reply is capped at this
                many characters, so a wandering model still closes its object within the budget.
            attn_implementation: transformers attention backend.
            decoder: ``"static"`` (graphs and kernels are prepared here, at load) or ``"stock"``.
            jump_forward: feed the tokens the grammar forces in one model pass with the token before them
                (docs/holotron-runtime.md, "Jump-forward"); False: one model step per token, the same
                reply (to rule the multi-token pass out when reporting a bug).
            cancel: when set, a hub download in progress stops within a second (resumable).
            sampling: how tokens are chosen (:class:`~holodesk.policy.models.Sampling`; greedy by default).
        Raises:
            ModelLoadError: see :func:`~holodesk.policy.holotron.loader.load_holotron`.
        """
        loaded = load_holotron(source, dtype=dtype, quantization=quantization, device=device, progress=progress,
                               attn_implementation=attn_implementation, cancel=cancel)
        policy = cls(loaded, reasoning=reasoning, max_images=max_images, constrained=constrained, protocol=protocol,
                     max_new_tokens=max_new_tokens, max_think_tokens=max_think_tokens,
                     max_string_chars=max_string_chars, decoder=decoder, jump_forward=jump_forward,
                     sampling=sampling)
        if constrained:
            policy._get_constraint()  # compile the grammar at load time, not in the first step
        return policy

    # ------------------------------------------------------------------------------------------ steps
    def _get_constraint(self) -> Constraint:
        if self._constraint is None:
            from holodesk.policy.holotron.runtime import Constraint, cap_strings

            schema = self.protocol.json_schema()
            if self.max_string_chars is not None:
                schema = cap_strings(schema, self.max_string_chars)
            self._constraint = Constraint(self.loaded, schema)
        return self._constraint

    def localize(self, image: Any, target: str) -> Point:
        """H Company's element localization (hub.hcompany.ai/element-localization): ``image`` and the protocol's
        localization prompt for ``target`` in one user turn, thinking off, greedy (the stock decoder), the reply
        constrained to ``{"x": int, "y": int}`` in ``[0, 1000]`` when the policy decodes under a grammar; the
        approval card's "Click more precisely" asks it (:class:`~holodesk.policy.base.Localizer`).

        Args:
            image: an ``(H, W, 3)`` uint8 RGB array (a crop of the frame).
            target: the element in words.
        Returns:
            The point in ``[0, 1000]`` of ``image``.
        Raises:
            PolicyOutputError: the reply is not a point (``raw_text`` carries it).
            PolicyError: the policy is closed, or generation failed.
        """
        if self._closed:
            raise PolicyError("the Holotron policy was closed")
        from holodesk.policy.holotron import runtime

        crop = Frame(image, Monitor(1, 0, 0, int(image.shape[1]), int(image.shape[0])))
        messages = [{"role": "user", "content": [{"type": "image", "frame": crop},
                                                 {"type": "text", "text": self.protocol.localization_prompt(target)}]}]
        if self._specials is None:
            self._specials = special_token_strings(self.loaded.tokenizer)
        try:
            prompt_text, _frames, _template = render_prompt(self.loaded.tokenizer, messages, self._specials)
            tiling = self.loaded.info.tiling(crop.width, crop.height)
            ids = tokenize_prompt(self.loaded.tokenizer, prompt_text, [tiling.tokens],
                                  img_start_id=self.loaded.img_start_id, img_end_id=self.loaded.img_end_id,
                                  image_token_id=self.loaded.image_token_id)
            if self.constrained and self._localization_constraint is None:
                self._localization_constraint = runtime.Constraint(self.loaded, self.protocol.localization_schema())
            generation = runtime.generate(self.loaded, ids, [(image, tiling)],
                                          max_new_tokens=LOCALIZATION_MAX_TOKENS,
                                          constraint=self._localization_constraint, reasoning=False,
                                          max_think_tokens=0)
        except (PolicyError, PolicyOutputError):
            raise
        except Exception as exc:
            raise PolicyError(f"Holotron localization failed: {type(exc).__name__}: {exc}") from exc
        return self.protocol.parse_localization(generation.text)

    def prepare(self, observation: Observation, *, max_images: int) -> dict[str, Any]:
        """Build the prompt for ``observation`` with at most ``max_images`` images.

        Returns:
            dict with ``input_ids`` (list[int]), ``frames`` (list[Frame]), ``tilings`` (one
            :class:`~holodesk.policy.holotron.tiling.Tiling` per frame, the only place it is computed),
            ``template`` (``"chat_template"``, ``"chat_template (string content)"`` or ``"fallback"``; see
            :func:`~holodesk.policy.holotron.prompt.render_prompt`) and ``prompt_text`` (sentinels in place
            of images).
        """
        messages = self.protocol.build_messages(observation, max_images=max_images, reasoning=self.reasoning)
        if self._specials is None:
            self._specials = special_token_strings(self.loaded.tokenizer)
        prompt_text, frames, template = render_prompt(self.loaded.tokenizer, messages, self._specials)
        tilings = [self.loaded.info.tiling(f.width, f.height) for f in frames]
        input_ids = tokenize_prompt(
            self.loaded.tokenizer,
            prompt_text,
            [t.tokens for t in tilings],
            img_start_id=self.loaded.img_start_id,
            img_end_id=self.loaded.img_end_id,
            image_token_id=self.loaded.image_token_id,
            encode=self._encode_segment,
        )
        return {"input_ids": input_ids, "frames": frames, "tilings": tilings, "template": template,
                "prompt_text": prompt_text}

    def sampler(self, step: int) -> Sampler | None:
        """The token choice of episode step ``step`` (0-based, ``len(observation.history)``): None when
        :attr:`sampling` is greedy, else a :class:`~holodesk.policy.holotron.runtime.Sampler` on the model's
        device with :attr:`sampling`'s temperature and top_p, seeded with ``sampling.step_seed(step)`` (the
        ``step_seed`` each proposal records, so a run replays exactly)."""
        if self.sampling.greedy:
            return None
        from holodesk.policy.holotron.runtime import Sampler

        return Sampler(temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                       seed=self.sampling.step_seed(step), device=self.loaded.device)

    def _attempt(self, observation: Observation, max_images: int,
                 notices: list[str]) -> tuple[Generation, dict[str, Any]]:
        """One try at a step with at most ``max_images`` screenshots: the static engine when the prompt
        fits its cache, else the stock decoder (told through ``notices``); sampled with this step's seed
        (:meth:`sampler`) unless greedy."""
        from holodesk.policy.holotron import runtime

        t0 = time.perf_counter()
        prepared = self.prepare(observation, max_images=max_images)
        ids, frames, tilings = prepared["input_ids"], prepared["frames"], prepared["tilings"]
        images = [(f.pixels, t) for f, t in zip(frames, tilings, strict=True)]
        details: dict[str, Any] = {
            "images": len(frames), "template": prepared["template"], "grids": [(t.cols, t.rows) for t in tilings],
            "tiles": [t.tiles for t in tilings], "image_tokens": sum(t.tokens for t in tilings),
        }
        constraint = self._get_constraint() if self.constrained else None
        sampler = self.sampler(len(observation.history))
        engine = self.engine
        if engine is not None and not engine.fits(len(ids), self.max_new_tokens + (
                self.max_think_tokens if self.reasoning else 0)):
            message = (f"the prompt ({len(ids)} tokens) is longer than the static decoder's cache "
                       f"({engine.max_len}); this step used the slower stock decoder")
            log.warning("Holotron: %s", message)
            notices.append(message)
            engine = None
        prompt_ms = (time.perf_counter() - t0) * 1000.0
        if engine is not None:
            from holodesk.policy.holotron.engine import snapshot_positions

            if self._special_ids is None:
                self._special_ids = frozenset(self.loaded.tokenizer.convert_tokens_to_ids(self._specials or []))
            snapshot_at = snapshot_positions(ids, specials=self._special_ids, image_token_id=self.loaded.image_token_id,
                                             img_end_id=self.loaded.img_end_id)
            generation, engine_details = engine.run(
                ids, images, snapshot_at=snapshot_at, max_new_tokens=self.max_new_tokens, constraint=constraint,
                reasoning=self.reasoning, max_think_tokens=self.max_think_tokens, jump_forward=self.jump_forward,
                sampler=sampler)
            details.update(engine_details, decoder="static")
        else:
            generation = runtime.generate(self.loaded, ids, images, max_new_tokens=self.max_new_tokens,
                                          constraint=constraint, reasoning=self.reasoning,
                                          max_think_tokens=self.max_think_tokens, jump_forward=self.jump_forward,
                                          sampler=sampler)
            details["decoder"] = "stock"
        generation.timings_ms["preprocess"] = generation.timings_ms.get("preprocess", 0.0) + prompt_ms
        return generation, details

    def propose(self, observation: Observation) -> Proposal:
        """Propose the next action for ``observation``.

        On a CUDA out-of-memory error the step is retried with one screenshot fewer each time (down to
        the current one only); each retry is logged and told to the user through ``Proposal.notices``
        (also in ``Proposal.extra["warnings"]``) (F21).

        Returns:
            Proposal with the parsed action, thought, note, raw reply, ``timings_ms`` (preprocess,
            vision, prefill, decode; ms) and ``extra`` (token counts, tiles, kernel path, warnings).
        Raises:
            PolicyOutputError: the reply is not a valid action (``raw_text`` carries the reply).
            PolicyError: the policy is closed, or generation failed (also out of memory with one image).
        """
        if self._closed:
            raise PolicyError("the Holotron policy was closed")
        warnings: list[str] = []
        images = self.max_images
        while True:
            try:
                generation, details = self._attempt(observation, images, warnings)
                break
            except (PolicyError, PolicyOutputError):
                raise
            except Exception as exc:
                if not _is_oom(exc):
                    raise PolicyError(f"Holotron generation failed: {type(exc).__name__}: {exc}") from exc
                _free_cuda_memory()
                if images <= 1:
                    raise PolicyError(
                        "the GPU ran out of memory even with only the current screenshot",
                        hint="Close other GPU programs, use 4-bit weights, or use a remote policy.",
                    ) from exc
                message = (
                    f"GPU memory ran out with {images} screenshot(s); retried with {images - 1} "
                    "(older screenshots sent as text only)"
                )
                log.warning("Holotron: %s", message)
                warnings.append(message)
                images -= 1
        raw, timings = generation.text, generation.timings_ms
        extra: dict[str, Any] = {
            **details,
            "prompt_tokens": generation.prompt_tokens,
            "generated_tokens": len(generation.token_ids),
            "model_steps": generation.model_steps,
            "forced_tokens": generation.forced_tokens,
            "stop_reason": generation.stop_reason,
            "constrained": self.constrained,
            "reasoning": self.reasoning,
            "sampling": self.sampling.record(),
            "step_seed": self.sampling.step_seed(len(observation.history)),
            "kernels": self.loaded.kernels.get("summary", ""),
            "max_images_used": images,
        }
        thought_text = reasoning_text(raw) if self.reasoning else None
        if thought_text:
            extra["reasoning_text"] = thought_text  # recorded with the step; never written into a later prompt
        if warnings:
            extra["warnings"] = warnings
        try:
            parsed = self.protocol.parse(raw, pointer=pointer_after(observation.history))
        except PolicyOutputError as exc:
            if generation.stop_reason == "max_new_tokens":
                exc.hint = (exc.hint + " " if exc.hint else "") + (
                    f"The reply was cut at {self.max_new_tokens} tokens."
                )
            exc.timings_ms, exc.extra = timings, extra  # the rejected step is recorded with them
            raise
        if parsed.warnings:
            extra["parse_warnings"] = list(parsed.warnings)
        return Proposal(
            action=parsed.action,
            thought=parsed.thought,
            note=parsed.note,
            raw_text=raw,
            timings_ms=timings,
            extra=extra,
            notices=tuple(warnings),
        )

    def kernel_report(self) -> dict[str, Any]:
        """The kernel report taken at load time (see :func:`holodesk.policy.holotron.kernel_report`), with
        the decoder in use under ``"decoder"`` (:meth:`StaticEngine.describe`, or ``{"decoder": "stock"}``)."""
        report = dict(self.loaded.kernels)
        report["decoder"] = self.engine.describe() if self.engine is not None else {"decoder": "stock"}
        return report

    def close(self) -> None:
        """Drop the model and free GPU memory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._constraint = None
        self._localization_constraint = None
        self.engine = None
        with contextlib.suppress(AttributeError):
            del self.loaded.model
        with contextlib.suppress(ImportError):
            _free_cuda_memory()


__all__ = ["HolotronPolicy"]
