"""The ``static`` decoder of :class:`~holodesk.policy.holotron.HolotronPolicy`: one step of an episode
on preallocated decoder state, resuming from the previous step where the prompt allows.

:class:`StaticEngine` wraps :class:`~holodesk.policy.holotron.fast_decode.StaticLM` (static KV cache,
in-place Mamba state, chunked prefill, decode replayed as CUDA graphs captured at load) and adds what a
policy step needs around it:

* **Keys.** Every prompt token gets a key: its token id, or for an ``<image>`` token the serial number of
  its frame and its row in that frame. A frame's serial is tied to the pixel array object, which the
  engine holds while the frame is in the prompt (so the id cannot be reused by a different array).
* **Resume.** The common prefix with the previous step's keys is taken from the decoder state (the
  latest Mamba snapshot inside it); only the rest is embedded and prefilled, and only frames with image
  tokens past the resume point go through the vision tower. Projected image embeddings of the frames in
  the prompt are kept, so a frame is encoded once while it stays in the window.
* **Decode.** The greedy choice, the grammar mask and the stop rules are
  :func:`~holodesk.policy.holotron.runtime.decode_loop`, shared with the stock decoder; each token is one
  graph replay, and the grammar fills the next bitmask on the CPU while the replay runs.

Memory held between steps is constant: the static state (sized at construction for the longest prompt
the policy can build), one snapshot slot, and the image embeddings of at most ``max_images`` frames.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron import runtime
from holodesk.policy.holotron.prompt import image_token_runs
from holodesk.policy.holotron.runtime import Constraint, Generation, _sync, decode_loop

if TYPE_CHECKING:
    import numpy as np

    from holodesk.policy.holotron.loader import LoadedHolotron

log = logging.getLogger(__name__)

IMAGE_KEY_BASE = 1 << 40
"""Image-token keys start here (token ids are far below), ``IMAGE_KEY_BASE + (serial << 20) + row``."""
TEXT_TOKEN_BUDGET = 8192
"""Prompt text (system prompt, task, history as text, notes) the static cache is sized for, in tokens."""


PREFILL_BUCKET = 128
"""Prefill chunks are padded to a multiple of this many rows for their CUDA graphs (at most 127 padded
rows per chunk, about 3.5 ms of GPU work at 1080p on an H200)."""


def prefill_bucket_for(impl: str, *, cuda: bool, graphs: bool, chunk: int) -> int:
    """The ``prefill_bucket`` a :class:`StaticEngine` gives its ``StaticLM``: :data:`PREFILL_BUCKET` for the
    compiled unquantised path on CUDA with graphs (the prefill graphs are captured), else 0."""
    return PREFILL_BUCKET if impl == "torch" and cuda and graphs and chunk % PREFILL_BUCKET == 0 else 0


def static_cache_tokens(loaded: LoadedHolotron, *, max_images: int, max_new_tokens: int,
                        max_think_tokens: int, reasoning: bool) -> int:
    """Tokens the static cache must hold: ``max_images`` frames of the largest tile grid (thumbnail
    included), :data:`TEXT_TOKEN_BUDGET` of text, the reply and the thinking budget."""
    info = loaded.info
    tiles = info.max_tiles + (1 if info.use_thumbnail and info.max_tiles > 1 else 0)
    image = tiles * info.tokens_per_tile + 2  # <img> ... </img>
    return max_images * image + TEXT_TOKEN_BUDGET + max_new_tokens + (max_think_tokens if reasoning else 0) + 1


def planned_decoder(decoder: str, *, cuda: bool, precision: str) -> str:
    """In plain words, how replies will be decoded with these settings on this machine (for doctor).

    Args:
        decoder: the ``decoder`` setting (``"static"`` or ``"stock"``).
        cuda: whether a CUDA GPU is available.
        precision: the ``precision`` setting (``"bf16"``, ``"8bit"``, ``"4bit"``).
    """
    if decoder == "stock":
        return ("stock: transformers' generation loop, one Python pass over every block per token "
                "(slow path; set decoder = 'static' for the fast one)")
    if not cuda:
        return "static, eager: no CUDA GPU, so no CUDA graphs (slow path)"
    if precision == "bf16":
        return "static: compiled blocks, decode replayed as CUDA graphs captured at load (fast path)"
    if precision == "8bit":
        return ("static with bitsandbytes 8-bit modules: LLM.int8 synchronises with the host, so graph capture "
                "fails and decode runs eagerly (slow path, logged at load); 4bit captures")
    return "static with bitsandbytes 4-bit modules, decode replayed as CUDA graphs captured at load"


class StaticEngine:
    """Static-state decoding for one policy (see the module docstring).

    Args:
        loaded: the loaded model.
        max_len: capacity of the attention cache in tokens (:func:`static_cache_tokens`).
        impl / compile / graphs: decode step implementation. Defaults: on CUDA with unquantised weights
            ``impl="torch"``, ``compile=True``, graphs captured now (the fastest measured,
            docs/benchmarks.md); with bitsandbytes weights ``impl="dispatch"`` (their modules are called
            as they are); on the CPU ``impl="dispatch"`` without graphs.
        chunk / bucket: prefill chunk and attention-window granularity in tokens. With ``impl="torch"``
            on CUDA and graphs on, prefill chunks are padded to multiples of :data:`PREFILL_BUCKET` rows
            and their Mamba/MLP segments captured as CUDA graphs now (``StaticLM.capture_prefill_graphs``).
        warm_up: run :meth:`warm_up` now (default: on CUDA), so that Triton's compilation and autotuning of
            the prefill and vision kernels happen at load rather than in the first step.
    Attributes:
        notes: what the engine could not do as asked (e.g. graph capture failed -> eager decode); each is
            logged as a warning when it happens and shown in :meth:`describe`.
    """

    def __init__(
        self,
        loaded: LoadedHolotron,
        *,
        max_len: int,
        impl: str | None = None,
        compile: bool | None = None,
        graphs: bool | None = None,
        chunk: int = 2048,
        bucket: int = 2048,
        warm_up: bool | None = None,
    ) -> None:
        from holodesk.policy.holotron.decoder import StaticDecoder

        self.loaded = loaded
        cuda = getattr(loaded.device, "type", "cpu") == "cuda"
        self.impl, self.compile = impl or "torch", bool(compile)  # kept for describe(); the decoder decides
        t0 = time.perf_counter()
        self.static = StaticDecoder(loaded.model.language_model, max_len=max_len, bucket=bucket, chunk=chunk,
                                    prefill_bucket=PREFILL_BUCKET if chunk % PREFILL_BUCKET == 0 else chunk,
                                    eager=not cuda or graphs is False)
        self.static.capture()
        self.notes = self.static.notes
        self.windows: list[int] = self.static.describe()["decode_graphs"]
        self._serials = itertools.count(1)
        self._frames: dict[int, tuple[Any, int]] = {}  # id(pixels) -> (pixels held, serial)
        self._embeds: dict[int, Any] = {}  # serial -> projected image embeddings (tokens, hidden)
        self.warm_up_seconds: float | None = None
        if warm_up if warm_up is not None else cuda:
            try:
                self.warm_up()
            except Exception as exc:
                note = f"warm-up at load failed ({type(exc).__name__}: {str(exc)[:160]}); the first step compiles"
                self.reset()
                log.warning("Holotron: %s", note)
                self.notes.append(note)
        self.setup_seconds = time.perf_counter() - t0

    def warm_up(self) -> None:
        """Run every kernel a step uses once, with dummy input, then forget it: the vision tower on one
        blank tile, a cold prefill longer than one chunk with a snapshot (full and short chunks), a resumed
        prefill (attention over a cached prefix), a few decode steps. Triton compiles and autotunes the
        Mamba prefill kernels on first use (28-44 s for Holotron-12B on an H200, docs/benchmarks.md), so
        this moves that time into loading."""
        import torch

        t0 = time.perf_counter()
        loaded = self.loaded
        s = self.static
        size = loaded.info.tile_size
        with torch.inference_mode():
            runtime.encode_tiles(loaded, torch.zeros(1, 3, size, size))
            first = min(s.chunk + 37, s.max_len // 2)
            ids = torch.arange(first + 53, device=loaded.device) % 97 + 3
            embeds = loaded.model.get_input_embeddings()(ids[None])
            keys = [int(t) for t in ids.tolist()]
            s.prefill(embeds[:, :first], keys[:first], snapshot_at=[first - 5])
            resume = s.state.resume_point(keys)
            s.prefill(embeds[:, resume:], keys, embeds_offset=resume)
            s.token.fill_(3)
            for _ in range(3):
                s.step()
            _sync(loaded.device)
        self.reset()
        self.warm_up_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------ facts
    def describe(self) -> dict[str, Any]:
        """What runs: implementation, compile, captured windows, cache size, notes (for logs and doctor)."""
        return {**self.static.describe(), "impl": self.impl, "compile": self.static.setup.compiled,
                "graphs": list(self.windows), "setup_seconds": round(self.setup_seconds, 2),
                "warm_up_seconds": None if self.warm_up_seconds is None else round(self.warm_up_seconds, 2)}

    def fits(self, prompt_tokens: int, reply_tokens: int) -> bool:
        """True when a prompt of ``prompt_tokens`` plus ``reply_tokens`` fit the static cache."""
        return prompt_tokens + reply_tokens + 1 <= self.static.max_len

    def reset(self) -> None:
        """Forget the previous step (state, held frames, image embeddings); the next step is cold."""
        self.static.state.reset()
        self._frames.clear()
        self._embeds.clear()

    # ------------------------------------------------------------------------------------------ steps
    def _serial(self, pixels: Any) -> int:
        held = self._frames.get(id(pixels))
        if held is not None and held[0] is pixels:
            return held[1]
        serial = next(self._serials)
        self._frames[id(pixels)] = (pixels, serial)
        return serial

    def run(
        self,
        input_ids: Sequence[int],
        images: Sequence[np.ndarray[Any, Any]],
        *,
        snapshot_at: Sequence[int] = (),
        max_new_tokens: int,
        constraint: Constraint | None,
        reasoning: bool,
        max_think_tokens: int,
    ) -> tuple[Generation, dict[str, Any]]:
        """Embed, prefill (from the resume point) and decode one step.

        Args:
            input_ids: prompt token ids with ``<image>`` rows (``tokenize_prompt``).
            images: RGB uint8 ``(h, w, 3)`` arrays, prompt order (the same objects from step to step for
                a frame that stays in the prompt).
            snapshot_at: prompt positions after which to keep the Mamba state for the next step.
        Returns:
            (:class:`Generation` with ``timings_ms`` preprocess (tiling), vision, prefill, decode;
            details: ``reused_tokens``, ``prefill_tokens``, ``images_encoded``).
        Raises:
            ValueError: the prompt and reply do not fit the static cache (check :meth:`fits` first).
            torch.OutOfMemoryError: passed through after a :meth:`reset`, so the caller can retry.
        """
        try:
            return self._run(input_ids, images, snapshot_at, max_new_tokens, constraint, reasoning,
                             max_think_tokens)
        except BaseException:
            self.reset()  # a half-written state must not be resumed from
            raise

    def _run(self, input_ids: Sequence[int], images: Sequence[Any], snapshot_at: Sequence[int],
             max_new_tokens: int, constraint: Constraint | None, reasoning: bool,
             max_think_tokens: int) -> tuple[Generation, dict[str, Any]]:
        import torch

        loaded = self.loaded
        device = loaded.device
        image_id = int(loaded.image_token_id)
        ids = [int(t) for t in input_ids]
        total = len(ids)
        if not self.fits(total, max_new_tokens + (max_think_tokens if reasoning else 0)):
            raise ValueError(f"a prompt of {total} tokens and its reply do not fit the static cache of "
                             f"{self.static.max_len} tokens")
        spans = image_token_runs(ids, image_id)  # per image: (first position, tokens)
        if len(spans) != len(images):
            raise ValueError(f"the prompt holds {len(spans)} run(s) of image tokens but {len(images)} image(s)")
        serials = [self._serial(p) for p in images]
        keys: list[int] = list(ids)  # text tokens: their id; image rows: frame serial and row
        for (start, n), serial in zip(spans, serials, strict=True):
            keys[start : start + n] = [IMAGE_KEY_BASE + (serial << 20) + row for row in range(n)]
        resume = self.static.state.resume_point(keys)

        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        needed = [i for i, (start, n) in enumerate(spans) if start + n > resume]
        todo = [i for i in needed if serials[i] not in self._embeds]
        tiles, _grids, counts = runtime.tile_images(loaded, [images[i] for i in todo])
        _sync(device)
        t1 = time.perf_counter()
        timings["preprocess"] = (t1 - t0) * 1000.0
        if todo:
            encoded = runtime.encode_tiles(loaded, tiles)
            offset = 0
            for i, count in zip(todo, counts, strict=True):
                n = count * loaded.info.tokens_per_tile
                self._embeds[serials[i]] = encoded[offset : offset + n]
                offset += n
            del encoded
        del tiles
        with torch.inference_mode():
            tail_ids = torch.tensor([ids[resume:]], dtype=torch.long, device=device)
            embeds = loaded.model.get_input_embeddings()(tail_ids)
            rows = []
            for i in needed:
                start, n = spans[i]
                emb = self._embeds[serials[i]]
                if int(emb.shape[0]) != n:
                    raise ValueError(f"image {i} has {n} tokens in the prompt but {int(emb.shape[0])} embeddings")
                rows.append(emb[max(0, resume - start) :])
            if rows:
                mask = tail_ids[0] == image_id
                embeds[0, mask] = torch.cat(rows).to(embeds.dtype)
        _sync(device)
        t2 = time.perf_counter()
        timings["vision"] = (t2 - t1) * 1000.0
        # keep only what the prompt still shows
        live = set(serials)
        self._embeds = {s: e for s, e in self._embeds.items() if s in live}
        self._frames = {k: v for k, v in self._frames.items() if v[1] in live}

        s = self.static
        with torch.inference_mode():
            first, report = s.prefill(embeds, keys, snapshot_at=snapshot_at, embeds_offset=resume)
            del embeds
            _sync(device)
            t3 = time.perf_counter()
            timings["prefill"] = (t3 - t2) * 1000.0

            def step(token: int) -> Any:
                s.token.fill_(token)
                return s.step()[0]

            tokens, stop_reason = decode_loop(
                loaded, first[0], step, max_new_tokens=max_new_tokens, constraint=constraint,
                reasoning=reasoning, max_think_tokens=max_think_tokens,
            )
            _sync(device)
            timings["decode"] = (time.perf_counter() - t3) * 1000.0
        text = loaded.tokenizer.decode(tokens, skip_special_tokens=False)
        generation = Generation(token_ids=tokens, text=str(text), stop_reason=stop_reason, prompt_tokens=total,
                                timings_ms=timings)
        details = {"reused_tokens": report.reused, "prefill_tokens": report.computed,
                   "images_encoded": len(todo), "prefill_chunks": report.chunks}
        return generation, details


__all__ = ["IMAGE_KEY_BASE", "PREFILL_BUCKET", "StaticEngine", "planned_decoder", "prefill_bucket_for",
           "static_cache_tokens"]
