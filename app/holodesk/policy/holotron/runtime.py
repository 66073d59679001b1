"""What both decoders share, and the stock decoder itself.

Plain functions over a :class:`~holodesk.policy.holotron.loader.LoadedHolotron`: :func:`tile_images` ->
:func:`encode_tiles` (transformers' RADIO, pixel shuffle + projector) -> :func:`embed_prompt` (the one
image-embedding merge) -> a decoder -> :func:`decode_loop` (:class:`Constraint`'s grammar mask and the
tokens it forces, the choice after the mask: greedy or :class:`Sampler`'s, stop rules). :func:`generate` is
the ``stock`` decoder: transformers' own forward and hybrid cache.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from holodesk.errors import PolicyError
from holodesk.policy.holotron.tiling import Tiling, preprocess_pixels
from holodesk.policy.holotron.vocab import vocab_facts

if TYPE_CHECKING:
    import numpy as np
    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron

VISION_BATCH_TILES = 16
"""Tiles sent through the vision tower at once (bounds activation memory for many screenshots)."""

PromptImage = tuple["np.ndarray[Any, Any]", Tiling]
"""One image of a prompt: RGB uint8 ``(h, w, 3)`` pixels and their :class:`Tiling` (computed once, when the
prompt's token counts were)."""


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA), so that host timings measure it; no-op on the CPU."""
    import torch  # lazy: torch (optional, heavy)

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tile_images(loaded: LoadedHolotron, images: Sequence[PromptImage]) -> torch.Tensor:
    """Normalised tiles of every image (:func:`~holodesk.policy.holotron.tiling.preprocess_pixels`), on
    the model's GPU when it has one.

    Returns:
        float32 ``(sum of tiles, 3, S, S)`` on the model's CUDA device, else the CPU, prompt order.
    """
    import torch  # lazy: torch (optional, heavy)

    size = loaded.info.tile_size
    device = loaded.device if loaded.device.type == "cuda" else None
    tiles = [preprocess_pixels(pixels, tiling, mean=loaded.mean, std=loaded.std, tile_size=size, device=device)
             for pixels, tiling in images]
    return torch.cat(tiles) if tiles else torch.zeros(0, 3, size, size)


def encode_tiles(loaded: LoadedHolotron, tiles: torch.Tensor) -> torch.Tensor:
    """RADIO features -> pixel shuffle -> ``mlp1`` for normalised tiles.

    Args:
        tiles: float ``(n_tiles, 3, S, S)``, already normalised.
    Returns:
        ``(n_tiles * tokens_per_tile, lm_hidden)`` on the model device (projector dtype).
    """
    import torch  # lazy: torch (optional, heavy)

    model = loaded.model
    vision_dtype = next(model.vision_model.parameters()).dtype
    side = loaded.info.tile_size // loaded.info.patch_size
    out = []
    with torch.inference_mode():
        for start in range(0, int(tiles.shape[0]), VISION_BATCH_TILES):
            batch = tiles[start : start + VISION_BATCH_TILES].to(loaded.device, vision_dtype)
            features = model.vision_model(batch).features  # (b, side*side, vit_hidden), prefix tokens dropped
            projected = model.project_vision_features(features, side, side)  # (b, tokens, lm_hidden)
            out.append(projected.reshape(-1, projected.shape[-1]))
    if not out:
        return torch.zeros(0, int(model.config.text_config.hidden_size), device=loaded.device)
    return torch.cat(out)


def embed_prompt(loaded: LoadedHolotron, input_ids: Sequence[int], image_rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """LM input embeddings of ``input_ids`` with their ``<image>`` positions replaced, in order, by the
    rows of ``image_rows`` (the one image-embedding merge: the static engine and the stock decoder both
    call it, the engine with the part of the prompt after its resume point).

    Nothing here waits for the GPU: the image positions are read from ``input_ids`` on the host, the ids
    go up from page-locked memory without blocking, and each run of ``<image>`` tokens is one copy into
    the embeddings (from page-locked host rows, a copy the GPU queues), so a prefill's next chunk is queued
    while the previous one still runs.

    Args:
        input_ids: token ids (a whole prompt or its tail).
        image_rows: ``(rows, lm_hidden)`` tensors whose rows, concatenated, are the embeddings of the
            ``<image>`` tokens in ``input_ids`` (on any device: they are copied to the model's).
    Returns:
        ``(1, len(input_ids), lm_hidden)`` on the model device, in the embedding dtype.
    Raises:
        PolicyError: when the number of ``<image>`` tokens differs from the number of rows.
    """
    import torch  # lazy: torch (optional, heavy)

    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.policy.holotron.prompt import image_token_runs

    ids = [int(t) for t in input_ids]
    runs = image_token_runs(ids, int(loaded.image_token_id))
    n, rows = sum(count for _, count in runs), sum(int(r.shape[0]) for r in image_rows)
    if n != rows:
        raise PolicyError(f"the prompt has {n} image tokens but {rows} image embeddings")
    host = torch.tensor([ids], dtype=torch.long)
    cuda = loaded.device.type == "cuda"
    with torch.inference_mode():
        embeds = loaded.model.get_input_embeddings()(
            host.pin_memory().to(loaded.device, non_blocking=True) if cuda else host.to(loaded.device))
        pieces = iter(image_rows)
        piece, used = None, 0
        for start, count in runs:
            done = 0
            while done < count:
                while piece is None or used == int(piece.shape[0]):
                    piece, used = next(pieces), 0
                take = min(count - done, int(piece.shape[0]) - used)
                embeds[0, start + done : start + done + take].copy_(piece[used : used + take], non_blocking=True)
                done, used = done + take, used + take
    return embeds


class PromptEmbeddings:
    """:func:`embed_prompt`'s result read one slice at a time (``shape``, ``[:, a:b]``, as the
    ``(1, len(input_ids), lm_hidden)`` tensor), merged when the prefill reads each chunk: only a chunk's
    embeddings are on the GPU at once, not the prompt's (0.18 GiB for 8 screenshots of Holotron-12B).
    Arguments as :func:`embed_prompt`'s; raises PolicyError when image tokens and rows differ in number."""

    def __init__(self, loaded: LoadedHolotron, input_ids: Sequence[int], image_rows: Sequence[torch.Tensor]) -> None:
        self.loaded = loaded
        self.ids = [int(t) for t in input_ids]
        self.rows = list(image_rows)
        image_id = int(loaded.image_token_id)
        #: image tokens before position p, for p in [0, len(ids)]
        self._images_before = list(itertools.accumulate((t == image_id for t in self.ids), initial=0))
        rows = sum(int(r.shape[0]) for r in self.rows)
        if self._images_before[-1] != rows:
            raise PolicyError(f"the prompt has {self._images_before[-1]} image tokens but {rows} image embeddings")
        self.shape = (1, len(self.ids), int(loaded.model.get_input_embeddings().weight.shape[1]))

    def __getitem__(self, index: tuple[slice, slice]) -> torch.Tensor:
        """The embeddings ``(1, b - a, lm_hidden)`` of tokens ``[a, b)`` for ``index == (slice(None), slice(a, b))``."""
        span = index[1]
        a = span.start or 0
        b = len(self.ids) if span.stop is None else span.stop
        first, last = self._images_before[a], self._images_before[b]
        pieces, offset = [], 0
        for rows in self.rows:
            lo, hi = max(first - offset, 0), min(last - offset, int(rows.shape[0]))
            if lo < hi:
                pieces.append(rows[lo:hi])
            offset += int(rows.shape[0])
        return embed_prompt(self.loaded, self.ids[a:b], pieces)


