"""The ``static`` decoder of :class:`~holodesk.policy.holotron.HolotronPolicy`: one step of an episode
on preallocated decoder state, resuming from the previous step where the prompt allows.

:class:`StaticEngine` wraps :class:`~holodesk.policy.holotron.decoder.StaticDecoder` (static KV cache,
in-place Mamba state, padded chunked prefill, decode replayed as CUDA graphs: those of the warm-up's shapes
recorded at load, every other attention window and padded prefill length ahead of its first use, between
steps, by a thread of its own (:meth:`StaticEngine.start_recording_ahead`), or on its first use when that thread
has not reached it) and adds what a policy step needs around it:

* **Keys.** Every prompt token gets a key: its token id, or for an ``<image>`` token the serial number of
  its frame and its row in that frame. A frame's serial is tied to the pixel array object, which the
  engine holds while the frame is in the prompt (so the id cannot be reused by a different array).
* **Resume.** The common prefix with the previous step's keys is taken from the decoder state (the
  latest Mamba snapshot inside it: the system prompt's end for a new task, the oldest screenshot's turn
  when that screenshot leaves the window, the newest screenshot's end otherwise); only the rest is
  embedded and prefilled, and only frames with image tokens past the resume point go through the vision
  tower. Projected image embeddings of the frames in
  the prompt are kept, so a frame is encoded once while it stays in the window.
* **Decode.** The grammar mask, the choice after it (greedy or sampled) and the stop rules are
  :func:`~holodesk.policy.holotron.runtime.decode_loop`, shared with the stock decoder; a token the model
  chose is one graph replay (the grammar fills the next bitmask on the CPU while it runs), and a token
  the model chose together with the tokens the grammar forces after it is one pass through the prefill's
  chunk path (jump-forward, :meth:`~holodesk.policy.holotron.decoder.StaticDecoder.extend`).

Memory held between steps is constant: the static state (sized for the longest prompt the policy can
build), :data:`SNAPSHOT_SLOTS` snapshot slots (:func:`snapshot_positions`: the system prompt's end, the
oldest screenshot's turn, the newest screenshot's end), and the image embeddings of at most ``max_images``
frames (in page-locked host memory on a GPU machine). A step's GPU memory beyond that is one frame's vision
activations and one prefill chunk's embeddings and activations, whatever the number of screenshots.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron import runtime
from holodesk.policy.holotron.kernels import (
    autotune_cache,
    kernel_analysis_failures,
    record_decoder,
    watch_kernel_analysis,
)
from holodesk.policy.holotron.prompt import image_token_runs
from holodesk.policy.holotron.runtime import Constraint, Generation, PromptImage, Sampler, decode_loop, sync
from holodesk.policy.holotron.tiling import tile_count

if TYPE_CHECKING:
    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron

log = logging.getLogger(__name__)

IMAGE_KEY_BASE = 1 << 40
"""Image-token keys start here (token ids are far below), ``IMAGE_KEY_BASE + (serial << 20) + row``."""
TEXT_TOKEN_BUDGET = 12288
"""Prompt text (system prompt with the tool schema, task, history as text, notes) the static cache is sized for,
in tokens. The agent-loop prompt of one step without its image is about 5,100 tokens with a 131,072-entry
vocabulary (the bench's tekken stand-in) and 9,800 with the tiny checkpoint's 480-entry test tokenizer (the
published tool schema took it past the former 8,192: a one-screenshot policy then fell back to the stock
decoder). Each 1,024 tokens of capacity cost 24 MiB of KV cache for Holotron-12B."""


QUIET_S = 0.05
"""Seconds without a step after which the recording thread (:meth:`StaticEngine.start_recording_ahead`) records
the next graph: shorter than the agent loop's wait between steps (the screen's settling, 0.25 s at least)."""

RECORD_AHEAD = False
"""Whether :meth:`.HolotronPolicy.ready` starts the engine's recording ahead
(:meth:`StaticEngine.start_recording_ahead`). Off until its GPU tests and the product bench have passed on the
GPU machine (not run yet: docs/benchmarks.md, "Graphs recorded ahead"); ``holodesk bench --product`` starts it
itself."""

SNAPSHOT_SLOTS = 3
"""Mamba-state snapshots a policy's engine keeps between steps, one per position of
:func:`snapshot_positions`: 3 x 143 MiB for Holotron-12B (28 Mamba layers x (5 MiB SSM + 96 KiB conv))."""


def snapshot_positions(ids: Sequence[int], *, specials: Collection[int], image_token_id: int,
                       img_end_id: int) -> list[int]:
    """Prompt positions whose Mamba state a step keeps, so that later steps resume there (the state
    after ``ids[:p]``; attention KV before ``p`` stays in the static cache):

    * the end of the system turn: the first special token after text (the next turn's header, or the
      system turn's end token): the system prompt and tool schema, shared by every step of every task;
    * the start of the oldest screenshot's turn: the last special token before its ``<img>`` (the next
      step that drops this screenshot from the window changes the prompt from its ``<img>`` on; the turn
      header is where the text before it is tokenized the same whatever follows, because tokenizers cut
      text at special tokens);
    * the end of the newest screenshot (after its ``</img>``): the next step adds the reply and a new
      observation after it.

    Args:
        ids: the prompt's token ids (``tokenize_prompt``).
        specials: the tokenizer's special token ids (image tokens among them or not).
        image_token_id, img_end_id: the ``<image>`` and ``</img>`` ids.
    Returns:
        sorted distinct positions in ``[1, len(ids)]``, at most :data:`SNAPSHOT_SLOTS`.
    """
    marks = [i for i, t in enumerate(ids) if t in specials and t != image_token_id]
    positions: set[int] = set()
    first = next((i for i in marks if i > 0 and ids[i - 1] not in specials), None)
    if first is not None:
        positions.add(first)
    runs = image_token_runs(ids, image_token_id)
    if runs:
        img = runs[0][0] - 1  # the <img> before the first run
        header = [i for i in marks if i < img and i != img]
        if header and header[-1] > 0:
            positions.add(header[-1])
        if img_end_id in ids:
            positions.add(len(ids) - ids[::-1].index(img_end_id))
    return sorted(positions)


def static_cache_tokens(loaded: LoadedHolotron, *, max_images: int, max_new_tokens: int,
                        max_think_tokens: int, reasoning: bool) -> int:
    """Tokens the static cache must hold: ``max_images`` frames of the largest tile grid (thumbnail
    included), :data:`TEXT_TOKEN_BUDGET` of text, the reply and the thinking budget."""
    info = loaded.info
    image = tile_count(info.max_tiles, use_thumbnail=info.use_thumbnail) * info.tokens_per_tile + 2  # <img> </img>
    return max_images * image + TEXT_TOKEN_BUDGET + max_new_tokens + (max_think_tokens if reasoning else 0) + 1


def planned_decoder(decoder: str, *, cuda: bool, precision: str) -> str:
    """In plain words, how replies will be decoded with the ``decoder`` (``"static"`` | ``"stock"``) and
    ``precision`` (``"bf16"`` | ``"8bit"`` | ``"4bit"``) settings, with or without a CUDA GPU (for doctor
    before a model is loaded; once loaded, :meth:`StaticEngine.describe` says what runs)."""
    if decoder == "stock":
        return ("stock: transformers' generation loop, one Python pass over every block per token "
                "(slow path; set decoder = 'static' for the fast one)")
    if not cuda:
        return "static, eager: no CUDA GPU, so no CUDA graphs (slow path)"
    if precision == "bf16":
        return "static: compiled blocks, decode replayed as CUDA graphs recorded on first use (fast path)"
    fmt = "NF4" if precision == "4bit" else "int8 weight-only"
    return (f"static with bitsandbytes {precision} weights: compiled blocks, decode reads the {fmt} storage through "
            "Triton matrix-vector kernels, replayed as CUDA graphs recorded on first use; prefill calls bitsandbytes' "
            "modules (fast path; where no kernel serves a projection decode calls the modules uncompiled, the "
            "slow path: logged at load and shown here)")


JUMP_FORWARD_OFF_QUANTIZED = (
    "quantised weights: forced tokens are fed one decode step each, because a multi-token pass multiplies by "
    "the dequantised weights (dequantise + bf16 GEMM: several times the bytes of a decode step, an estimate "
    "not measured) while a forced run is a few tokens")
"""Why :attr:`StaticEngine.jump_forward` is off for bitsandbytes weights (logged, in ``describe()``)."""


class StaticEngine:
    """Static-state decoding for one policy (see the module docstring).

    Building it builds the decoder, captures the CUDA graphs the warm-up needs (on CUDA, unless ``eager``;
    the decoder falls back to simpler configurations there itself) and warms it up, which records the graphs
    of its other shapes on their first use; a session's other shapes are recorded on their first use in
    :meth:`run`. What fails is recorded once, as a note (logged as a warning, in :meth:`describe`, which is
    kept for ``holodesk doctor`` by :func:`~holodesk.policy.holotron.kernels.record_decoder`, again after a
    step that added a note); nothing is retried or rebuilt at run time.

    Args:
        loaded: the loaded model.
        max_len: capacity of the attention cache in tokens (:func:`static_cache_tokens`).
        max_images: frames whose embeddings are held at once; on CUDA as many page-locked host slots of
            the largest frame's size are allocated now, so no step allocates host memory.
        eager: run the decoder without torch.compile and CUDA graphs (the same code; the escape hatch).
        warm_up: run :meth:`warm_up` now (default: on CUDA), so that Triton's compilation and autotuning
            happen at load rather than in the first step.
        snapshot_slots: Mamba-state snapshots kept between steps (:data:`SNAPSHOT_SLOTS`; each the size of
            every Mamba layer's conv + SSM state, preallocated: the bound on their memory).
    Attributes:
        decoder: the ``StaticDecoder``; max_len: the capacity :meth:`fits` checks against.
        jump_forward: whether :meth:`run` may feed forced tokens in one pass (off for quantised weights,
            :data:`JUMP_FORWARD_OFF_QUANTIZED`).
        notes: what failed here (the warm-up at load; torch's analysis of a Triton kernel, at load or at a
            recompile, noted when :meth:`describe` runs) and what the engine does instead.
    """

    def __init__(self, loaded: LoadedHolotron, *, max_len: int, max_images: int = 8, eager: bool = False,
                 warm_up: bool | None = None, snapshot_slots: int = SNAPSHOT_SLOTS) -> None:
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron.decoder import StaticDecoder

        t0 = time.perf_counter()
        cuda = loaded.device.type == "cuda"
        self.loaded = loaded
        self.max_len = max_len
        self.notes: list[str] = []
        self._analysis_from = watch_kernel_analysis()  # torch's failures to analyse our kernels from here on
        self._analysis_noted: set[str] = set()
        self._serials = itertools.count(1)
        self._frames: dict[int, tuple[Any, int]] = {}  # id(pixels) -> (pixels held, serial)
        self._embeds: dict[int, torch.Tensor] = {}  # serial -> projected image embeddings (tokens, hidden)
        self.warm_up_seconds: float | None = None
        self._slots = self._host_slots(max_images) if cuda else []
        self._copy_stream: torch.cuda.Stream | None = None  # background copies into the slots (made on first use)
        self._using = threading.RLock()  # held by whatever uses the decoder: a step, a reset, a recording ahead
        self._last_use = time.monotonic()  # when a step last wanted or released the decoder (monotonic seconds)
        self._stop_recording = threading.Event()
        self._recorder: threading.Thread | None = None
        self.decoder = StaticDecoder(loaded.model.language_model, max_len=max_len, eager=eager or not cuda,
                                     snapshot_slots=snapshot_slots)
        self.build_seconds = time.perf_counter() - t0  # state, host slots, the matrix-vector kernel choice
        self.jump_forward = not self.decoder.setup.quantized
        if not self.jump_forward:
            log.info("Holotron: %s", JUMP_FORWARD_OFF_QUANTIZED)
        self.decoder.capture(lengths=(self._warm_up_lengths()[1],))  # no-op when eager; fallbacks: decoder.notes
        if warm_up if warm_up is not None else cuda:
            try:
                self.warm_up()
            except Exception as exc:
                self.reset()
                note = (f"the warm-up failed at load ({type(exc).__name__}: {str(exc)[:160]}); the first step "
                        "compiles and autotunes instead")
                log.warning("Holotron: %s", note)
                self.notes.append(note)
        self._lazy_from = len(self.decoder.lazy_captures)  # graphs recorded after this: by the session's steps
        self.setup_seconds = time.perf_counter() - t0
        # notes torch's failures to analyse what the capture and warm-up compiled
        record_decoder(self.describe(), checkpoint=str(self.loaded.info.folder))

    def _note_kernel_analysis(self) -> bool:
        """Note and log, once each, the failures of torch's analysis of our Triton kernels since this engine
        began (:func:`.kernels.kernel_analysis_failures`): at load, or at a recompile during the steps. Returns
        whether it noted one."""
        noted = False
        for line in kernel_analysis_failures(self._analysis_from):
            if line in self._analysis_noted:
                continue
            self._analysis_noted.add(line)
            note = (f"torch could not analyse a Triton kernel of the decode ({line}): it copies every input of that "
                    "kernel, weights included, at each call, so decode is much slower than its kernels' timings")
            log.warning("Holotron: %s", note)
            self.notes.append(note)
            noted = True
        return noted

    def _warm_up_lengths(self) -> tuple[int, int]:
        """Tokens of the warm-up's cold prompt (a chunk and more, at most half the cache) and of its second
        prompt, after which it decodes."""
        first = min(self.decoder.chunk + 37, self.decoder.max_len // 2)
        return first, first + 53

    def warm_up(self) -> None:
        """Run every kernel a step uses once on dummy input, then forget it: the vision tower on a blank
        tile, a cold prefill longer than one chunk with a snapshot, a resumed prefill, three decode steps, a
        jump-forward pass and a step after it; the graphs of the shapes it uses that :meth:`StaticDecoder.capture`
        did not record (the prompt tails' padded lengths, the jump-forward pass's) are recorded on first use.
        Triton compiles and autotunes on first use (28-44 s for Holotron-12B on an H200,
        docs/benchmarks.md), so this moves that time into loading."""
        import torch  # lazy: torch (optional, heavy)

        t0 = time.perf_counter()
        loaded, d = self.loaded, self.decoder
        size = loaded.info.tile_size
        with torch.inference_mode():
            runtime.encode_tiles(loaded, torch.zeros(1, 3, size, size))
            first, second = self._warm_up_lengths()
            ids = torch.arange(second, device=loaded.device) % 97 + 3
            embeds = loaded.model.get_input_embeddings()(ids[None])
            keys = [int(t) for t in ids.tolist()]
            d.prefill(embeds[:, :first], keys[:first], snapshot_at=[first - 5])
            resume = d.state.resume_point(keys)
            d.prefill(embeds[:, resume:], keys, embeds_offset=resume)
            d.token.fill_(3)
            for _ in range(3):
                d.step()
            d.extend([3, 4, 5])
            d.step()
            sync(loaded.device)
        self.reset()
        self.warm_up_seconds = time.perf_counter() - t0

    def describe(self) -> dict[str, Any]:
        """What runs (for logs, doctor, the bench): ``StaticDecoder.describe()`` (with its ``capture_seconds``)
        plus the engine's setup seconds, of which ``build_seconds`` before the capture and ``warm_up_seconds``
        after it (``warm_up_captures``: the graphs the warm-up recorded on first use, in its seconds),
        ``lazy_captures``: the graphs the steps since recorded on first use (``StaticDecoder.lazy_summary``:
        count, seconds, keys), ``weights_reader`` (:attr:`.loader.LoadedHolotron.weights_reader`),
        ``autotune_cache`` (:func:`.kernels.autotune_cache`'s one line: whether
        mamba-ssm's autotuning results come from disk), ``snapshots`` (the kept Mamba-state snapshots:
        ``slots``, their ``bytes``, the prompt ``positions`` they hold now) and every note (the decoder's, then
        the engine's)."""
        with self._using:
            return self._describe()

    def _describe(self) -> dict[str, Any]:
        self._note_kernel_analysis()  # a recompile during the steps may have added one
        d = self.decoder
        recorder = self._recorder
        return {
            **d.describe(),
            "warm_up_captures": d.lazy_summary(0, self._lazy_from),
            "lazy_captures": d.lazy_summary(self._lazy_from),
            "decoder": "static",
            "setup_seconds": round(self.setup_seconds, 2),
            "build_seconds": round(self.build_seconds, 2),
            "warm_up_seconds": None if self.warm_up_seconds is None else round(self.warm_up_seconds, 2),
            "autotune_cache": autotune_cache()["detail"],
            "notes": [*self.decoder.notes, *self.notes],
            "jump_forward": "on" if self.jump_forward else f"off: {JUMP_FORWARD_OFF_QUANTIZED}",
            "recording_ahead": "not started" if recorder is None else "running" if recorder.is_alive() else "ended",
            "weights_reader": self.loaded.weights_reader,
            "snapshots": {"slots": d.state.snapshot_slots, "bytes": d.state.snapshot_bytes(),
                          "positions": sorted(d.state.snapshots)},
        }

    def fits(self, prompt_tokens: int, reply_tokens: int) -> bool:
        """True when a prompt of ``prompt_tokens`` plus ``reply_tokens`` fit the static cache."""
        return prompt_tokens + reply_tokens + 1 <= self.max_len

    def weights_written(self) -> None:
        """The weights were written in place after this engine was built (:meth:`.LoadedHolotron.finish_weights`
        returned True): the decoder re-derives what it computed from them and clears what the capture and the
        warm-up left (:meth:`StaticDecoder.weights_written`), the engine forgets its frames, and the record
        ``holodesk doctor`` shows is written again (how the weights were read is known now)."""
        with self._in_use():
            self.decoder.weights_written()
            self.reset()
        record_decoder(self.describe(), checkpoint=str(self.loaded.info.folder))

    def reset(self) -> None:
        """Forget the previous step (state, held frames, image embeddings); the next step is cold."""
        with self._in_use():
            self.decoder.state.reset()
            self._frames.clear()
            self._embeds.clear()

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """Hold the decoder for a step or a reset: the recording thread finishes the graph it is recording and
        then waits until the decoder has been left alone for :data:`QUIET_S`."""
        self._last_use = time.monotonic()  # before waiting for the lock: the recording thread sees it and yields
        with self._using:
            try:
                yield
            finally:
                self._last_use = time.monotonic()

    def start_recording_ahead(self) -> bool:
        """Start a thread that records the decoder's graphs not recorded yet (:meth:`StaticDecoder.pending_graphs`:
        every padded prefill length and decode window a step may use) one at a time, each once no step has used
        the decoder for :data:`QUIET_S` (between steps, while the user reads the proposal or the screen settles),
        so that no step records a graph on its first use (0.2-0.35 s at a task's first step on an H100). A step
        waits at most for the graph being recorded. A recording that fails leaves its shape to its first use
        (logged); the thread ends when nothing is pending, or at :meth:`close`, and writes the record
        ``holodesk doctor`` shows. Returns whether it started one (not when eager, when nothing is pending, or
        when one was started before)."""
        if self._recorder is not None or not self.decoder.pending_graphs():
            return False
        self._stop_recording.clear()
        self._recorder = threading.Thread(target=self._record_ahead, name="holotron-graphs-ahead", daemon=True)
        self._recorder.start()
        return True

    def _record_ahead(self) -> None:
        """The recording thread's body (:meth:`start_recording_ahead`)."""
        d = self.decoder
        t0 = time.perf_counter()
        try:
            with self._using:
                d.prepare_thread()
            while not self._stop_recording.is_set():
                with self._using:
                    wait = QUIET_S - (time.monotonic() - self._last_use)
                    if wait <= 0:
                        pending = d.pending_graphs()
                        if not pending:
                            break
                        d.record_ahead(pending[0])
                if wait > 0:
                    self._stop_recording.wait(wait)
        except Exception as exc:
            note = (f"recording graphs ahead of their first use stopped ({type(exc).__name__}: {str(exc)[:160]}); "
                    "the rest are recorded on their first use")
            log.warning("Holotron: %s", note)
            with self._using:
                self.notes.append(note)
        summary = self.describe()
        log.info("Holotron: graphs recorded ahead of their first use in %.1f s: %s", time.perf_counter() - t0,
                 summary["ahead_captures"])
        record_decoder(summary, checkpoint=str(self.loaded.info.folder))

    def wait_recorded(self, timeout: float | None = None) -> bool:
        """Wait at most ``timeout`` seconds (None: as long as it takes) for the recording thread to end; returns
        whether none runs (also when none was started)."""
        if self._recorder is not None:
            self._recorder.join(timeout)
        return self._recorder is None or not self._recorder.is_alive()

    def close(self) -> None:
        """Stop the recording thread (:meth:`start_recording_ahead`; it ends after the graph it is recording)
        and wait for it. Idempotent."""
        self._stop_recording.set()
        if self._recorder is not None:
            self._recorder.join()

    def _host_slots(self, count: int) -> list[torch.Tensor]:
        """``count`` page-locked host buffers ``(tokens of the largest tile grid, hidden)`` in the input
        embeddings' dtype, for :meth:`_hold`."""
        import torch  # lazy: torch (optional, heavy)

        info, model = self.loaded.info, self.loaded.model
        rows = tile_count(info.max_tiles, use_thumbnail=info.use_thumbnail) * info.tokens_per_tile
        weight = model.get_input_embeddings().weight  # the rows end up in the embeddings' dtype anyway
        return [torch.empty(rows, int(weight.shape[1]), dtype=weight.dtype, pin_memory=True) for _ in range(count)]

    def _hold(self, encoded: torch.Tensor, *, background: bool = False) -> torch.Tensor:
        """Where a frame's projected embeddings ``(tokens, hidden)`` wait while the frame is in the prompt:
        a free page-locked host slot when the model is on a GPU (24 MB per 1080p frame that GPU memory does
        not hold; copied back one prefill chunk at a time, about 1 ms per 2048 rows), else as they are.

        The copy into the slot blocks the host until it is done; with ``background`` it runs on a side
        stream instead (``encoded`` is kept alive for it) while the GPU goes on with the step, and
        :meth:`_embed` makes the next step's work wait for it before anything reads the slot.

        Raises:
            ValueError: every slot holds a frame of the prompt (more images than ``max_images``).
        """
        import torch  # lazy: torch (optional, heavy)

        if encoded.device.type != "cuda":
            return encoded
        taken = {e.data_ptr() for e in self._embeds.values()}
        free = [slot for slot in self._slots if slot.data_ptr() not in taken]
        if not free or encoded.shape[0] > free[0].shape[0]:
            raise ValueError(f"the prompt holds more images than the {len(self._slots)} the engine was built for")
        held = free[0][: encoded.shape[0]]
        if not background:
            held.copy_(encoded)
            return held
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(encoded.device)
        side = self._copy_stream
        side.wait_stream(torch.cuda.current_stream(encoded.device))
        with torch.cuda.stream(side):
            held.copy_(encoded, non_blocking=True)
        encoded.record_stream(side)
        return held

    def _serial(self, pixels: object) -> int:
        """The frame serial of ``pixels`` (a new one for an array not held)."""
        held = self._frames.get(id(pixels))
        if held is not None and held[0] is pixels:
            return held[1]
        self._frames[id(pixels)] = (pixels, next(self._serials))
        return self._frames[id(pixels)][1]

    def run(self, input_ids: Sequence[int], images: Sequence[PromptImage], *, snapshot_at: Sequence[int] = (),
            max_new_tokens: int, constraint: Constraint | None, reasoning: bool, max_think_tokens: int,
            jump_forward: bool = True, sampler: Sampler | None = None,
            on_thought: Callable[[list[int]], None] | None = None) -> tuple[Generation, dict[str, int]]:
        """Embed, prefill (from the resume point) and decode one step.

        Args:
            input_ids: prompt token ids with ``<image>`` runs (``tokenize_prompt``).
            images: the prompt's images in order with their tiling (the same pixel array objects from step
                to step for a frame that stays in the prompt).
            snapshot_at: prompt positions after which to keep the Mamba state for later steps
                (:func:`snapshot_positions`); snapshots kept from earlier steps at these positions stay.
            jump_forward: feed the tokens the grammar forces in one pass with the token the model chose
                before them (:meth:`StaticDecoder.extend`); False: one decode step per token (the
                reference: the same token ids, :func:`~holodesk.policy.holotron.runtime.decode_loop`).
            sampler: the choice after the grammar mask (:class:`~holodesk.policy.holotron.runtime.Sampler`);
                None: greedy.
            on_thought: the reply's ids so far after each token chosen while the model thinks
                (:func:`~holodesk.policy.holotron.runtime.decode_loop`; host ids, no extra synchronisation).
        Returns:
            (:class:`Generation` with ``timings_ms`` preprocess (tiling), vision, prefill, decode,
            ``model_steps`` and ``forced_tokens``;
            details: ``reused_tokens``, ``prefill_tokens``, ``images_encoded``, ``prefill_chunks``).
        Raises:
            ValueError: the prompt and reply do not fit the static cache (check :meth:`fits` first), or
                the prompt's image-token runs and ``images`` disagree in number.
            torch.OutOfMemoryError: passed through after a :meth:`reset`, so the caller can retry.
        """
        reply = max_new_tokens + (max_think_tokens if reasoning else 0)
        if not self.fits(len(input_ids), reply):
            raise ValueError(f"a prompt of {len(input_ids)} tokens and its reply do not fit the static cache of "
                             f"{self.max_len} tokens")
        import torch  # lazy: torch (optional, heavy)

        ids = [int(t) for t in input_ids]
        timings: dict[str, float] = {}
        notes = len(self.decoder.notes)
        with self._in_use():  # the recording thread (start_recording_ahead) yields to this step
            try:
                embeds, keys, resume, encoded = self._embed(ids, images, timings)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    first, report = self.decoder.prefill(embeds, keys, snapshot_at=snapshot_at,
                                                         embeds_offset=resume)
                    del embeds
                    sync(self.loaded.device)
                    t1 = time.perf_counter()
                    decoded = decode_loop(self.loaded, first[0], self._step, max_new_tokens=max_new_tokens,
                                          constraint=constraint, reasoning=reasoning,
                                          max_think_tokens=max_think_tokens,
                                          forward=self._forward if jump_forward and self.jump_forward else None,
                                          sampler=sampler, on_thought=on_thought)
                    sync(self.loaded.device)
                    t2 = time.perf_counter()
            except BaseException:
                self.reset()  # a half-written state must not be resumed from
                raise
            finally:
                # a graph recorded on first use failed, or torch could not analyse a kernel it recompiled: doctor
                # shows it
                if self._note_kernel_analysis() or len(self.decoder.notes) > notes:
                    record_decoder(self.describe(), checkpoint=str(self.loaded.info.folder))
        timings.update(prefill=(t1 - t0) * 1000.0, decode=(t2 - t1) * 1000.0)
        text = self.loaded.tokenizer.decode(decoded.tokens, skip_special_tokens=False)
        generation = Generation(token_ids=decoded.tokens, text=str(text), stop_reason=decoded.stop_reason,
                                prompt_tokens=len(ids), timings_ms=timings, model_steps=decoded.model_steps,
                                forced_tokens=decoded.forced_tokens)
        return generation, {"reused_tokens": report.reused, "prefill_tokens": report.computed,
                            "images_encoded": encoded, "prefill_chunks": report.chunks}

    def _step(self, token: int) -> torch.Tensor:
        """Feed ``token`` and return the next logits ``(vocab,)`` (one graph replay when captured)."""
        self.decoder.token.fill_(token)
        return self.decoder.step()[0]

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        """Feed ``tokens`` in one pass (:meth:`StaticDecoder.extend`) and return the logits ``(vocab,)``
        after the last."""
        return self.decoder.extend(tokens)[0]

    def _embed(self, ids: list[int], images: Sequence[PromptImage],
               timings: dict[str, float]) -> tuple[runtime.PromptEmbeddings, list[int], int, int]:
        """Keys, resume point and the input embeddings of ``ids[resume:]``, encoding only the frames not
        held yet that have image tokens past the resume point.

        Returns:
            (the embeddings of ``ids[resume:]``, built per chunk as the prefill reads them, keys, resume
            point, frames encoded).
        """
        import torch  # lazy: torch (optional, heavy)

        loaded = self.loaded
        if self._copy_stream is not None:  # the slots' background copies land before this step reads a slot
            torch.cuda.current_stream(loaded.device).wait_stream(self._copy_stream)
        spans = image_token_runs(ids, loaded.image_token_id)  # per image: (first position, tokens)
        if len(spans) != len(images):
            raise ValueError(f"the prompt holds {len(spans)} run(s) of image tokens but {len(images)} image(s)")
        serials = [self._serial(pixels) for pixels, _tiling in images]
        keys = list(ids)  # text tokens: their id; image rows: frame serial and row
        for (start, n), serial in zip(spans, serials, strict=True):
            keys[start : start + n] = [IMAGE_KEY_BASE + (serial << 20) + row for row in range(n)]
        resume = self.decoder.state.resume_point(keys)
        live = set(serials)  # keep only what the prompt still shows
        self._embeds = {s: e for s, e in self._embeds.items() if s in live}
        self._frames = {k: v for k, v in self._frames.items() if v[1] in live}
        needed = [i for i, (start, n) in enumerate(spans) if start + n > resume]
        todo = [i for i in needed if serials[i] not in self._embeds]
        fresh: dict[int, torch.Tensor] = {}  # serial -> this step's last encoded frame, still on the GPU
        for i in todo:  # one frame at a time: the vision tower's activations are those of one frame
            t0 = time.perf_counter()
            tiles = runtime.tile_images(loaded, [images[i]])
            sync(loaded.device)
            t1 = time.perf_counter()
            encoded = runtime.encode_tiles(loaded, tiles)[: images[i][1].tokens]
            del tiles
            last = i == todo[-1]
            if not last:
                self._embeds[serials[i]] = self._hold(encoded)
                del encoded
            sync(loaded.device)
            timings["preprocess"] = timings.get("preprocess", 0.0) + (t1 - t0) * 1000.0
            timings["vision"] = timings.get("vision", 0.0) + (time.perf_counter() - t1) * 1000.0
            if last:  # the prefill reads it from the GPU; its host copy is made meanwhile, for later steps
                self._embeds[serials[i]] = self._hold(encoded, background=True)
                fresh[serials[i]] = encoded
        timings.setdefault("preprocess", 0.0)
        timings.setdefault("vision", 0.0)
        rows = [fresh.get(serials[i], self._embeds[serials[i]])[max(0, resume - spans[i][0]) :] for i in needed]
        embeds = runtime.PromptEmbeddings(loaded, ids[resume:], rows)
        return embeds, keys, resume, len(todo)


__all__ = ["IMAGE_KEY_BASE", "SNAPSHOT_SLOTS", "StaticEngine", "planned_decoder", "snapshot_positions",
           "static_cache_tokens"]
