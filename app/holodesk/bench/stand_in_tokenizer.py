"""A stand-in tokenizer with Holotron's vocabulary size, for the bench's full-size random model
(``holodesk bench --tokenizer tekken``): Mistral's tekken BPE, read from the data shipped in the
``mistral-common`` package (bench-only; ``pip install --no-deps mistral-common``: only its data file is
read, the package is not imported) and built as a byte-level BPE with the ``tokenizers`` library
(:func:`byte_level_bpe`). transformers' own ``MistralConverter`` does the same conversion but imports
mistral-common's tokenizer, which needs tiktoken: one more binary dependency on the GPU machine for a data
file.

How close it is to Holotron-12B's own tokenizer (that of NVIDIA-Nemotron-Nano-12B-v2-VL, not available here):

* the same size: 131,072 ids, 1,000 of them special (tekken's ``default_vocab_size`` and
  ``default_num_special_tokens`` in ``tekken_240911.json``); docs/shared holotron.md gives the vocabulary as
  131,072 (assumed there too);
* the same special-token naming: ``<SPECIAL_10>``, ``<SPECIAL_11>``, ``<SPECIAL_12>`` (system and user turns,
  end of turn) are tekken's filler names at ids 10, 11, 12, the ids docs/shared holotron.md gives for the
  Nemotron Nano 2 chat format's end of turn;
* **not checked**: that the 130,072 BPE merges are Nemotron's (no Nemotron tokenizer file was readable here),
  and where Nemotron puts ``<img>``, ``</img>``, ``<image>``, ``<think>``, ``</think>`` and ``<pad>``:
  :data:`STAND_IN_SPECIALS` places them on free special ids (any special id gives the same token counts).

So prompt and reply lengths are those of a 131k-entry tekken BPE on English text and JSON: the figures a real
tokenizer of this family gives, where the 480-entry test tokenizer spends several tokens per word.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from holodesk.bench.tiny_checkpoint import CHAT_TEMPLATE
from holodesk.errors import HolodeskError

TEKKEN_FILE = "tekken_240911.json"
"""The tekken vocabulary inside ``mistral_common/data`` (131,072 ids in use, Mistral NeMo's)."""

STAND_IN_SPECIALS = {0: "<unk>", 1: "<s>", 2: "</s>", 18: "<img>", 19: "</img>", 20: "<image>", 21: "<think>",
                     22: "</think>", 23: "<pad>"}
"""Special ids given names; every other special id ``i`` is tekken's filler ``<SPECIAL_i>``. Ids 18-23 are
placed here (assumed: Nemotron's own ids for them were not read)."""


TEKKEN_TARGET = Path(sys.prefix) / "bench-data"
"""Where the test installer puts the mistral-common package for the bench (``pip install --no-deps --target``):
outside the environment's import path, since transformers takes an importable mistral-common for its own tokenizer
backend and fails on one installed without its dependencies."""


def tekken_path() -> Path:
    """The tekken vocabulary file of the ``mistral-common`` package, importable or under :data:`TEKKEN_TARGET`
    (found without importing it, so none of its dependencies is needed).

    Raises:
        HolodeskError: mistral-common is not installed, or its wheel lacks :data:`TEKKEN_FILE`.
    """
    spec = importlib.util.find_spec("mistral_common")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    folders.append(str(TEKKEN_TARGET / "mistral_common"))
    for folder in folders:
        path = Path(folder) / "data" / TEKKEN_FILE
        if path.is_file():
            return path
    raise HolodeskError(f"--tokenizer tekken needs {TEKKEN_FILE} from the mistral-common package, which is "
                        + ("installed without it" if spec is not None else "not installed"),
                        hint="pip install mistral-common (a bench-only dependency), or use --tokenizer test.")


def _byte_symbols() -> list[str]:
    """The byte-level alphabet (GPT-2's, which ``tokenizers``' ``ByteLevel`` pre-tokenizer and decoder use):
    printable Latin-1 bytes stand for themselves, every other byte ``b`` for ``chr(256 + n)``, n counting
    those bytes in order. Index: the byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out: list[str] = []
    extra = 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def byte_level_bpe(ranks: list[bytes], pattern: str, specials: list[str]) -> Any:
    """A ``tokenizers.Tokenizer`` for a tiktoken-style ranked byte vocabulary: ids ``0..len(specials)-1`` the
    ``specials``, then ``len(specials) + rank``; merges recovered from the ranks (each token of two or more
    bytes is merged from every split into two tokens of the vocabulary, the splits ordered by their parts'
    ranks, the merges by the merged token's rank: ranked BPE merges the lowest-ranked pair first, and that
    order gives the same token sequences); text split by ``pattern`` first, then byte-level.
    """
    # lazy: tokenizers (optional: the local extra)
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    symbols = _byte_symbols()

    def text(token: bytes) -> str:
        return "".join(symbols[b] for b in token)

    rank_of = {token: rank for rank, token in enumerate(ranks)}
    offset = len(specials)
    vocab = {text(token): offset + rank for rank, token in enumerate(ranks)}
    vocab.update({name: i for i, name in enumerate(specials)})  # at their ids, not appended after the ranks
    merges: list[tuple[str, str]] = []
    for token in ranks:  # ranks are in order: the merges come out ordered by the merged token's rank
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in rank_of and token[i:] in rank_of]
        merges += [(text(a), text(b)) for a, b in sorted(splits, key=lambda s: (rank_of[s[0]], rank_of[s[1]]))]
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tokenizer


def write_tekken_tokenizer(folder: Path) -> int:
    """Write tokenizer.json, tokenizer_config.json (the tiny checkpoint's chat template, the Nemotron Nano 2
    layout) and special_tokens_map.json of the tekken stand-in into the existing ``folder``.

    Returns:
        the number of ids (131,072).
    Raises:
        HolodeskError: :func:`tekken_path`'s.
    """
    raw = json.loads(tekken_path().read_text(encoding="utf-8"))
    config = raw["config"]
    specials = [STAND_IN_SPECIALS.get(i, f"<SPECIAL_{i}>") for i in range(int(config["default_num_special_tokens"]))]
    used = int(config["default_vocab_size"]) - len(specials)  # the file holds more ranks than the model uses
    ranks = [base64.b64decode(entry["token_bytes"]) for entry in raw["vocab"][:used]]
    tokenizer = byte_level_bpe(ranks, config["pattern"], specials)
    tokenizer.save(str(folder / "tokenizer.json"))
    names = {"bos_token": "<s>", "eos_token": "<SPECIAL_12>", "unk_token": "<unk>", "pad_token": "<pad>"}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **names, "model_max_length": 131072,
              "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "special_tokens_map.json").write_text(json.dumps(names))
    return int(tokenizer.get_vocab_size())


__all__ = ["STAND_IN_SPECIALS", "TEKKEN_FILE", "byte_level_bpe", "tekken_path", "write_tekken_tokenizer"]