def cap_strings(schema: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """A copy of ``schema`` where every string allows at most ``max_chars`` characters.

    Only narrows the schema (an existing smaller ``maxLength`` is kept, ``minLength`` above the cap
    raises), so every instance of the result is an instance of ``schema`` and still parses. Used so a
    reply always fits the token budget (a model wandering inside a free string is cut by the grammar).

    Raises:
        ValueError: when ``max_chars`` < 1 or below a string's ``minLength``.
    """
    import copy  # lazy: kept (GPU runtime, not re-checked this session); standard library: could move to the top

    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")

    def visit(node: object) -> None:
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


def object_root(schema: dict[str, Any]) -> bool:
    """Whether every reply ``schema`` allows is a JSON object: its root (through ``$ref`` into ``$defs``) has
    ``"type": "object"``, or is an ``anyOf`` / ``oneOf`` of such branches, or an ``allOf`` with one."""
    defs = schema.get("$defs") or schema.get("definitions") or {}

    def visit(node: object, depth: int) -> bool:
        if not isinstance(node, dict) or depth > 32:
            return False
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            return ref.startswith(("#/$defs/", "#/definitions/")) and visit(defs.get(name), depth + 1)
        if node.get("type") == "object":
            return True
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                return all(visit(b, depth + 1) for b in branches)
        branches = node.get("allOf")
        return isinstance(branches, list) and any(visit(b, depth + 1) for b in branches)

    return visit(schema, 0)


class DecodingTarget(Protocol):
    """What :class:`Constraint` reads of a loaded model (a :class:`~holodesk.policy.holotron.loader.LoadedHolotron`
    or a :class:`~holodesk.policy.native.policy.LoadedNative`): ``model.config.text_config.vocab_size`` (the
    logits' width), the tokenizer, the stop tokens and the device of the logits."""

    model: Any
    tokenizer: Any
    eos_ids: tuple[int, ...]
    device: torch.device


class Constraint:
    """JSON-schema constraint with xgrammar: a compiled grammar and a fresh matcher per reply.

    xgrammar (mlc-ai) compiles the schema once for the tokenizer; each step fills a bitmask of the
    allowed next tokens, applied to the logits in place. The reply is compact JSON (no free
    whitespace), so no token holding a raw control byte (0x00-0x1f) is ever needed; such tokens are
    masked as well, because xgrammar 0.2.8's rule for strings with ``minLength``/``maxLength`` admits
    raw control characters, which JSON (and the protocol's parser) rejects. That same rule admits no
    escape sequences, so bounded strings (the ``type`` text) cannot contain ``"`` or ``\\`` while
    constrained.

    Jump-forward (:meth:`forced_tokens`, :meth:`forced_stop`): what the grammar allows in one way only is
    taken from xgrammar (``GrammarMatcher.find_jump_forward_tokens``: the forced text as the longest
    vocabulary tokens, complete UTF-8 characters only, no special or stop token, the last token left out
    when a longer token extends it, so the model still chooses how forced text joins the free text after
    it) and from the bitmask (a complete reply that allows only stop tokens).

    Raises:
        PolicyError: xgrammar is not installed, or older than 0.2.9 (no jump-forward tokens).
    """

    def __init__(self, loaded: DecodingTarget, schema: dict[str, Any]) -> None:
        try:
            import xgrammar as xgr  # lazy: xgrammar (optional, heavy)
        except ImportError:
            raise PolicyError(
                "constrained decoding needs xgrammar, which is not installed",
                hint="pip install 'holodesk[local]', or turn constrained decoding off.",
            ) from None
        if not hasattr(xgr.GrammarMatcher, "find_jump_forward_tokens"):
            raise PolicyError(
                "constrained decoding needs xgrammar 0.2.9 or newer (jump-forward tokens)",
                hint="pip install -U 'xgrammar>=0.2.9', or turn constrained decoding off.",
            )
        self._xgr = xgr
        vocab_size = int(loaded.model.config.text_config.vocab_size)
        self.vocab_size = vocab_size
        # the tokenizer's facts (xgrammar's TokenizerInfo, the tokens masked besides the grammar): computed once
        # per tokenizer and kept (holodesk.policy.holotron.vocab)
        facts = vocab_facts(loaded.tokenizer, vocab_size, list(loaded.eos_ids))
        self.compiled = xgr.GrammarCompiler(facts.info).compile_json_schema(json.dumps(schema), any_whitespace=False)
        self.matcher: Any = None
        import torch  # lazy: torch (optional, heavy)

        stops = set(loaded.eos_ids)
        ban, starts_bad = facts.ban, facts.starts_bad  # tokens masked besides the grammar (VocabFacts)
        self._ends_with_lead = facts.ends_with_lead
        self._ban = ban.to(loaded.device)  # the logits of both decoders are on the model's device
        # the bitmask is filled on the host while the step's kernels run, then copied behind them without a
        # host wait: from page-locked memory into a device buffer; the next fill first waits for that copy
        # (``_copied``; it has landed by then when the token was read in between, as decode_loop does)
        host_mask = xgr.allocate_token_bitmask(1, vocab_size)
        cuda = self._ban.device.type == "cuda"
        self._host_mask = host_mask.pin_memory() if cuda else host_mask
        self._device_mask = host_mask.to(self._ban.device) if cuda else host_mask
        self._copied = torch.cuda.Event() if cuda else None
        self._starts_bad = {lead: m.to(loaded.device) for lead, m in starts_bad.items()}
        self._ban_host, self._starts_bad_host = ban, starts_bad  # for forced tokens, read without a device sync
        self._stops = frozenset(int(t) for t in stops)
        self.object_root = object_root(schema)
        self._tokenizer = loaded.tokenizer
        self._last: int | None = None

    def start(self) -> None:
        """Begin a new reply."""
        self.matcher = self._xgr.GrammarMatcher(self.compiled)
        self._last = None

    def mask(self, logits: torch.Tensor) -> None:
        """Set disallowed tokens of ``logits`` (float ``(vocab,)``, on the model's device) to -inf, in place;
        the work on the device is queued behind what produces ``logits``, with no host wait."""
        if self._copied is not None:
            self._copied.synchronize()  # the previous copy out of the page-locked buffer has run
        self.matcher.fill_next_token_bitmask(self._host_mask)
        if self._copied is not None:
            import torch  # lazy: torch (optional, heavy)

            self._device_mask.copy_(self._host_mask, non_blocking=True)
            self._copied.record(torch.cuda.current_stream(self._device_mask.device))
        self._xgr.apply_token_bitmask_inplace(logits.view(1, -1), self._device_mask)
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

    def forced_tokens(self, budget: int) -> list[int]:
        """Accept and return the tokens the grammar forces next, at most ``budget`` of them: xgrammar's
        jump-forward tokens (class docstring), stopping before any token :meth:`mask` would mask (a
        byte-level ban) or the matcher rejects; when they are all of the forced text but a last token that a
        longer one could extend, and that text completes the reply (nothing but a stop token may follow, so
        nothing can join it), its tokens from the tokenizer as well. Empty when the next token is the
        model's choice.

        Args:
            budget: tokens the reply may still take (``<= 0``: none).
        Returns:
            the accepted token ids, in order.
        """
        if budget <= 0:
            return []
        out: list[int] = []
        run = [int(t) for t in self.matcher.find_jump_forward_tokens()]
        for token in run[:budget]:
            if not self._allowed(token) or not self.matcher.accept_token(token):
                return out
            self._last = token
            out.append(token)
        rest = self.matcher.find_jump_forward_string() if len(out) == len(run) else ""
        if rest:
            closing = [int(t) for t in self._tokenizer.encode(rest, add_special_tokens=False)]
            trial = self.matcher.fork()
            if (len(out) + len(closing) <= budget and all(self._allowed(t) and trial.accept_token(t) for t in closing)
                    and self._stop_only(trial) is not None):
                for token in closing:
                    self.matcher.accept_token(token)
                    self._last = token
                out += closing
        return out

    def forced_stop(self) -> int | None:
        """A stop token when the reply is complete and the grammar allows nothing but stop tokens next
        (the model's choice there is a stop token whatever its logits), else None. Nothing is accepted."""
        return self._stop_only(self.matcher)

    def _allowed(self, token: int) -> bool:
        """Whether :meth:`mask` leaves ``token`` allowed as far as the byte-level rules go (after ``_last``)."""
        lead = self._ends_with_lead.get(self._last) if self._last is not None else None
        return 0 <= token < self.vocab_size and not bool(self._ban_host[token]) and not (
            lead is not None and bool(self._starts_bad_host[lead][token]))

    def _stop_only(self, matcher: Any) -> int | None:
        """The smallest stop token when ``matcher`` is complete and allows only stop tokens next, else None.

        With a root that is an object (:attr:`object_root`) a complete reply ends with its closing brace and
        nothing may follow (compact JSON, no free whitespace), so completion alone answers; otherwise the
        next-token bitmask is read. (Filling the bitmask of a complete reply checks the whole vocabulary:
        15-50 ms with 131,072 ids, seen on an H100 host, against 0.3 ms inside a reply.)"""
        if not matcher.is_completed() or matcher.is_terminated():
            return None
        if self.object_root and self._stops:
            return min(self._stops)
        import torch  # lazy: torch (optional, heavy)

        bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        allowed = torch.zeros(1, self.vocab_size)
        self._xgr.apply_token_bitmask_inplace(allowed, bitmask)
        ids = {int(t) for t in torch.isfinite(allowed[0]).nonzero().flatten().tolist()}
        return min(ids) if ids and ids <= self._stops else None


@dataclass
class Generation:
    """Result of one reply.

    Attributes:
        token_ids: generated ids, stop token excluded.
        text: decoded reply (special tokens kept, so ``</think>`` stays visible).
        stop_reason: ``"eos"``, ``"max_new_tokens"`` or ``"grammar"`` (constraint rejected a token).
        prompt_tokens: prompt length in tokens.
        timings_ms: preprocess (tiling), vision, prefill, decode (ms).
        model_steps: forward passes of the decoder after the prefill (:class:`Decoded`).
        forced_tokens: tokens of ``token_ids`` the grammar forced (jump-forward) rather than the model chose.
    """

    token_ids: list[int]
    text: str
    stop_reason: str
    prompt_tokens: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    model_steps: int = 0
    forced_tokens: int = 0


@dataclass
class Decoded:
    """What :func:`decode_loop` returns.

    Attributes:
        tokens: generated ids without the stop token.
        stop_reason: ``"eos"`` | ``"max_new_tokens"`` | ``"grammar"``.
        model_steps: forward passes made (``step`` calls plus ``forward`` calls); the first token's logits
            come from the prefill and are not counted.
        forced_tokens: tokens the grammar forced (:meth:`Constraint.forced_tokens`).
    """

    tokens: list[int]
    stop_reason: str
    model_steps: int
    forced_tokens: int


def _feed(tokens: list[int], step: Callable[[int], torch.Tensor],
          forward: Callable[[list[int]], torch.Tensor] | None) -> tuple[torch.Tensor, int]:
    """Feed ``tokens`` (one or more) to the model: one ``forward`` pass for several when given, else one
    ``step`` each. Returns the logits after the last token and the passes made."""
    if len(tokens) > 1 and forward is not None:
        return forward(tokens), 1
    logits = [step(token) for token in tokens][-1]
    return logits, len(tokens)


SEED_LIMIT = 1 << 63
"""Seeds are integers in ``[0, SEED_LIMIT)`` (what ``torch.Generator.manual_seed`` takes)."""


def check_sampling(temperature: float, top_p: float, seed: int | None) -> None:
    """Check sampling settings (pure Python, no torch): see :class:`Sampler`; ``seed`` None is allowed.

    Raises:
        ValueError: what is wrong and the allowed range.
    """
    import math  # lazy: kept (GPU runtime, not re-checked this session); standard library: could move to the top

    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1] (1 = every allowed token), got {top_p!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT):
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")


