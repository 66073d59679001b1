"""Vision encoding, prompt embedding, prefill and greedy (optionally grammar-constrained) decoding.

Plain functions over a :class:`~holodesk.policy.holotron.loader.LoadedHolotron`, in the gpt-fast
style: ``encode_images`` -> ``embed_prompt`` -> ``prefill`` -> ``decode``. The model's own modules do
all the math (transformers' RADIO, pixel shuffle + projector of ``NemotronH_Omni_Reasoning_V3``,
NemotronH with its hybrid cache); this module only wires them for tiled v2 images.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from holodesk.errors import PolicyError
from holodesk.policy.holotron.tiling import preprocess_pixels

if TYPE_CHECKING:
    import numpy as np
    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron

VISION_BATCH_TILES = 16
"""Tiles sent through the vision tower at once (bounds activation memory for many screenshots)."""


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class EncodedImages:
    """Projected image embeddings for the prompt.

    Attributes:
        embeds: ``(total_image_tokens, lm_hidden)`` in the LM's embedding dtype, on the model device.
        token_counts: image-context tokens per image (256 x tiles), prompt order.
        grids: (cols, rows) per image; tiles: tiles per image (thumbnail included).
    """

    embeds: torch.Tensor
    token_counts: list[int]
    grids: list[tuple[int, int]]
    tiles: list[int]


def tile_images(loaded: LoadedHolotron, images: Sequence[np.ndarray[Any, Any]]) -> tuple[
    torch.Tensor, list[tuple[int, int]], list[int]
]:
    """Tile every image with the checkpoint's settings, on the model's GPU when it has one.

    Returns:
        (tiles float32 ``(n_tiles, 3, S, S)`` on the model's CUDA device, else the CPU; grids; tiles per
        image).
    """
    import torch

    info = loaded.info
    device = loaded.device if getattr(loaded.device, "type", "cpu") == "cuda" else None
    all_tiles, grids, counts = [], [], []
    for pixels in images:
        tiles, grid = preprocess_pixels(
            pixels,
            mean=loaded.mean,
            std=loaded.std,
            max_tiles=info.max_tiles,
            tile_size=info.tile_size,
            use_thumbnail=info.use_thumbnail,
            device=device,
        )
        all_tiles.append(tiles)
        grids.append(grid)
        counts.append(int(tiles.shape[0]))
    if not all_tiles:
        size = info.tile_size
        return torch.zeros(0, 3, size, size), grids, counts
    return torch.cat(all_tiles), grids, counts


def encode_tiles(loaded: LoadedHolotron, tiles: torch.Tensor) -> torch.Tensor:
    """RADIO features -> pixel shuffle -> ``mlp1`` for normalised tiles.

    Args:
        tiles: float ``(n_tiles, 3, S, S)``, already normalised.
    Returns:
        ``(n_tiles * tokens_per_tile, lm_hidden)`` on the model device (projector dtype).
    """
    import torch

    model = loaded.model
    vision = model.vision_model
    vision_dtype = next(vision.parameters()).dtype
    side = loaded.info.tile_size // loaded.info.patch_size
    out = []
    with torch.inference_mode():
        for start in range(0, int(tiles.shape[0]), VISION_BATCH_TILES):
            batch = tiles[start : start + VISION_BATCH_TILES].to(loaded.device, vision_dtype)
            features = vision(batch).features  # (b, side*side, vit_hidden), prefix tokens dropped
            projected = model.project_vision_features(features, side, side)  # (b, tokens, lm_hidden)
            out.append(projected.reshape(-1, projected.shape[-1]))
    if not out:
        hidden = int(model.config.text_config.hidden_size)
        return torch.zeros(0, hidden, device=loaded.device)
    return torch.cat(out)


def encode_images(loaded: LoadedHolotron, images: Sequence[np.ndarray[Any, Any]]) -> EncodedImages:
    """Tile and encode images (RGB uint8 ``(h, w, 3)`` each) into LM embeddings."""
    tiles, grids, counts = tile_images(loaded, images)
    embeds = encode_tiles(loaded, tiles)
    tokens = [c * loaded.info.tokens_per_tile for c in counts]
    return EncodedImages(embeds=embeds, token_counts=tokens, grids=grids, tiles=counts)


def embed_prompt(loaded: LoadedHolotron, input_ids: Sequence[int], image_embeds: torch.Tensor) -> torch.Tensor:
    """LM input embeddings with the ``<image>`` positions replaced, in order, by ``image_embeds``.

    Returns:
        ``(1, len(input_ids), lm_hidden)`` on the model device.
    Raises:
        PolicyError: when the number of ``<image>`` tokens differs from the number of embeddings.
    """
    import torch

    model = loaded.model
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=loaded.device)
    with torch.inference_mode():
        embeds = model.get_input_embeddings()(ids)
        mask = ids[0] == loaded.image_token_id
        n = int(mask.sum())
        if n != int(image_embeds.shape[0]):
            raise PolicyError(f"the prompt has {n} image tokens but {int(image_embeds.shape[0])} image embeddings")
        if n:
            embeds[0, mask] = image_embeds.to(embeds.dtype)
    return embeds


def full_logits(loaded: LoadedHolotron, input_ids: Sequence[int], images: Sequence[np.ndarray[Any, Any]]) -> Any:
    """Logits for every prompt position (float32 ``(len(input_ids), vocab)``), for tests and checks."""
    import torch

    encoded = encode_images(loaded, images)
    embeds = embed_prompt(loaded, input_ids, encoded.embeds)
    with torch.inference_mode():
        out = loaded.model.language_model(inputs_embeds=embeds, use_cache=False)
    return out.logits[0].float()


def cap_strings(schema: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """A copy of ``schema`` where every string allows at most ``max_chars`` characters.

    Only narrows the schema (an existing smaller ``maxLength`` is kept, ``minLength`` above the cap
    raises), so every instance of the result is an instance of ``schema`` and still parses. Used so a
    reply always fits the token budget (a model wandering inside a free string is cut by the grammar).

    Raises:
        ValueError: when ``max_chars`` < 1 or below a string's ``minLength``.
    """
    import copy

    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            types = node.get("type")
            fixed = "const" in node or "enum" in node  # its values already bound the length
            if not fixed and (types == "string" or (isinstance(types, list) and "string" in types)):
                if int(node.get("minLength", 0)) > max_chars:
                    raise ValueError(f"a string needs at least {node['minLength']} characters > {max_chars}")
                node["maxLength"] = min(int(node.get("maxLength", max_chars)), max_chars)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    out = copy.deepcopy(schema)
    visit(out)
    return out


_BAD_SECOND: dict[int, tuple[int, int]] = {0xE0: (0x80, 0x9F), 0xED: (0xA0, 0xBF), 0xF0: (0x80, 0x8F),
                                           0xF4: (0x90, 0xBF)}
"""UTF-8 lead byte -> the range of second bytes that makes the sequence invalid: overlong (E0, F0), a
surrogate (ED), above U+10FFFF (F4) (Unicode 15, Table 3-7)."""


def _utf8_pairs_valid(data: bytes) -> bool:
    """False when ``data`` holds a byte that never occurs in UTF-8 (C0, C1, F5..FF) or a lead byte followed
    by a second byte in its :data:`_BAD_SECOND` range. (Incomplete sequences at either end are fine: a
    token may hold part of a character.)"""
    for i, byte in enumerate(data):
        if byte in (0xC0, 0xC1) or byte >= 0xF5:
            return False
        bad = _BAD_SECOND.get(byte)
        if bad is not None and i + 1 < len(data) and bad[0] <= data[i + 1] <= bad[1]:
            return False
    return True


class Constraint:
    """JSON-schema constraint with xgrammar: a compiled grammar and a fresh matcher per reply.

    xgrammar (mlc-ai) compiles the schema once for the tokenizer; each step fills a bitmask of the
    allowed next tokens, applied to the logits in place. The reply is compact JSON (no free
    whitespace), so no token holding a raw control byte (0x00-0x1f) is ever needed; such tokens are
    masked as well, because xgrammar 0.2.8's rule for strings with ``minLength``/``maxLength`` admits
    raw control characters, which JSON (and the protocol's parser) rejects. That same rule admits no
    escape sequences, so bounded strings (the ``type`` text) cannot contain ``"`` or ``\\`` while
    constrained.
    """

    def __init__(self, loaded: LoadedHolotron, schema: dict[str, Any]) -> None:
        try:
            import xgrammar as xgr
        except ImportError:
            raise PolicyError(
                "constrained decoding needs xgrammar, which is not installed",
                hint="pip install 'holodesk[local]', or turn constrained decoding off.",
            ) from None
        self._xgr = xgr
        vocab_size = int(loaded.model.config.text_config.vocab_size)
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(
            loaded.tokenizer, vocab_size=vocab_size, stop_token_ids=list(loaded.eos_ids)
        )
        compiler = xgr.GrammarCompiler(info)
        self.compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        self.matcher: Any = None
        self.bitmask: Any = None
        import torch

        stops = set(loaded.eos_ids)
        ban = torch.zeros(vocab_size, dtype=torch.bool)
        # Byte-level tokens can spell UTF-8 that is not valid: xgrammar 0.2.8 accepts a surrogate encoded
        # in three bytes (ED A0..BF xx) as one character of a string, which decodes to three U+FFFD (seen
        # with the tiny checkpoint: a capped string then came out longer than its maxLength). Tokens
        # holding an invalid sequence are masked always; a token that continues the previous token's
        # lead byte into an invalid second byte is masked after that token (Unicode Table 3-7).
        starts_bad: dict[int, Any] = {lead: torch.zeros(vocab_size, dtype=torch.bool) for lead in _BAD_SECOND}
        self._ends_with_lead: dict[int, int] = {}
        for token_id, piece in enumerate(info.decoded_vocab[:vocab_size]):
            if token_id in stops or not piece:
                continue
            data = bytes(piece)
            if min(data) < 0x20 or not _utf8_pairs_valid(data):
                ban[token_id] = True
                continue
            for lead, (low, high) in _BAD_SECOND.items():
                if low <= data[0] <= high:
                    starts_bad[lead][token_id] = True
            if data[-1] in _BAD_SECOND:
                self._ends_with_lead[token_id] = data[-1]
        self._ban_cpu = ban
        self._ban: Any = None
        self._starts_bad_cpu = starts_bad
        self._starts_bad: dict[int, Any] = {}
        self._last: int | None = None

    def start(self) -> None:
        """Begin a new reply."""
        self.matcher = self._xgr.GrammarMatcher(self.compiled)
        self.bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
        self._last = None

    def mask(self, logits: torch.Tensor) -> None:
        """Set disallowed tokens of ``logits`` (float ``(vocab,)``) to -inf, in place."""
        self.matcher.fill_next_token_bitmask(self.bitmask)
        self._xgr.apply_token_bitmask_inplace(logits.view(1, -1), self.bitmask.to(logits.device))
        if self._ban is None or self._ban.device != logits.device:
            self._ban = self._ban_cpu.to(logits.device)
            self._starts_bad = {lead: m.to(logits.device) for lead, m in self._starts_bad_cpu.items()}
        logits.masked_fill_(self._ban[: logits.shape[-1]], float("-inf"))
        lead = self._ends_with_lead.get(self._last) if self._last is not None else None
        if lead is not None:
            logits.masked_fill_(self._starts_bad[lead][: logits.shape[-1]], float("-inf"))

    def accept(self, token: int) -> bool:
        """Advance the matcher; False when the token breaks the grammar."""
        self._last = int(token)
        return bool(self.matcher.accept_token(int(token)))

    def finished(self) -> bool:
        """True once the JSON object is complete and a stop token was accepted."""
        return bool(self.matcher.is_terminated())


@dataclass
class Generation:
    """Result of one reply.

    Attributes:
        token_ids: generated ids, stop token excluded.
        text: decoded reply (special tokens kept, so ``</think>`` stays visible).
        stop_reason: ``"eos"``, ``"max_new_tokens"`` or ``"grammar"`` (constraint rejected a token).
        prompt_tokens: prompt length in tokens.
        timings_ms: prefill, decode (ms).
    """

    token_ids: list[int]
    text: str
    stop_reason: str
    prompt_tokens: int
    timings_ms: dict[str, float] = field(default_factory=dict)


def decode_loop(
    loaded: LoadedHolotron,
    first_logits: torch.Tensor,
    step: Callable[[int], torch.Tensor],
    *,
    max_new_tokens: int,
    constraint: Constraint | None,
    reasoning: bool,
    max_think_tokens: int,
) -> tuple[list[int], str]:
    """Greedy token choice shared by every decoder: thinking, the grammar mask, stop rules.

    Args:
        first_logits: float ``(vocab,)`` logits after the prompt (modified in place by the mask).
        step: ``step(token)`` feeds one chosen token to the decoder and returns the next float
            ``(vocab,)`` logits (may be a buffer the next call overwrites). It is not called for the
            stop token. The grammar's bitmask for the next token is filled on the CPU while the
            decoder's kernels for ``step`` still run on the GPU (``step`` must not synchronise).
    Returns:
        (generated ids without the stop token, stop reason ``"eos"`` | ``"max_new_tokens"`` |
        ``"grammar"``).
    """
    import torch

    eos = set(loaded.eos_ids)
    thinking = reasoning and loaded.think_end_id is not None
    if constraint is not None:
        constraint.start()
    tokens: list[int] = []
    logits = first_logits
    think_tokens = 0
    for _ in range(max_new_tokens):
        if thinking and think_tokens >= max_think_tokens:
            token = int(loaded.think_end_id)  # type: ignore[arg-type]
        else:
            if constraint is not None and not thinking:
                constraint.mask(logits)
            token = int(torch.argmax(logits).item())
        if thinking:
            think_tokens += 1
            if token == loaded.think_end_id:
                thinking = False
            elif token in eos:
                return tokens, "eos"
        elif constraint is not None:
            if not constraint.accept(token):
                return tokens, "grammar"
            if token in eos or constraint.finished():
                return tokens, "eos"
        elif token in eos:
            return tokens, "eos"
        tokens.append(token)
        logits = step(token)
    return tokens, "max_new_tokens"


def generate(
    loaded: LoadedHolotron,
    embeds: torch.Tensor,
    *,
    max_new_tokens: int = 1024,
    constraint: Constraint | None = None,
    reasoning: bool = False,
    max_think_tokens: int = 1024,
) -> Generation:
    """Greedy decoding with transformers' own forward and cache (the ``stock`` decoder).

    With ``constraint`` the reply is forced to match the JSON schema; with ``reasoning`` the model
    first thinks freely until ``</think>`` (forced after ``max_think_tokens``) and only the part after
    it is constrained (:func:`decode_loop`).

    Args:
        embeds: ``(1, prompt_len, hidden)`` from :func:`embed_prompt`.
    Returns:
        :class:`Generation`.
    Raises:
        torch.OutOfMemoryError: passed through so the caller can retry with fewer images.
    """
    import torch

    model = loaded.model.language_model
    device = loaded.device
    timings: dict[str, float] = {}
    with torch.inference_mode():
        _sync(device)
        t0 = time.perf_counter()
        out = model(inputs_embeds=embeds, use_cache=True, logits_to_keep=1)
        state = {"cache": out.past_key_values}
        logits = out.logits[0, -1].float()
        _sync(device)
        t1 = time.perf_counter()
        timings["prefill"] = (t1 - t0) * 1000.0

        def step(token: int) -> torch.Tensor:
            ids = torch.tensor([[token]], dtype=torch.long, device=device)
            nxt = model(input_ids=ids, past_key_values=state["cache"], use_cache=True, logits_to_keep=1)
            state["cache"] = nxt.past_key_values
            return nxt.logits[0, -1].float()

        tokens, stop_reason = decode_loop(
            loaded, logits, step, max_new_tokens=max_new_tokens, constraint=constraint, reasoning=reasoning,
            max_think_tokens=max_think_tokens,
        )
        _sync(device)
        timings["decode"] = (time.perf_counter() - t1) * 1000.0
    text = loaded.tokenizer.decode(tokens, skip_special_tokens=False)
    return Generation(
        token_ids=tokens,
        text=str(text),
        stop_reason=stop_reason,
        prompt_tokens=int(embeds.shape[1]),
        timings_ms=timings,
    )
