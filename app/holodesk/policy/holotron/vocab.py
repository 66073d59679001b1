"""What the reply grammar must know of a tokenizer's vocabulary (:class:`VocabFacts`): xgrammar's
``TokenizerInfo`` and the tokens :class:`~holodesk.policy.holotron.runtime.Constraint` masks besides the grammar,
computed once per tokenizer and kept on disk.

For Holotron's 131,072-token vocabulary (the tekken stand-in) this took 1.4-1.6 s of a load on a 2-core host
(``TokenizerInfo.from_huggingface`` 0.7-0.8 s, reading its decoded vocabulary into Python 0.3 s, the per-token
checks the rest); read back from the kept file, 0.23-0.26 s (5.5 MB). The file
(``$XDG_STATE_HOME/holodesk/holotron-vocab/<key>.pt``, one per key; deleting it makes the next load compute it again)
is keyed by a digest of the tokenizer's files and length, the vocabulary size, the stop tokens, xgrammar's version
and :data:`FORMAT`; a tokenizer without files in a local folder is not kept.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BAD_SECOND: dict[int, tuple[int, int]] = {0xE0: (0x80, 0x9F), 0xED: (0xA0, 0xBF), 0xF0: (0x80, 0x8F),
                                          0xF4: (0x90, 0xBF)}
"""UTF-8 lead byte -> the range of second bytes that makes the sequence invalid: overlong (E0, F0), a
surrogate (ED), above U+10FFFF (F4) (Unicode 15, Table 3-7)."""
FORMAT = 1
"""The kept file's layout and the rules of :func:`token_classes`; part of the key (a change here makes new files)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
"""The files of a tokenizer folder whose contents make the key (those present)."""


def utf8_pairs_valid(data: bytes) -> bool:
    """False when ``data`` holds a byte that never occurs in UTF-8 (C0, C1, F5..FF) or a lead byte followed
    by a second byte in its :data:`BAD_SECOND` range. (Incomplete sequences at either end are fine: a
    token may hold part of a character.)"""
    for i, byte in enumerate(data):
        if byte in (0xC0, 0xC1) or byte >= 0xF5:
            return False
        bad = BAD_SECOND.get(byte)
        if bad is not None and i + 1 < len(data) and bad[0] <= data[i + 1] <= bad[1]:
            return False
    return True


@dataclass(frozen=True)
class VocabFacts:
    """A tokenizer's facts for the reply grammar, on the host.

    Attributes:
        info: xgrammar's ``TokenizerInfo`` (decoded vocabulary, stop tokens) for the model's ``vocab_size``.
        ban: bool ``[vocab_size]``: tokens never allowed (a raw control byte 0x00-0x1f, or bytes that are never
            UTF-8: :func:`utf8_pairs_valid`). Byte-level tokens can spell invalid UTF-8, and xgrammar 0.2.8 accepts
            a surrogate encoded in three bytes (ED A0..BF xx) as one character of a string, which decodes to
            three U+FFFD (seen with the tiny checkpoint: a capped string came out longer than its maxLength).
        starts_bad: lead byte -> bool ``[vocab_size]``: tokens whose first byte, after a token ending in that
            lead byte, makes an invalid sequence (:data:`BAD_SECOND`).
        ends_with_lead: token id -> its last byte, for tokens ending in a :data:`BAD_SECOND` lead byte.
        kept: read from the kept file rather than computed in this process.
    """

    info: Any
    ban: torch.Tensor
    starts_bad: dict[int, torch.Tensor]
    ends_with_lead: dict[int, int]
    kept: bool = False


def token_classes(decoded_vocab: list[bytes], vocab_size: int, stops: set[int]
                  ) -> tuple[torch.Tensor, dict[int, torch.Tensor], dict[int, int]]:
    """``(ban, starts_bad, ends_with_lead)`` of :class:`VocabFacts` from xgrammar's decoded vocabulary (bytes per
    id); stop tokens and empty pieces are never banned."""
    import torch  # lazy: torch (optional, heavy)

    ban = torch.zeros(vocab_size, dtype=torch.bool)
    starts_bad = {lead: torch.zeros(vocab_size, dtype=torch.bool) for lead in BAD_SECOND}
    ends_with_lead: dict[int, int] = {}
    for token_id, piece in enumerate(decoded_vocab[:vocab_size]):
        if token_id in stops or not piece:
            continue
        data = bytes(piece)
        if min(data) < 0x20 or not utf8_pairs_valid(data):
            ban[token_id] = True
            continue
        for lead, (low, high) in BAD_SECOND.items():
            if low <= data[0] <= high:
                starts_bad[lead][token_id] = True
        if data[-1] in BAD_SECOND:
            ends_with_lead[token_id] = data[-1]
    return ban, starts_bad, ends_with_lead