class Sampler:
    """The model's choice of a token from masked logits: greedy, or temperature + nucleus (top-p) sampling
    from a seeded generator on the logits' device.

    Sampling follows the grammar: the logits it reads are already masked (-inf for disallowed tokens), so a
    disallowed token has probability 0 and is never drawn. With ``temperature`` T > 0 the probabilities are
    ``softmax(logits / T)`` in float32; with ``top_p`` < 1 only the smallest set of most probable tokens
    whose probability sums to at least ``top_p`` is kept (a token is kept when the tokens more probable than
    it sum to less than ``top_p``; the definition of Holtzman et al. 2020, "The Curious Case of Neural Text
    Degeneration", and of transformers' ``TopPLogitsWarper``), renormalised. The draw is the exponential
    race (argmax of ``p / E`` with ``E ~ Exp(1)`` from :attr:`generator`), which picks token i with
    probability ``p_i`` and needs no host-side cumulative sum; the same seed, logits and device give the
    same tokens.

    Args:
        temperature: 0 for greedy (argmax; ``top_p`` and ``seed`` unused), else > 0.
        top_p: nucleus mass in ``(0, 1]`` (1: every allowed token).
        seed: seeds :attr:`generator`, in ``[0, SEED_LIMIT)``.
        device: where the logits are (the generator lives there).
    Raises:
        ValueError: a temperature that is negative or not finite, ``top_p`` outside ``(0, 1]``, or a seed
            outside ``[0, SEED_LIMIT)``.
    """

    def __init__(self, *, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        import torch  # lazy: torch (optional, heavy)

        check_sampling(temperature, top_p, seed)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = int(seed)
        self.generator = torch.Generator(device=torch.device(device)).manual_seed(self.seed)

    @property
    def greedy(self) -> bool:
        """True when the choice is the argmax (temperature 0)."""
        return self.temperature == 0.0

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution a token is drawn from: float32 ``(vocab,)`` on ``logits``' device, 0 outside
        the nucleus and for masked tokens (class docstring). Temperature must be > 0."""
        import torch  # lazy: torch (optional, heavy)

        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            before = torch.cumsum(ordered, dim=-1) - ordered  # mass of the tokens more probable than each
            ordered = ordered.masked_fill(before >= self.top_p, 0.0)
            probs = torch.zeros_like(probs).scatter_(-1, order, ordered)
            probs = probs / probs.sum()
        return probs

    def choose(self, logits: torch.Tensor) -> int:
        """The next token from masked float ``(vocab,)`` ``logits``: the argmax when greedy, else one draw
        from :meth:`probabilities` (advances :attr:`generator`)."""
        import torch  # lazy: torch (optional, heavy)

        if self.greedy:
            return int(torch.argmax(logits).item())
        probs = self.probabilities(logits)
        race = torch.empty_like(probs).exponential_(1.0, generator=self.generator)
        return int(torch.argmax(probs / race).item())


def _choose(loaded: LoadedHolotron, logits: torch.Tensor, constraint: Constraint | None, *,
            thinking_over: bool, sampler: Sampler | None) -> int:
    """The model's next token: ``</think>`` when the thinking budget is spent, else ``sampler``'s choice
    (None: greedy) from ``logits`` after ``constraint``'s mask (applied in place; None: no mask)."""
    import torch  # lazy: torch (optional, heavy)

    if thinking_over:
        return int(loaded.think_end_id)  # type: ignore[arg-type]
    if constraint is not None:
        constraint.mask(logits)
    if sampler is not None:
        return sampler.choose(logits)
    return int(torch.argmax(logits).item())


def _no_thought(_ids: list[int]) -> None:
    """The thought watcher of a decode that streams nothing."""


def decode_loop(loaded: LoadedHolotron, first_logits: torch.Tensor, step: Callable[[int], torch.Tensor], *,
                max_new_tokens: int, constraint: Constraint | None, reasoning: bool, max_think_tokens: int,
                forward: Callable[[list[int]], torch.Tensor] | None = None,
                sampler: Sampler | None = None, on_thought: Callable[[list[int]], None] | None = None) -> Decoded:
    """Token choice shared by every decoder: thinking, the grammar mask, the choice after it (greedy, or
    ``sampler``'s), jump-forward, stop rules.

    The tokens appended since the model's last choice are fed to the model just before its next choice:
    the chosen token and the tokens the grammar forces after it (:meth:`Constraint.forced_tokens`, not
    while thinking). With ``forward`` they go through it in one pass (jump-forward); without, one
    ``step`` each, the intermediate logits unused. Either way the model sees the same token ids and only
    the logits after the last one are read, so both give the same reply (up to the arithmetic of a
    multi-token pass against single steps). Nothing is fed when no choice follows: at ``max_new_tokens``,
    or when the grammar allows only a stop token (:meth:`Constraint.forced_stop`; that token ends the reply
    as the model's choice would).

    Args:
        first_logits: float ``(vocab,)`` logits after the prompt (modified in place by the mask).
        step: ``step(token)`` feeds one token to the decoder and returns the next float ``(vocab,)``
            logits (may be a buffer the next call overwrites). The grammar's bitmask for the next token is
            filled on the CPU while the decoder's kernels for ``step`` still run on the GPU (``step`` must
            not synchronise).
        forward: ``forward(tokens)`` feeds two or more tokens in one pass and returns the float
            ``(vocab,)`` logits after the last; None: one ``step`` per token.
        sampler: how the model's tokens are chosen after the mask (:class:`Sampler`; thinking included);
            None: greedy.
        on_thought: called with the reply's ids so far (the one just chosen included) while the model thinks (the ids
            are on the host already: the choice reads each token back; nothing more is synchronised), to hand
            the thought out while it is generated (:class:`~holodesk.policy.base.ThoughtStream` throttles it).
    Returns:
        :class:`Decoded`: the ids, the stop reason, the forward passes made and the forced tokens.
    """

    eos = set(loaded.eos_ids)
    watch = on_thought or _no_thought
    thinking = reasoning and loaded.think_end_id is not None
    if constraint is not None:
        constraint.start()
    tokens: list[int] = []
    pending: list[int] = []  # appended, not yet fed to the model
    logits = first_logits
    think_tokens = steps = forced = 0
    while True:
        if constraint is not None and not thinking:
            run = constraint.forced_tokens(max_new_tokens - len(tokens))
            tokens += run
            pending += run
            forced += len(run)
            if len(tokens) >= max_new_tokens:
                return Decoded(tokens, "max_new_tokens", steps, forced)
            stop = constraint.forced_stop()
            if stop is not None:
                constraint.accept(stop)
                return Decoded(tokens, "eos", steps, forced)
        elif len(tokens) >= max_new_tokens:
            return Decoded(tokens, "max_new_tokens", steps, forced)
        if pending:
            logits, fed = _feed(pending, step, forward)
            steps += fed
            pending = []
        token = _choose(loaded, logits, None if thinking else constraint,
                        thinking_over=thinking and think_tokens >= max_think_tokens, sampler=sampler)
        if thinking:
            think_tokens += 1
            if token == loaded.think_end_id:
                thinking = False
            elif token in eos:
                return Decoded(tokens, "eos", steps, forced)
            else:
                watch([*tokens, token])
        elif constraint is not None:
            if not constraint.accept(token):
                return Decoded(tokens, "grammar", steps, forced)
            if token in eos or constraint.finished():
                return Decoded(tokens, "eos", steps, forced)
        elif token in eos:
            return Decoded(tokens, "eos", steps, forced)
        tokens.append(token)
        pending.append(token)


def generate(loaded: LoadedHolotron, input_ids: Sequence[int], images: Sequence[PromptImage], *,
             max_new_tokens: int, constraint: Constraint | None, reasoning: bool, max_think_tokens: int,
             jump_forward: bool = True, sampler: Sampler | None = None,
             on_thought: Callable[[list[int]], None] | None = None) -> Generation:
    """One reply with transformers' own forward and cache (the ``stock`` decoder; its modules are used as
    loaded, nothing is replaced): tile and encode every image, merge (:func:`embed_prompt`), prefill,
    then :func:`decode_loop` with one forward per model step.

    Args:
        input_ids: prompt token ids with ``<image>`` runs (``tokenize_prompt``).
        images: the prompt's images in order, with their tiling.
        jump_forward: feed the tokens the grammar forces in one forward with the token before them
            (transformers' forward over several tokens from the cache); False: one forward per token.
        sampler: the token choice after the grammar mask (:func:`decode_loop`); None: greedy.
        on_thought: the reply's ids so far while the model thinks (:func:`decode_loop`).
    Returns:
        :class:`Generation` with ``timings_ms`` preprocess (tiling), vision, prefill, decode.
    Raises:
        PolicyError: the prompt's ``<image>`` tokens and the images' tiles disagree.
        torch.OutOfMemoryError: passed through so the caller can retry with fewer images.
    """
    import torch  # lazy: torch (optional, heavy)

    model = loaded.model.language_model
    device = loaded.device
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    tiles = tile_images(loaded, images)
    sync(device)
    t1 = time.perf_counter()
    embeds = embed_prompt(loaded, input_ids, [encode_tiles(loaded, tiles)])
    del tiles
    sync(device)
    t2 = time.perf_counter()
    timings.update(preprocess=(t1 - t0) * 1000.0, vision=(t2 - t1) * 1000.0)
    with torch.inference_mode():
        out = model(inputs_embeds=embeds, use_cache=True, logits_to_keep=1)
        del embeds
        cache = [out.past_key_values]
        sync(device)
        t3 = time.perf_counter()
        timings["prefill"] = (t3 - t2) * 1000.0

        def forward(tokens: list[int]) -> torch.Tensor:
            ids = torch.tensor([tokens], dtype=torch.long, device=device)
            nxt = model(input_ids=ids, past_key_values=cache[0], use_cache=True, logits_to_keep=1)
            cache[0] = nxt.past_key_values
            return nxt.logits[0, -1].float()

        decoded = decode_loop(
            loaded, out.logits[0, -1].float(), lambda token: forward([token]), max_new_tokens=max_new_tokens,
            constraint=constraint, reasoning=reasoning, max_think_tokens=max_think_tokens,
            forward=forward if jump_forward else None, sampler=sampler,
            on_thought=on_thought,
        )
        sync(device)
        timings["decode"] = (time.perf_counter() - t3) * 1000.0
    text = loaded.tokenizer.decode(decoded.tokens, skip_special_tokens=False)
    return Generation(token_ids=decoded.tokens, text=str(text), stop_reason=decoded.stop_reason,
                      prompt_tokens=len(input_ids), timings_ms=timings, model_steps=decoded.model_steps,
                      forced_tokens=decoded.forced_tokens)
