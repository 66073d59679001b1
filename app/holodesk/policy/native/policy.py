"""NativePolicy: H Company models run with transformers' own classes (Frame + task + history -> Proposal).

One step: the protocol builds the contract's chat (:meth:`~holodesk.policy.contract.AgentLoopProtocol.build_messages`),
the checkpoint's processor renders it with the model's chat template and turns the screenshots into the
model's image features (:mod:`holodesk.policy.native.processor`), ``model.generate`` decodes with
:class:`ReplyRule` as its logits processor (the same xgrammar :class:`~holodesk.policy.holotron.runtime.Constraint`
as the Holotron runtime, the thinking budget, temperature and top_p applied after the grammar's mask, the timings),
greedily or sampling from a generator seeded per step (:class:`~holodesk.policy.models.Sampling`), and the protocol
parses the reply.

Reasoning is switched as the family declares in the model table (:attr:`holodesk.policy.models.Family.reasoning`):
the chat-template variable ``thinking`` for Holo2, ``enable_thinking`` for Holo3 / Holo3.1 and Holotron-3-Nano; no
``/think`` line is written into their system prompt.

Cache and compilation are transformers': ``cache_implementation="static"`` (a preallocated cache sized to
a multiple of :data:`CACHE_STEP` tokens, so that steps of similar length reuse it), and on CUDA the
automatic ``torch.compile`` of the decode step (CUDA graphs) that ``generate`` applies with a static cache,
for the classes that declare they compile (``_can_compile_fullgraph``). On the CPU everything runs eager.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from holodesk.errors import ModelLoadError
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.local_core import LOCALIZATION_MAX_TOKENS, CheckpointLoading, LocalPolicy, Reply
from holodesk.policy.models import GREEDY, Sampling
from holodesk.policy.native.families import NEMOTRON_H_OMNI, Family, family_of, native_config, read_config

if TYPE_CHECKING:
    import torch

    from holodesk.policy.holotron.checkpoint import ProgressFn
    from holodesk.policy.holotron.runtime import Constraint

log = logging.getLogger(__name__)

CACHE_STEP = 2048
"""The static cache holds a multiple of this many tokens (prompt + reply budget, rounded up)."""


@dataclass
class LoadedNative:
    """A checkpoint loaded with transformers' native class for its family.

    Attributes:
        model: the ``...ForConditionalGeneration`` model (``AutoModelForImageTextToText``), eval mode.
        processor: the checkpoint's processor (:func:`~holodesk.policy.native.processor.load_processor`).
        tokenizer: the checkpoint's tokenizer.
        family: the checkpoint's :class:`~holodesk.policy.native.families.Family`.
        folder: the checkpoint folder.
        eos_ids: token ids that end a reply (generation_config's, the tokenizer's end of turn).
        pad_id: padding id for ``generate`` (the tokenizer's, else the first stop token).
        think_end_id: id of ``</think>`` when the tokenizer has it as one token, else None.
        device, dtype: where and in which dtype the weights are.
        processor_kind: how the processor was built (``"AutoProcessor"`` or the image-only path and why).
        notes: what the user should know about this load, in plain words.
        load_seconds: wall time of the load.
    """

    model: Any
    processor: Any
    tokenizer: Any
    family: Family
    folder: Path
    eos_ids: tuple[int, ...]
    pad_id: int
    think_end_id: int | None
    device: torch.device
    dtype: torch.dtype
    processor_kind: str
    notes: list[str] = field(default_factory=list)
    load_seconds: float = 0.0


def _torch_dtype(name: str) -> torch.dtype:
    import torch  # lazy: torch (optional, heavy)

    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
    if name not in dtypes:
        raise ModelLoadError(f"dtype must be one of {', '.join(dtypes)}, got {name!r}")
    return dtypes[name]


def _stop_ids(model: Any, tokenizer: Any, folder: Path) -> tuple[int, ...]:
    """generation_config's ``eos_token_id`` (int or list) and the tokenizer's, deduplicated.

    Raises:
        ModelLoadError: when there is none.
    """
    ids: list[int] = []
    for candidate in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer.eos_token_id):
        for token in candidate if isinstance(candidate, list) else [candidate]:
            if isinstance(token, int) and token not in ids:
                ids.append(token)
    if not ids:
        raise ModelLoadError(f"no end-of-turn token found for {folder} (generation_config.json / tokenizer)")
    return tuple(ids)


def _check_mamba_kernels(target: torch.device) -> None:
    """Before a Nemotron-H model is built: make mamba-ssm's Triton kernels usable
    (:func:`~holodesk.policy.holotron.kernels.prepare_kernels`) and log which Mamba-2 path transformers takes.

    Raises:
        ModelLoadError: off CUDA while mamba-ssm is installed (transformers would send CPU tensors to its
            GPU-only kernels).
    """
    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.policy.holotron.kernels import kernel_report, prepare_kernels

    prepare_kernels()
    report = kernel_report()
    if target.type != "cuda" and any(f["live"] for f in report["functions"].values()):
        raise ModelLoadError(
            f"cannot run a Nemotron-H model on {target}: mamba-ssm / causal-conv1d are installed, so transformers "
            "sends the Mamba-2 layers to their Triton/CUDA kernels, which cannot take CPU tensors",
            hint="Load on a CUDA device, or uninstall mamba-ssm and causal-conv1d for CPU use.")
    log.log(logging.WARNING if target.type == "cuda" and not report["fast_path"] else logging.INFO,
            "Nemotron-H Mamba-2 kernels: %s", report["summary"])


def load_native(
    source: str | Path,
    *,
    dtype: str = "bfloat16",
    device: str | None = None,
    progress: ProgressFn | None = None,
    attn_implementation: str | None = "sdpa",
    cancel: threading.Event | None = None,
) -> LoadedNative:
    """Load a checkpoint of a native family (folder or hub repo id) with ``AutoModelForImageTextToText``.

    Args:
        source: checkpoint folder, or ``owner/name`` on the Hugging Face hub (downloaded only with a CUDA
            GPU; without one only the cache is used).
        dtype: ``"bfloat16"`` (default), ``"float16"`` or ``"float32"`` (tests).
        device: torch device string; default ``"cuda"`` when available, else ``"cpu"``.
        progress: optional ``progress(stage, fraction)``; cancel: stops a hub download.
        attn_implementation: transformers attention backend.
    Returns:
        :class:`LoadedNative`.
    Raises:
        ModelLoadError: unreadable or unsupported checkpoint (:func:`~holodesk.policy.native.families.read_family`),
            a Holotron-12B checkpoint (it runs on :class:`~holodesk.policy.holotron.HolotronPolicy`), weights
            missing or unexpected for the family's class (named), no processor, no stop token.
    """
    try:
        import torch  # lazy: torch (optional, heavy)
        from transformers import AutoModelForImageTextToText  # lazy: transformers (optional, heavy)
    except ImportError as exc:
        raise ModelLoadError(f"the local runtime needs torch and transformers >= 5.23 ({exc})",
                             hint="pip install 'holodesk[local]'.") from None
    # lazy (here and below): kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.policy.native.processor import load_processor
    from holodesk.policy.source import resolve_source

    target = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device cuda was asked for but torch sees no CUDA GPU")
    folder = resolve_source(source, progress=progress, download=target.type == "cuda", cancel=cancel)
    raw_config = read_config(folder)
    family = family_of(raw_config, str(folder / "config.json"))
    if family.runtime != "native":
        raise ModelLoadError(f"{folder} is a {family.models} checkpoint, which runs on Holodesk's Holotron runtime",
                             hint="Load it with holodesk.policy.local.load_local_policy.")
    started = time.perf_counter()
    if family is NEMOTRON_H_OMNI:
        _check_mamba_kernels(target)
    if progress is not None:
        progress("loading weights", None)
    kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype), "local_files_only": True, "trust_remote_code": False,
                              "output_loading_info": True}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if target.type != "cpu":
        kwargs["device_map"] = {"": str(target)}
    translated = native_config(raw_config, family, str(folder / "config.json"))
    if translated is not None:  # the published remote-code layout, read by transformers' own config class
        kwargs["config"] = translated
        log.info("%s: config.json in the published layout %r, read as transformers' %s", folder,
                 raw_config.get("model_type"), family.key)
    try:
        result: Any = AutoModelForImageTextToText.from_pretrained(str(folder), **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"loading {folder} with transformers' {family.architecture} classes failed: "
                             f"{type(exc).__name__}: {exc}") from exc
    model, info = result
    ignored = set(getattr(model, "_keys_to_ignore_on_load_missing", None) or [])
    missing = [k for k in info.get("missing_keys", []) if not any(re.search(p, k) for p in ignored)]
    problems = [f"{len(missing)} missing ({', '.join(sorted(missing)[:4])})"] if missing else []
    if info.get("unexpected_keys"):
        problems.append(f"{len(info['unexpected_keys'])} unexpected ({', '.join(sorted(info['unexpected_keys'])[:4])})")
    if info.get("mismatched_keys"):
        problems.append(f"{len(info['mismatched_keys'])} of another shape")
    if problems:
        raise ModelLoadError(f"the weights in {folder} do not fit {type(model).__name__}: " + "; ".join(problems),
                             hint="The config and the weights come from different models, or the download is "
                                  "incomplete.")
    model.eval()
    processor, processor_kind = load_processor(folder, family, translated)
    tokenizer = getattr(processor, "tokenizer", processor)
    eos_ids = _stop_ids(model, tokenizer, folder)
    pad = tokenizer.pad_token_id
    vocab = tokenizer.get_vocab()
    notes = [] if processor_kind == "AutoProcessor" else [f"processor: {processor_kind}"]
    loaded = LoadedNative(
        model=model, processor=processor, tokenizer=tokenizer, family=family, folder=folder, eos_ids=eos_ids,
        pad_id=int(pad) if isinstance(pad, int) else eos_ids[0], think_end_id=vocab.get("</think>"), device=target,
        dtype=kwargs["dtype"], processor_kind=processor_kind, notes=notes,
        load_seconds=time.perf_counter() - started)
    log.info("%s loaded from %s on %s in %.1f s (%s)", family.models, folder, target, loaded.load_seconds,
             type(model).__name__)
    if progress is not None:
        progress("ready", 1.0)
    return loaded


class ReplyRule:
    """The logits processor of one reply (transformers' ``LogitsProcessor`` call signature).

    The choice itself stays ``generate``'s (argmax, or a draw from the softmax when sampling); this rule,
    called once per generated token with the logits, applies the same stop rules as the Holotron runtime's
    ``decode_loop``: while thinking (``reasoning`` and a ``</think>`` token) the logits are free until
    ``</think>``, which is forced after ``max_think_tokens``; after it the grammar masks every token the reply
    schema does not allow (``constraint``); a token the grammar rejects ends the reply (a stop token is
    forced, ``stop_reason`` ``"grammar"``). When ``sampling`` is not greedy, the masked logits are then divided
    by its temperature and cut to its top_p (so the draw never leaves what the grammar allows). It also notes
    when the first logits arrived (the end of the prefill) and the last.

    Attributes:
        first_at, last_at: ``time.perf_counter()`` at the first and the last call (None before the first).
        calls: number of calls (tokens chosen); stop_reason: ``"grammar"`` when the grammar ended the reply.
    """

    def __init__(self, constraint: Constraint | None, *, reasoning: bool, think_end_id: int | None,
                 max_think_tokens: int, eos_ids: tuple[int, ...], device: torch.device,
                 sampling: Sampling = GREEDY) -> None:
        self.constraint = constraint
        self.sampling = sampling
        self.thinking = reasoning and think_end_id is not None
        self.think_end_id = think_end_id
        self.max_think_tokens = max_think_tokens
        self.eos_id = eos_ids[0]
        self.device = device
        self.think_tokens = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.calls = 0
        self.stop_reason: str | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Mask ``scores`` (float ``(1, vocab)``) in place for the next token after ``input_ids`` and return it."""
        if self.first_at is None:
            if self.device.type == "cuda":
                import torch  # lazy: torch (optional, heavy)

                torch.cuda.synchronize(self.device)
            self.first_at = time.perf_counter()
            if self.constraint is not None:
                self.constraint.start()
        else:
            self._advance(int(input_ids[0, -1]))
        self.calls += 1
        row = scores[0]
        if self.thinking:
            if self.think_tokens >= self.max_think_tokens:
                self._force(row, int(self.think_end_id))  # type: ignore[arg-type]  # thinking needs the id
        elif self.stop_reason == "grammar":
            self._force(row, self.eos_id)
        elif self.constraint is not None:
            self.constraint.mask(row)
        if not self.sampling.greedy:
            self._warp(row)
        self.last_at = time.perf_counter()
        return scores

    def _warp(self, row: torch.Tensor) -> None:
        """Divide ``row`` (masked logits) by the temperature and keep the smallest set of tokens whose
        probability reaches top_p (at least the most likely one), in place."""
        import torch  # lazy: torch (optional, heavy)

        row.div_(self.sampling.temperature)
        if self.sampling.top_p >= 1.0:
            return
        ordered, order = torch.sort(row, descending=True)
        mass = torch.softmax(ordered.float(), dim=-1).cumsum(dim=-1)
        cut = (mass - torch.softmax(ordered.float(), dim=-1)) >= self.sampling.top_p  # mass before this token
        row[order[cut]] = float("-inf")

    @staticmethod
    def _force(row: torch.Tensor, token: int) -> None:
        """Leave only ``token`` possible in ``row``."""
        row.fill_(float("-inf"))
        row[token] = 0.0

    def _advance(self, token: int) -> None:
        """Take the token ``generate`` chose after the previous call."""
        if self.thinking:
            self.think_tokens += 1
            if token == self.think_end_id:
                self.thinking = False
            return
        if self.constraint is not None and self.stop_reason is None and not self.constraint.accept(token):
            self.stop_reason = "grammar"


class NativePolicy(LocalPolicy):
    """An H Company model run in this process with transformers' native class for its family (no remote code):
    Holo2 (``qwen3_vl``, ``qwen3_vl_moe``), Holo3 / Holo3.1 (``qwen3_5``, ``qwen3_5_moe``), Holotron-3-Nano
    (``nemotron_h_omni`` with MoE blocks). Same contract, parser and :class:`~holodesk.policy.base.Proposal` as
    :class:`~holodesk.policy.holotron.HolotronPolicy` (module docstring: one step, cache, compilation).

    Attributes:
        name: ``"native-local"``.
        loaded: the model, processor and checkpoint facts.
        protocol: the action protocol.
        static_cache: ``cache_implementation="static"`` is used.
        compiled: ``generate`` compiles the decode step (CUDA and a class that declares it compiles).
    """

    name = "native-local"
    kind = "native"

    def __init__(self, loaded: LoadedNative, options: GenerationOptions | None = None) -> None:
        """Wrap a loaded checkpoint; ``options``: how replies are generated (default: greedy, reasoning off,
        :class:`~holodesk.policy.generation.GenerationOptions`'s defaults).

        Raises:
            SettingsError: an unknown protocol name.
        """
        super().__init__(options if options is not None else GenerationOptions())
        self.loaded = loaded
        self.switch = loaded.family.reasoning
        self.static_cache = True
        self.compiled = loaded.device.type == "cuda" and bool(getattr(loaded.model, "_can_compile_fullgraph", False))
        log.info("native policy: %s", self.describe())

    @property
    def runtime_label(self) -> str:
        """The family's models in words (e.g. ``"Holo2 (e.g. Holo2-8B)"``), as messages name them."""
        return self.loaded.family.models

    @classmethod
    def load(
        cls,
        source: str | Path,
        options: GenerationOptions | None = None,
        **loading: Unpack[CheckpointLoading],
    ) -> NativePolicy:
        """Load a checkpoint (:func:`load_native`) and return a ready policy (the reply grammar compiled).

        ``loading``: dtype, device, progress, attn_implementation, cancel
        (:class:`~holodesk.policy.local_core.CheckpointLoading`), as :func:`load_native` takes them. Raises
        ModelLoadError (:func:`load_native`), PolicyError (xgrammar missing with constrained decoding), SettingsError
        (an unknown protocol).
        """
        loaded = load_native(source, **loading)
        policy = cls(loaded, options)
        policy.ready()
        return policy

    def describe(self) -> dict[str, Any]:
        """The runtime in facts: family, class, device, dtype, processor, cache, compilation."""
        loaded = self.loaded
        return {"family": loaded.family.key, "models": loaded.family.models, "class": type(loaded.model).__name__,
                "device": str(loaded.device), "dtype": str(loaded.dtype).removeprefix("torch."),
                "processor": loaded.processor_kind, "cache": "static" if self.static_cache else "dynamic",
                "compiled": self.compiled}

    # ------------------------------------------------------------------------------------------ steps
    def compile_constraint(self, schema: dict[str, Any], max_string_chars: int | None) -> Constraint:
        """The Holotron runtime's xgrammar :class:`~holodesk.policy.holotron.runtime.Constraint` for ``schema`` on
        this checkpoint's tokenizer."""
        # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
        from holodesk.policy.holotron.runtime import Constraint, cap_strings

        return Constraint(self.loaded, schema if max_string_chars is None else cap_strings(schema, max_string_chars))

    def prepare(self, observation: Observation, *, max_images: int | None = None) -> dict[str, Any]:
        """The model inputs of ``observation``: the contract's chat with at most ``max_images`` screenshots,
        rendered by the checkpoint's chat template and processor.

        Returns:
            dict with ``inputs`` (the processor's tensors on the model's device: ``input_ids``,
            ``attention_mask``, the image features), ``prompt_text`` (one placeholder per image) and
            ``images`` (number of screenshots sent as images).
        """
        # lazy: kept (GPU runtime, not re-checked this session); a core dependency: could move to the top
        from PIL import Image

        images_kept = self.options.max_images if max_images is None else max_images
        messages = self.protocol.build_messages(observation, max_images=images_kept, reasoning=self.options.reasoning,
                                                reasoning_line=self.switch.prompt_line)
        images: list[Any] = []
        chat: list[dict[str, Any]] = []
        for message in messages:
            parts = []
            for part in message["content"]:
                if part["type"] == "image":
                    images.append(Image.fromarray(part["frame"].pixels))
                    parts.append({"type": "image"})
                else:
                    parts.append({"type": "text", "text": part["text"]})
            chat.append({"role": message["role"], "content": parts})
        prompt_text, moved = self._model_inputs(chat, images, self.options.reasoning)
        return {"inputs": moved, "prompt_text": prompt_text, "images": len(images)}

    def _model_inputs(self, chat: list[dict[str, Any]], images: list[Any], reasoning: bool
                      ) -> tuple[str, dict[str, Any]]:
        """``chat`` rendered by the checkpoint's chat template (with the reasoning switch set to ``reasoning``)
        and, with ``images`` (PIL images, one per image part), turned into the model's tensors on its device.

        Returns:
            (the prompt text, the processor's tensors: ``input_ids``, ``attention_mask``, image features).
        """
        processor = self.loaded.processor
        prompt_text = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                                    **self.switch.template_kwargs(reasoning))
        inputs = processor(text=[prompt_text], images=images or None, return_tensors="pt")
        moved = {k: (v.to(self.loaded.device) if hasattr(v, "to") else v) for k, v in dict(inputs).items()}
        if "pixel_values" in moved and moved["pixel_values"].is_floating_point():
            moved["pixel_values"] = moved["pixel_values"].to(self.loaded.dtype)
        return prompt_text, moved

    def localization_reply(self, image: Any, target: str, constraint: Constraint | None) -> str:
        """``image`` and the localization prompt in one user turn, greedy, uncompiled
        (:meth:`LocalPolicy.localize <holodesk.policy.local_core.LocalPolicy.localize>`)."""
        # lazy (here and below): torch and transformers (optional, heavy); PIL (a core dependency) kept with them
        # (GPU runtime, not re-checked this session)
        import torch
        from PIL import Image
        from transformers import LogitsProcessorList

        loaded = self.loaded
        chat = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": self.protocol.localization_prompt(target)}]}]
        _prompt, inputs = self._model_inputs(chat, [Image.fromarray(image)], False)
        rule = ReplyRule(constraint, reasoning=False, think_end_id=loaded.think_end_id, max_think_tokens=0,
                         eos_ids=loaded.eos_ids, device=loaded.device)
        prompt_tokens = int(inputs["input_ids"].shape[1])
        with torch.inference_mode():
            output = loaded.model.generate(**inputs, max_new_tokens=LOCALIZATION_MAX_TOKENS, do_sample=False,
                                           eos_token_id=list(loaded.eos_ids), pad_token_id=loaded.pad_id,
                                           logits_processor=LogitsProcessorList([rule]), disable_compile=True)
        tokens = [int(t) for t in output[0, prompt_tokens:] if int(t) not in loaded.eos_ids]
        return str(loaded.tokenizer.decode(tokens, skip_special_tokens=True))

    def generate(self, observation: Observation, *,
                 max_images: int | None = None) -> tuple[str, dict[str, float], dict[str, Any]]:
        """One reply to ``observation``, unparsed (the bench measures it; :meth:`propose` parses it).

        Returns:
            (raw text, ``timings_ms`` as :meth:`propose`'s, details: ``images``, ``prompt_tokens``,
            ``generated_tokens``, ``stop_reason``, ``ttfa_ms``, ``decode_ms_per_token`` and :meth:`describe`).
        Raises:
            torch and transformers errors as they come (``propose`` wraps them in PolicyError).
        """
        import torch  # lazy: torch (optional, heavy)

        t0 = time.perf_counter()
        prepared = self.prepare(observation, max_images=max_images)
        inputs = prepared["inputs"]
        prompt_tokens = int(inputs["input_ids"].shape[1])
        opts = self.options
        budget = opts.token_budget
        loaded = self.loaded
        rule = ReplyRule(self.reply_constraint() if opts.constrained_decoding else None, reasoning=opts.reasoning,
                         think_end_id=loaded.think_end_id, max_think_tokens=opts.think_budget,
                         eos_ids=loaded.eos_ids, device=loaded.device, sampling=opts.sampling)
        sampled = not opts.sampling.greedy
        options: dict[str, Any] = {
            "max_new_tokens": budget, "do_sample": sampled, "eos_token_id": list(loaded.eos_ids),
            "pad_token_id": loaded.pad_id, "logits_processor": [rule], "disable_compile": not self.compiled,
        }
        if sampled:  # ReplyRule warps after the mask; generate's own warpers stay neutral
            options.update(temperature=1.0, top_p=1.0, top_k=0, min_p=None)
            torch.manual_seed(opts.sampling.step_seed(len(observation.history)))
        watch = self.thought_watch()
        if watch is not None:  # the thought handed out while it is generated
            options["streamer"] = ThoughtStreamer(watch)
        if self.static_cache:
            options["cache_implementation"] = "static"
            options["max_cache_len"] = math.ceil((prompt_tokens + budget) / CACHE_STEP) * CACHE_STEP
        t1 = time.perf_counter()
        from transformers import LogitsProcessorList  # lazy: transformers (optional, heavy)

        options["logits_processor"] = LogitsProcessorList(options["logits_processor"])
        with torch.inference_mode():
            output = loaded.model.generate(**inputs, **options)
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)
        t2 = time.perf_counter()
        tokens = [int(t) for t in output[0, prompt_tokens:]]
        if rule.stop_reason == "grammar":
            stop_reason = "grammar"
        elif tokens and tokens[-1] in loaded.eos_ids:
            stop_reason = "eos"
        else:
            stop_reason = "max_new_tokens"
        reply = tokens[:-1] if stop_reason in ("eos", "grammar") and tokens and tokens[-1] in loaded.eos_ids else tokens
        text = str(loaded.tokenizer.decode(reply, skip_special_tokens=False))
        first = rule.first_at if rule.first_at is not None else t2
        timings = {"preprocess": (t1 - t0) * 1000.0, "prefill": (first - t1) * 1000.0, "decode": (t2 - first) * 1000.0}
        steps = max(len(tokens) - 1, 0)  # forwards after the prefill (its logits chose the first token)
        details = {
            "images": prepared["images"], "prompt_tokens": prompt_tokens, "generated_tokens": len(reply),
            "stop_reason": stop_reason, "ttfa_ms": timings["preprocess"] + timings["prefill"],
            "decode_ms_per_token": (timings["decode"] / steps) if steps else None, **self.describe(),
        }
        return text, timings, details

    def reply(self, observation: Observation, max_images: int, notices: list[str]) -> Reply:
        """:meth:`generate` with at most ``max_images`` screenshots, with the load's notes (``load_notes``)."""
        text, timings, details = self.generate(observation, max_images=max_images)
        if self.loaded.notes:
            details["load_notes"] = list(self.loaded.notes)
        return Reply(text, timings, details)


class ThoughtStreamer:
    """transformers' streamer interface (``generate(streamer=...)``: ``put(ids)`` with the prompt first, then each
    new token, ``end()``) feeding a policy's thought watcher
    (:meth:`~holodesk.policy.local_core.LocalPolicy.thought_watch`) the reply's ids so far. ``generate`` reads
    every token back to the host anyway (its stop criteria); the watcher detokenizes only when a piece is due.

    Args:
        watch: called with the reply's ids so far after each new token.
    """

    def __init__(self, watch: Callable[[Sequence[int]], None]) -> None:
        self.watch = watch
        self.ids: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        """The prompt's ids (first call, skipped) or the next token's, as a tensor."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.ids.extend(int(t) for t in value.reshape(-1).tolist())
        self.watch(self.ids)

    def end(self) -> None:
        """The reply is complete (the policy hands out the rest of the thought when it reads it)."""


__all__ = ["CACHE_STEP", "LoadedNative", "NativePolicy", "ReplyRule", "ThoughtStreamer", "load_native"]