_MEMO: dict[str, VocabFacts] = {}


def vocab_facts(tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> VocabFacts:
    """The :class:`VocabFacts` of ``tokenizer`` for a model with ``vocab_size`` logits and ``stop_ids``: from
    this process's earlier call or the kept file when its key matches, else computed (and kept). A kept file that
    cannot be read is logged and computed again; a failed write is logged only.

    Raises:
        ImportError: xgrammar is not installed (the caller says what to do).
    """
    import xgrammar as xgr  # lazy: xgrammar (optional, heavy)

    key = _key(tokenizer, vocab_size, stop_ids)
    if key is not None and key in _MEMO:
        return _MEMO[key]
    path = None if key is None else kept_vocab_path(key)
    facts = _read(path, xgr) if path is not None and path.exists() else None
    if facts is None:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_ids))
        ban, starts_bad, ends_with_lead = token_classes(info.decoded_vocab, vocab_size, set(stop_ids))
        facts = VocabFacts(info, ban, starts_bad, ends_with_lead)
        if path is not None:
            _write(path, facts)
    if key is not None:
        _MEMO[key] = facts
    return facts


def kept_vocab_path(key: str) -> Path:
    """``$XDG_STATE_HOME/holodesk/holotron-vocab/<key>.pt`` (platformdirs' user state folder)."""
    import platformdirs  # lazy: imported by the load only

    return Path(platformdirs.user_state_dir("holodesk")) / "holotron-vocab" / f"{key}.pt"


def _key(tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> str | None:
    """Hex digest of the tokenizer's files (:data:`TOKENIZER_FILES` in its ``name_or_path`` folder) and its length,
    ``vocab_size``, the sorted ``stop_ids``, xgrammar's version and :data:`FORMAT`; None when that folder has no
    tokenizer.json or xgrammar's version is unknown."""
    from importlib.metadata import PackageNotFoundError, version  # lazy: standard library, used at load only

    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    if not (folder / "tokenizer.json").is_file():
        log.debug("vocabulary facts not kept: no tokenizer.json in %r", str(folder))
        return None
    try:
        xgrammar_version = version("xgrammar")
    except PackageNotFoundError:  # imported from a folder without its metadata: an upgrade could not be told
        log.debug("vocabulary facts not kept: xgrammar's version is unknown")
        return None
    size = len(tokenizer)  # with tokens added in memory, which the files do not show
    digest = hashlib.sha256(f"{FORMAT}|{xgrammar_version}|{vocab_size}|{sorted(stop_ids)}|{size}".encode())
    for name in TOKENIZER_FILES:
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def _read(path: Path, xgr: Any) -> VocabFacts | None:
    """The facts kept in ``path``, or None (logged) when it cannot be read."""
    import torch  # lazy: torch (optional, heavy)

    try:
        data = torch.load(path, weights_only=True)
        info = xgr.TokenizerInfo.deserialize_json(data["info"])
        facts = VocabFacts(info, data["ban"], {int(k): v for k, v in data["starts_bad"].items()},
                           {int(k): int(v) for k, v in data["ends_with_lead"].items()}, kept=True)
    except Exception as exc:  # a truncated or foreign file: computed again, and replaced
        log.warning("the kept vocabulary facts in %s are unreadable (%s: %s); computing them", path,
                    type(exc).__name__, exc)
        return None
    log.info("vocabulary facts for the reply grammar read from %s", path)
    return facts


def _write(path: Path, facts: VocabFacts) -> None:
    """Keep ``facts`` in ``path`` (through a temporary file); a failure is logged only."""
    import torch  # lazy: torch (optional, heavy)

    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one per process: two loads at once do not mix
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"info": facts.info.serialize_json(), "ban": facts.ban,
                    "starts_bad": {str(k): v for k, v in facts.starts_bad.items()},
                    "ends_with_lead": {str(k): v for k, v in facts.ends_with_lead.items()}}, tmp)
        tmp.replace(path)
    except OSError as exc:
        log.warning("the vocabulary facts could not be kept in %s: %s", path, exc)


__all__ = ["BAD_SECOND", "FORMAT", "TOKENIZER_FILES", "VocabFacts", "kept_vocab_path", "token_classes",
           "utf8_pairs_valid", "vocab_facts"]
