"""HolotronPolicy: the in-process Holotron-12B policy (Frame + task + history -> Proposal)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from holodesk.core.geometry import Frame
from holodesk.errors import PolicyError
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.holotron.loader import LoadedHolotron, load_holotron
from holodesk.policy.holotron.prompt import render_prompt, segment_encoder, special_token_strings, tokenize_prompt
from holodesk.policy.local_core import LOCALIZATION_MAX_TOKENS, CheckpointLoading, LocalPolicy, Reply

if TYPE_CHECKING:
    from holodesk.policy.holotron.engine import StaticEngine
    from holodesk.policy.holotron.runtime import Constraint, Sampler

log = logging.getLogger(__name__)


class HolotronPolicy(LocalPolicy):
    """Holotron-12B run in this process with transformers' native classes (no remote code).

    One :meth:`propose` call: the protocol builds the chat (system prompt, task, notes, history as text,
    the last ``max_images`` screenshots as images), each screenshot's tiling is planned once
    (:meth:`CheckpointInfo.tiling`: its token count in the prompt and its tiles), the vision tower +
    projector encode the tiles, the LM prefills and decodes (greedy, or sampled after the grammar mask with
    ``options.sampling``'s temperature, top_p and the step's seed), constrained to the protocol's JSON
    schema unless ``options.constrained_decoding`` is off, and the reply is parsed by the protocol
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
    kind = "Holotron"
    oom_hint = "Close other GPU programs, use 4-bit weights, or use a remote policy."

    def __init__(self, loaded: LoadedHolotron, options: GenerationOptions | None = None, *,
                 decoder: str = "static") -> None:
        """Wrap a loaded checkpoint; ``options``: how replies are generated (default: greedy, reasoning off,
        :class:`~holodesk.policy.generation.GenerationOptions`'s defaults).

        Raises:
            PolicyError: ``decoder`` is neither ``"static"`` nor ``"stock"``.
            SettingsError: an unknown protocol name.
        """
        if decoder not in ("static", "stock"):
            raise PolicyError(f"decoder must be 'static' or 'stock', got {decoder!r}")
        super().__init__(options if options is not None else GenerationOptions())
        self.loaded = loaded
        self._specials: list[str] | None = None
        self._special_ids: frozenset[int] | None = None
        self._encode_segment = segment_encoder(loaded.tokenizer)  # the pieces of text a step's prompt repeats
        self.decoder = decoder
        self.engine: StaticEngine | None = None
        if decoder == "static":
            # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
            from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens

            opts = self.options
            max_len = static_cache_tokens(loaded, max_images=opts.max_images, max_new_tokens=opts.max_reply_tokens,
                                          max_think_tokens=opts.think_budget, reasoning=opts.reasoning)
            self.engine = StaticEngine(loaded, max_len=max_len, max_images=opts.max_images)
            log.info("Holotron static decoder: %s", self.engine.describe())

    @classmethod
    def load(
        cls,
        source: str | Path,
        options: GenerationOptions | None = None,
        *,
        quantization: str | None = None,
        decoder: str = "static",
        **loading: Unpack[CheckpointLoading],
    ) -> HolotronPolicy:
        """Load a checkpoint folder or hub repo id and return a ready policy (the reply grammar compiled).

        Args:
            source: folder with config.json + safetensors + tokenizer, or ``owner/name`` on the hub.
            options: how replies are generated (:class:`~holodesk.policy.generation.GenerationOptions`; its
                ``jump_forward`` False feeds forced tokens one model step each, the same reply).
            quantization: None, ``"8bit"`` or ``"4bit"`` (bitsandbytes, CUDA only).
            decoder: ``"static"`` (graphs and kernels are prepared here, at load) or ``"stock"``.
            loading: dtype, device, progress, attn_implementation, cancel
                (:class:`~holodesk.policy.local_core.CheckpointLoading`), as
                :func:`~holodesk.policy.holotron.loader.load_holotron` takes them.
        Raises:
            ModelLoadError: see :func:`~holodesk.policy.holotron.loader.load_holotron`.
        """
        # the static engine is built (graphs captured, warmed up) while the weights are still being read
        loaded = load_holotron(source, quantization=quantization, background=True, **loading)
        try:
            policy = cls(loaded, options, decoder=decoder)
        except BaseException:
            if loaded.reading is not None:
                loaded.reading.cancel()
            raise
        try:
            policy.ready()
        except BaseException:
            policy.close()  # the read stopped, the collector unfrozen
            raise
        return policy

    def ready(self) -> None:
        """:meth:`LocalPolicy.ready() <holodesk.policy.local_core.LocalPolicy.ready>` (its work goes on beside a
        read still running), then :meth:`finish_weights`; then, where :data:`.engine.RECORD_AHEAD` says so, the
        static engine starts recording the graphs its steps may use ahead of their first use
        (:meth:`.StaticEngine.start_recording_ahead`).

        Raises:
            ModelLoadError: the weights' read failed.
        """
        super().ready()
        self.finish_weights()
        # lazy: the engine's module loads the runtime (torch), which a stock decoder's policy never needs here
        from holodesk.policy.holotron.engine import RECORD_AHEAD

        if self.engine is not None and RECORD_AHEAD:
            self.engine.start_recording_ahead()

    def finish_weights(self) -> None:
        """Wait for the weights still being read (:meth:`.LoadedHolotron.finish_weights`) and, when they were,
        have the static engine re-derive what it built from them (``StaticEngine.weights_written``); nothing once
        they are complete. Every use of the model's values goes through here first (:meth:`ready`, :meth:`reply`,
        :meth:`localization_reply`).

        Raises:
            ModelLoadError: the weights' read failed.
        """
        if self.loaded.finish_weights() and self.engine is not None:
            self.engine.weights_written()

    # ------------------------------------------------------------------------------------------ steps
    def compile_constraint(self, schema: dict[str, Any], max_string_chars: int | None) -> Constraint:
        """xgrammar's :class:`~holodesk.policy.holotron.runtime.Constraint` for ``schema`` on this tokenizer."""
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron.runtime import Constraint, cap_strings

        return Constraint(self.loaded, schema if max_string_chars is None else cap_strings(schema, max_string_chars))

    def localization_reply(self, image: Any, target: str, constraint: Constraint | None) -> str:
        """``image`` and the localization prompt in one user turn, decoded by the stock decoder
        (:meth:`LocalPolicy.localize <holodesk.policy.local_core.LocalPolicy.localize>`)."""
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron import runtime

        self.finish_weights()
        messages = self.protocol.localization_messages(image, target)
        crop: Frame = messages[0]["content"][0]["frame"]
        if self._specials is None:
            self._specials = special_token_strings(self.loaded.tokenizer)
        prompt_text, _frames, _template = render_prompt(self.loaded.tokenizer, messages, self._specials)
        tiling = self.loaded.info.tiling(crop.width, crop.height)
        ids = tokenize_prompt(self.loaded.tokenizer, prompt_text, [tiling.tokens],
                              img_start_id=self.loaded.img_start_id, img_end_id=self.loaded.img_end_id,
                              image_token_id=self.loaded.image_token_id)
        generation = runtime.generate(self.loaded, ids, [(image, tiling)], max_new_tokens=LOCALIZATION_MAX_TOKENS,
                                      constraint=constraint, reasoning=False, max_think_tokens=0)
        return generation.text

    def prepare(self, observation: Observation, *, max_images: int) -> dict[str, Any]:
        """Build the prompt for ``observation`` with at most ``max_images`` images.

        Returns:
            dict with ``input_ids`` (list[int]), ``frames`` (list[Frame]), ``tilings`` (one
            :class:`~holodesk.policy.holotron.tiling.Tiling` per frame, the only place it is computed),
            ``template`` (``"chat_template"``, ``"chat_template (string content)"`` or ``"fallback"``; see
            :func:`~holodesk.policy.holotron.prompt.render_prompt`) and ``prompt_text`` (sentinels in place
            of images).
        """
        messages = self.protocol.build_messages(observation, max_images=max_images,
                                                reasoning=self.options.reasoning)
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
        sampling = self.options.sampling
        if sampling.greedy:
            return None
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron.runtime import Sampler

        return Sampler(temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.step_seed(step),
                       device=self.loaded.device)

    def reply(self, observation: Observation, max_images: int, notices: list[str]) -> Reply:
        """One try at a step with at most ``max_images`` screenshots: the static engine when the prompt
        fits its cache, else the stock decoder (told through ``notices``); sampled with this step's seed
        (:meth:`sampler`) unless greedy.

        Returns:
            The reply; ``timings_ms``: preprocess, vision, prefill, decode (ms); ``extra``: images, template,
            tiles, token counts, decoder, stop reason, kernel path.
        """
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron import runtime

        self.finish_weights()
        opts = self.options
        t0 = time.perf_counter()
        prepared = self.prepare(observation, max_images=max_images)
        ids, frames, tilings = prepared["input_ids"], prepared["frames"], prepared["tilings"]
        images = [(f.pixels, t) for f, t in zip(frames, tilings, strict=True)]
        details: dict[str, Any] = {
            "images": len(frames), "template": prepared["template"], "grids": [(t.cols, t.rows) for t in tilings],
            "tiles": [t.tiles for t in tilings], "image_tokens": sum(t.tokens for t in tilings),
        }
        constraint = self.reply_constraint() if opts.constrained_decoding else None
        sampler = self.sampler(len(observation.history))
        engine = self.engine
        if engine is not None and not engine.fits(len(ids), opts.token_budget):
            message = (f"the prompt ({len(ids)} tokens) is longer than the static decoder's cache "
                       f"({engine.max_len}); this step used the slower stock decoder")
            log.warning("Holotron: %s", message)
            notices.append(message)
            engine = None
        prompt_ms = (time.perf_counter() - t0) * 1000.0
        decoding: dict[str, Any] = {
            "max_new_tokens": opts.max_reply_tokens, "constraint": constraint, "reasoning": opts.reasoning,
            "max_think_tokens": opts.think_budget, "jump_forward": opts.jump_forward, "sampler": sampler,
            "on_thought": self.thought_watch()}
        if engine is not None:
            # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
            from holodesk.policy.holotron.engine import snapshot_positions

            if self._special_ids is None:
                self._special_ids = frozenset(self.loaded.tokenizer.convert_tokens_to_ids(self._specials or []))
            snapshot_at = snapshot_positions(ids, specials=self._special_ids, image_token_id=self.loaded.image_token_id,
                                             img_end_id=self.loaded.img_end_id)
            generation, engine_details = engine.run(ids, images, snapshot_at=snapshot_at, **decoding)
            details.update(engine_details, decoder="static")
        else:
            generation = runtime.generate(self.loaded, ids, images, **decoding)
            details["decoder"] = "stock"
        generation.timings_ms["preprocess"] = generation.timings_ms.get("preprocess", 0.0) + prompt_ms
        details.update(prompt_tokens=generation.prompt_tokens, generated_tokens=len(generation.token_ids),
                       model_steps=generation.model_steps, forced_tokens=generation.forced_tokens,
                       stop_reason=generation.stop_reason, kernels=self.loaded.kernels.get("summary", ""))
        return Reply(generation.text, generation.timings_ms, details)

    def kernel_report(self) -> dict[str, Any]:
        """The kernel report taken at load time (see :func:`holodesk.policy.holotron.kernel_report`), with
        the decoder in use under ``"decoder"`` (:meth:`StaticEngine.describe`, or ``{"decoder": "stock"}``)."""
        report = dict(self.loaded.kernels)
        report["decoder"] = self.engine.describe() if self.engine is not None else {"decoder": "stock"}
        return report

    def close(self) -> None:
        """Stop a read of the weights still running and the static engine's recording thread, drop the engine and
        the model, and free GPU memory. Idempotent."""
        if self.loaded.reading is not None:
            self.loaded.reading.cancel()
            self.loaded.reading = None  # its tensors go with the model
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        super().close()


__all__ = ["HolotronPolicy"]
