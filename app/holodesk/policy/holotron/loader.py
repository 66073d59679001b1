"""Resolve a checkpoint source (folder or hub repo id) and load Holotron through transformers' classes.

No remote code is ever executed: the model class is transformers' ``NemotronH_Omni_Reasoning_V3``,
the config is translated by :mod:`holodesk.policy.holotron.hf_config`, the tokenizer is loaded with
``AutoTokenizer`` (``trust_remote_code`` left False).

One layout choice is made here, at load, and never changed afterwards: each attention layer's q/k/v
projection weights live in one contiguous ``[q + k + v, hidden]`` buffer (:func:`lay_out_qkv`). The
modules stay transformers' own ``nn.Linear`` with ordinary Parameters (views of that buffer), so the stock
forward computes exactly what it would on separate tensors, and the static decoder finds the buffer
(``blocks.fused_qkv_weight``) and projects q, k and v with one matrix-vector product per token.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.checkpoint import (
    CheckpointInfo,
    ProgressFn,
    read_checkpoint,
    read_normalisation,
    resolve_image_token,
)
from holodesk.policy.holotron.hf_config import check_load_report, key_namers, translate_config
from holodesk.policy.holotron.kernels import kernel_report, prepare_kernels
from holodesk.policy.holotron.layout import lay_out_qkv, qkv_groups, skip_unit_layer_scales
from holodesk.policy.source import no_gpu_advice, resolve_source

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

QUANTIZATIONS = (None, "8bit", "4bit")
BUILT_BESIDE_READ = "preparing the decoder while the weights are read"
"""The progress stage a load with ``background`` ends on (the model built, its weights still being read); a
load that waits for them ends on ``"ready"``."""
KEEP_UNQUANTIZED = ["vision_model", "multi_modal_projector", "lm_head"]
"""Modules bitsandbytes leaves in bf16: the vision tower, the projector and the output head."""


@dataclass
class LoadedHolotron:
    """A loaded model with everything the runtime needs next to it.

    Attributes:
        model: transformers ``NemotronH_Omni_Reasoning_V3`` in eval mode.
        tokenizer: the checkpoint's tokenizer (transformers ``PreTrainedTokenizerBase``).
        info: what was read from the checkpoint files.
        mean, std: per-channel tile normalisation; norm_source: where it was read.
        image_token_id, img_start_id, img_end_id: ``<image>``, ``<img>``, ``</img>`` ids.
        eos_ids: token ids that end a reply (``<SPECIAL_12>`` for Holotron).
        think_end_id: id of ``</think>`` when the tokenizer has it as one token, else None.
        device: torch device of the model; dtype: torch dtype of the vision tower / unquantized weights.
        quantization: None, "8bit" or "4bit".
        notes: the checkpoint files' disagreements and the values used (:attr:`CheckpointInfo.notes`,
            the ``<image>`` id check), then the tolerated load-report differences.
        kernels: :func:`~holodesk.policy.holotron.kernels.kernel_report` at load time.
        load_seconds: wall time of the load (download excluded) to the last weight on the device (with
            ``background``: known once :meth:`finish_weights` has run).
        weights_reader: how the weights reached the device, in words (:func:`_start_reading`; shown by
            ``holodesk doctor`` through the engine's record).
        reading: the weights still being read (:class:`.stream.Reading`) after a load with ``background``, until
            :meth:`finish_weights`; None once they are complete.
        load_started: ``time.perf_counter()`` at the load's start.
        weights_ready_at: ``time.time()`` when the last weight reached the device (the read's last reader ended;
            without a read, when :meth:`finish_weights` ran); None before :meth:`finish_weights`.
    """

    model: Any
    tokenizer: Any
    info: CheckpointInfo
    mean: tuple[float, ...]
    std: tuple[float, ...]
    norm_source: str
    image_token_id: int
    img_start_id: int
    img_end_id: int
    eos_ids: tuple[int, ...]
    think_end_id: int | None
    device: torch.device
    dtype: torch.dtype
    quantization: str | None
    notes: list[str] = field(default_factory=list)
    kernels: dict[str, Any] = field(default_factory=dict)
    load_seconds: float = 0.0
    weights_reader: str = ""
    reading: Any = None
    load_started: float = 0.0
    weights_ready_at: float | None = None

    def finish_weights(self) -> bool:
        """Wait for the weights still being read (:attr:`reading`), then make the change to the model that reads
        their values (:func:`skip_unit_layer_scales`); the first call does it, later ones return at once.
        Whatever was computed from the weights before is stale when this returns True (the static engine
        re-derives its part: ``StaticEngine.weights_written``).

        Returns:
            whether a read was waited for (the weights changed since :func:`load_holotron` returned).
        Raises:
            ModelLoadError: the read failed (a file unreadable or truncated, out of device memory, ...).
        """
        if self.weights_ready_at is not None:
            return False
        reading, waited = self.reading, self.reading is not None
        ready_at = time.time()
        if reading is not None:
            try:
                seconds = reading.wait()
            except ModelLoadError as exc:
                if (advised := _with_repair_advice(exc, self.info.folder)) is None:
                    raise
                raise advised from exc
            self.reading = None
            self.weights_reader += f", {seconds:.2f} s"
            self.load_seconds = reading.ended_at - self.load_started
            ready_at = reading.ended_wall
            log.info("Holotron weights read onto %s: %s", self.device, self.weights_reader)
        skip_unit_layer_scales(self.model)
        self.weights_ready_at = ready_at
        return waited


_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32",
           "float16": "float16", "fp16": "float16"}
"""``dtype`` argument -> torch dtype name."""


def _torch_dtype(name: str) -> torch.dtype:
    import torch  # lazy: torch (optional, heavy)

    if name not in _DTYPES:
        raise ModelLoadError(f"unknown dtype {name!r}; use bfloat16 or float32")
    dtype: torch.dtype = getattr(torch, _DTYPES[name])
    return dtype


def _quantization_config(quantization: str | None, device: torch.device) -> Any:
    """transformers' ``BitsAndBytesConfig`` for ``"8bit"`` / ``"4bit"`` (nf4), None for None.

    Raises:
        ModelLoadError: an unknown value, no CUDA GPU, or bitsandbytes not installed.
    """
    if quantization is None:
        return None
    if quantization not in QUANTIZATIONS:
        raise ModelLoadError(f"unknown quantization {quantization!r}; use None, '8bit' or '4bit'")
    # lazy: kept (GPU runtime, not re-checked this session); standard library: could move to the top
    import importlib.util

    import torch  # lazy: torch (optional, heavy)

    if device.type != "cuda" or not torch.cuda.is_available():
        raise ModelLoadError(
            f"{quantization} weights need an NVIDIA GPU (bitsandbytes runs on CUDA only)",
            hint="Load without quantization, or on a machine with a CUDA GPU.",
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError(
            f"{quantization} weights need bitsandbytes, which is not installed",
            hint="pip install 'holodesk[quant]' (bitsandbytes >= 0.45).",
        )
    from transformers import BitsAndBytesConfig  # lazy: transformers (optional, heavy)

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=list(KEEP_UNQUANTIZED))
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                              bnb_4bit_use_double_quant=False, llm_int8_skip_modules=list(KEEP_UNQUANTIZED))


def _token_id(vocab: dict[str, int], token: str, folder: Path) -> int:
    if token not in vocab:
        raise ModelLoadError(
            f"the tokenizer in {folder} has no {token} token; cannot mark images in the prompt",
            hint="The tokenizer files do not belong to a Nemotron Nano 2 VL checkpoint.",
        )
    return int(vocab[token])


def load_tokenizer(folder: Path) -> Any:
    """The checkpoint's tokenizer through ``AutoTokenizer`` (no remote code).

    Raises:
        ModelLoadError: when it cannot be loaded.
    """
    # AutoTokenizer reads config.json to find a tokenizer class; AutoConfig does not know the published
    # model_type (NemotronH_Nano_VL_V2, which the loader translates itself), so transformers falls back to
    # the base config class and warns that a NemotronH_Nano_VL_V2 checkpoint instantiates a model of type
    # ``""``, on every load. Nothing is instantiated from that config: its warnings are held back here.
    config_log = logging.getLogger("transformers.configuration_utils")
    level = config_log.level
    config_log.setLevel(logging.ERROR)
    try:
        from transformers import AutoTokenizer  # lazy: transformers (optional, heavy)

        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:
        raise ModelLoadError(f"the tokenizer in {folder} could not be loaded: {exc}") from exc
    finally:
        config_log.setLevel(level)


def _read_facts(info: CheckpointInfo) -> tuple[CheckpointInfo, Any, dict[str, int], list[str]]:
    """The checkpoint's files (``info``, :func:`.checkpoint.read_checkpoint`) with its tokenizer and the
    tokenizer's vocabulary (token -> id: read once, as ``get_vocab`` builds a new dict of every token at each
    call, 0.13-0.17 s of CPU with 131,072 ids), the ``<image>`` id settled between them, and every disagreement
    between the files (notes)."""
    folder = info.folder
    tokenizer = load_tokenizer(folder)
    vocab: dict[str, int] = tokenizer.get_vocab()
    info, token_notes = resolve_image_token(info, vocab)
    return info, tokenizer, vocab, [*info.notes, *token_notes]


def inspect_checkpoint(source: str | Path) -> dict[str, Any]:
    """What ``holodesk doctor`` shows about a checkpoint, without loading any weights.

    Reads config.json, preprocessor_config.json, the safetensors headers and the tokenizer's
    vocabulary of a local folder or an already cached hub repo (nothing is downloaded).

    Returns:
        ``{"folder", "language model", "tiles", "image token", "notes"}``: the block counts in words,
        the tile settings in use, the ``<image>`` id in use, and every disagreement between the files
        (a list; ``["none: the files agree"]`` when there is none).
    Raises:
        ModelLoadError: for a missing, uncached or unreadable checkpoint.
    """
    folder = resolve_source(source, download=False)
    info, _tokenizer, _vocab, notes = _read_facts(read_checkpoint(folder))
    return {
        "folder": str(folder),
        "language model": info.blocks_in_words(),
        "tiles": f"{info.tile_size} px, up to {info.max_tiles}"
                 + (" + thumbnail" if info.use_thumbnail else ", no thumbnail")
                 + (f", mean/std from {info.norm_from}" if info.norm_from else ""),
        "image token": info.image_token_id,
        "notes": notes or ["none: the files agree"],
    }


def load_holotron(
    source: str | Path,
    *,
    dtype: str = "bfloat16",
    quantization: str | None = None,
    device: str | None = None,
    progress: ProgressFn | None = None,
    attn_implementation: str | None = "sdpa",
    cancel: threading.Event | None = None,
    background: bool = False,
) -> LoadedHolotron:
    """Load a Holotron checkpoint (folder or hub repo id) onto ``device``.

    The page-locked reader (:func:`_start_reading`: bf16 onto CUDA) starts as soon as the safetensors headers
    are read; the tokenizer is read and transformers builds the model on the tensors being filled (it takes
    them as the parameters without reading them; a load that finds a parameter copied waits for the read and
    builds the model again, logged). With ``background`` the load returns with the read still running
    (:attr:`LoadedHolotron.reading`), so that the caller can build what needs only the weights' addresses
    (the static engine's graphs); nothing may use their values before :meth:`LoadedHolotron.finish_weights`
    returns. Without it, or where transformers reads the weights itself (quantised, CPU), the load finishes
    before it returns.

    Args:
        source: checkpoint folder, or ``owner/name`` on the Hugging Face hub.
        dtype: ``"bfloat16"`` (default) or ``"float32"`` (tests).
        quantization: None, ``"8bit"`` or ``"4bit"`` (bitsandbytes; LM linears only, vision tower,
            projector and lm_head stay in ``dtype``).
        device: torch device string; default ``"cuda"`` when available, else ``"cpu"``.
        progress: optional ``progress(stage, fraction)`` callback.
        attn_implementation: transformers attention backend (``"sdpa"``, ``"eager"``, ...).
        cancel: stops a hub download when set (:class:`~holodesk.download.errors.DownloadCancelled`).
        background: return before the weights are all read (above).
    Returns:
        :class:`LoadedHolotron`.
    Raises:
        ModelLoadError: for a missing/unreadable checkpoint, an untranslatable config, keys missing or
            unexpected beyond the parts v2 lacks (named in the message), a missing tokenizer token, or
            quantization asked for without CUDA/bitsandbytes.
    """
    prepare_kernels()  # before transformers imports NemotronH (selective_scan_cuda placeholder)
    try:  # lazy (here and below): torch and transformers (optional, heavy); importing them is the check
        import torch
        from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3  # noqa: F401 - checked here
    except ImportError as exc:
        raise ModelLoadError(
            f"the local runtime needs torch and transformers >= 5.23 ({exc})",
            hint="pip install 'holodesk[local]'." + no_gpu_advice("Holotron-12B"),
        ) from None

    target = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device cuda was asked for but torch sees no CUDA GPU")
    # without a GPU a hub repo is only taken from the cache: GBs would download for an unusable model
    folder = resolve_source(source, progress=progress, download=target.type == "cuda", cancel=cancel)
    try:
        return _load_folder(folder, dtype=dtype, quantization=quantization, target=target, progress=progress,
                            attn_implementation=attn_implementation, background=background)
    except ModelLoadError as exc:
        if (advised := _with_repair_advice(exc, folder)) is None:
            raise
        raise advised from exc


def _with_repair_advice(exc: ModelLoadError, folder: Path) -> ModelLoadError | None:
    """A copy of ``exc`` with how to check and fetch the files again added to its hint when ``folder`` is a
    hub-cache snapshot (:func:`~holodesk.download.cache.cache_repair_advice`); None when there is no such advice or
    the hint has it already (a load that waits for its read raises from ``finish_weights`` inside
    :func:`load_holotron`: the advice once)."""
    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.download.cache import cache_repair_advice

    repair = cache_repair_advice(folder)
    if not repair or repair in exc.hint:
        return None
    return ModelLoadError(exc.message, hint=f"{exc.hint} {repair}".strip())


def _load_folder(folder: Path, *, dtype: str, quantization: str | None, target: torch.device,
                 progress: ProgressFn | None, attn_implementation: str | None, background: bool) -> LoadedHolotron:
    """The part of :func:`load_holotron` after the checkpoint folder is known (same arguments)."""
    started = time.perf_counter()
    if progress is not None:
        progress("reading checkpoint", None)
    info = read_checkpoint(folder)
    torch_dtype = _torch_dtype(dtype)
    quant_config = _quantization_config(quantization, target)
    reading, reader = _start_reading(info, quant_config, target)
    try:
        loaded = _build(info, reading, reader, torch_dtype=torch_dtype, quantization=quantization,
                        quant_config=quant_config, target=target, progress=progress,
                        attn_implementation=attn_implementation)
    except BaseException:
        if reading is not None:
            reading.cancel()
        raise
    loaded.load_started, loaded.load_seconds = started, time.perf_counter() - started
    if not background or reading is None:  # nothing read beside: finished now
        loaded.finish_weights()
    if progress is not None:
        progress("ready" if loaded.reading is None else BUILT_BESIDE_READ, 1.0 if loaded.reading is None else None)
    return loaded


def _build(info: CheckpointInfo, reading: Any, reader: str, *, torch_dtype: torch.dtype, quantization: str | None,
           quant_config: Any, target: torch.device, progress: ProgressFn | None,
           attn_implementation: str | None) -> LoadedHolotron:
    """The model on the weights of ``reading`` (:class:`.stream.Reading`, maybe still running; None: transformers
    reads them), with the tokenizer and every fact the runtime needs: a :class:`LoadedHolotron` whose
    :attr:`~LoadedHolotron.reading` is ``reading``, not finished."""
    folder = info.folder
    info, tokenizer, vocab, checkpoint_notes = _read_facts(info)
    for note in checkpoint_notes:  # the files disagree: say which value is used (also in holodesk doctor)
        log.warning("Holotron checkpoint %s: %s", folder, note)
    log.info("Holotron language model: %s", info.blocks_in_words())
    config = translate_config(info, attn_implementation=attn_implementation)
    mean, std, norm_source = read_normalisation(info)
    if progress is not None:
        progress("loading weights", None)
    if reading is not None and any(t.is_floating_point() and t.dtype != torch_dtype for t in reading.tensors.values()):
        log.info("Holotron load: the checkpoint stores weights in another dtype than %s, which transformers converts "
                 "(copies) as it builds the model: the model is built after the read", torch_dtype)
        reading.wait()
    pending = reading is not None and not reading.done()
    model, loading_info = _from_pretrained(folder, config, torch_dtype, quant_config, target, attn_implementation,
                                           reading)
    forward_names, expected_name = key_namers(model, sorted(info.shapes))  # the model class's mapping: kept below
    if pending and (copied := _copied_keys(model, reading.tensors, loading_info, forward_names)):
        log.warning("Holotron load: transformers copied %d tensor(s) of the weights being read (%s), so their values "
                    "may be incomplete: the model is built again after the read (the slower path)", len(copied),
                    ", ".join(copied[:3]))
        del model
        reading.wait()
        model, loading_info = _from_pretrained(folder, config, torch_dtype, quant_config, target, attn_implementation,
                                               reading)
    report_notes = check_load_report(loading_info, forward_names, expected_name)
    model.eval()
    if target.type == "cpu":
        model.to(target)
    lay_out_qkv(model, before_copy=None if reading is None else reading.wait)
    image_token_id = info.image_token_id
    assert image_token_id is not None  # resolve_image_token set it or raised
    lm_vocab = int(config.text_config.vocab_size)
    if image_token_id >= lm_vocab:
        raise ModelLoadError(f"img_context_token_id {image_token_id} is outside the {lm_vocab}-row vocabulary")
    report = _kernels_for(target)
    for note in report_notes:
        log.info("Holotron load: %s", note)
    return LoadedHolotron(
        model=model, tokenizer=tokenizer, info=info, mean=mean, std=std, norm_source=norm_source,
        image_token_id=image_token_id, img_start_id=_token_id(vocab, "<img>", folder),
        img_end_id=_token_id(vocab, "</img>", folder), eos_ids=_eos_ids(model, tokenizer, vocab, folder),
        think_end_id=vocab.get("</think>"), device=target, dtype=torch_dtype, quantization=quantization,
        notes=checkpoint_notes + report_notes, kernels=report, weights_reader=reader, reading=reading,
    )


def _start_reading(info: CheckpointInfo, quant_config: Any, target: torch.device) -> tuple[Any, str]:
    """The page-locked reading of ``info``'s weight files onto ``target`` (:func:`.stream.start_reading`, the
    q/k/v projections of each attention layer in one buffer: :func:`qkv_groups`), started, and how the weights
    reach the device in words; ``(None, words)`` where transformers reads them instead: quantised loads
    (bitsandbytes quantises each tensor as it arrives, so the whole bf16 checkpoint is never on the device),
    the CPU, and a dtype the reader does not map (logged as a warning: the slower path).

    Raises:
        ModelLoadError: a weight file that is not a readable safetensors file, or the reader's allocations failing
            (e.g. out of device memory).
    """
    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.policy.holotron import stream

    reader = "transformers (pageable host copies)"
    if quant_config is not None:
        return None, reader + ": bitsandbytes quantises each tensor as it is read"
    if target.type != "cuda":
        return None, f"transformers, onto {target}"
    if not info.weight_files:
        return None, reader
    if why_not := stream.readable(info.weight_files):
        reader += f", the slower path: {why_not}, which the page-locked reader does not map"
        log.warning("Holotron weights read by %s", reader)
        return None, reader
    try:
        reading = stream.start_reading(info.weight_files, target, groups=qkv_groups(info))
    except ModelLoadError:
        raise
    except Exception as exc:  # e.g. out of device memory: worded as transformers' own failure
        raise ModelLoadError(f"loading the weights from {info.folder} failed: {type(exc).__name__}: {exc}") from exc
    return reading, f"page-locked, {stream.READERS} readers"


def _copied_keys(model: Any, tensors: dict[str, torch.Tensor], loading_info: dict[str, Any],
                 checkpoint_key: dict[str, str]) -> list[str]:
    """The keys of ``tensors`` (the state dict given to transformers) that ``model`` does not hold in place: no
    parameter or buffer of it starts at their first byte (transformers made its own copy; a fused tensor it
    splits into views keeps its first view there), the keys transformers
    reported as unexpected (not loaded at all; named natively, ``checkpoint_key`` maps such a name to the
    checkpoint's, :func:`.hf_config.key_namers`) left out; sorted."""
    held = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
    unexpected = {checkpoint_key.get(k, k) for k in loading_info.get("unexpected_keys") or ()}
    return sorted(k for k, t in tensors.items() if k not in unexpected and t.data_ptr() not in held)


def _from_pretrained(folder: Path, config: Any, dtype: torch.dtype, quant_config: Any, target: torch.device,
                     attn_implementation: str | None, reading: Any = None) -> tuple[Any, dict[str, Any]]:
    """``NemotronH_Omni_Reasoning_V3.from_pretrained`` with the load report (size mismatches reported,
    not raised, so the error can name them) and transformers' own report table held back (Holodesk checks
    the same report with :func:`check_load_report` and names the keys itself).

    With ``reading`` (:class:`.stream.Reading`) its tensors go to ``from_pretrained(state_dict=...)`` with the
    folder's generation config (they may still be being filled: transformers takes them as the parameters);
    otherwise transformers reads ``folder`` itself.

    Raises:
        ModelLoadError: when transformers fails to load the weights.
    """
    # lazy (here and below): transformers (optional, heavy)
    from transformers import GenerationConfig
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3
    from transformers.utils import logging as hf_logging

    kwargs: dict[str, Any] = {"config": config, "dtype": dtype, "output_loading_info": True,
                              "local_files_only": True, "trust_remote_code": False, "ignore_mismatched_sizes": True}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if quant_config is not None:
        kwargs["quantization_config"] = quant_config
    if target.type != "cpu":
        kwargs["device_map"] = {"": str(target)}
    source: str | None = str(folder)
    if reading is not None:
        kwargs["state_dict"] = reading.tensors
        if (folder / "generation_config.json").is_file():
            kwargs["generation_config"] = GenerationConfig.from_pretrained(str(folder), local_files_only=True)
        source = None
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        result: Any = NemotronH_Omni_Reasoning_V3.from_pretrained(source, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"loading the weights from {folder} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    model, loading_info = result
    return model, loading_info


def _eos_ids(model: Any, tokenizer: Any, vocab: dict[str, int], folder: Path) -> tuple[int, ...]:
    """Token ids that end a reply: generation_config's, the tokenizer's, ``<SPECIAL_12>`` (deduplicated).

    Raises:
        ModelLoadError: when there is none.
    """
    eos: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for candidate in (gen_eos, tokenizer.eos_token_id, vocab.get("<SPECIAL_12>")):
        for tok in candidate if isinstance(candidate, list) else [candidate]:
            if isinstance(tok, int) and tok not in eos:
                eos.append(tok)
    if not eos:
        raise ModelLoadError(f"no end-of-turn token found for {folder} (generation_config / tokenizer)")
    return tuple(eos)


def _kernels_for(target: torch.device) -> dict[str, Any]:
    """:func:`kernel_report` for a model on ``target``, logged (a warning on CUDA without the fast path).

    Raises:
        ModelLoadError: off CUDA while transformers sends the Mamba-2 layers to GPU-only kernels.
    """
    report = kernel_report()
    if target.type != "cuda" and any(f["live"] for f in report["functions"].values()):
        raise ModelLoadError(
            f"cannot run Holotron on {target}: mamba-ssm / causal-conv1d are installed, so transformers "
            "sends the Mamba-2 layers to their Triton/CUDA kernels, which cannot take CPU tensors",
            hint="Load on a CUDA device, or uninstall mamba-ssm and causal-conv1d for CPU use.",
        )
    log.log(logging.WARNING if target.type == "cuda" and not report["fast_path"] else logging.INFO,
            "Holotron: %s", report["summary"])
    return report
