"""The reply grammar's vocabulary facts (holotron.vocab): computed once per tokenizer, kept on disk, read back
equal; a kept file that cannot be read, or a tokenizer without a folder, falls back to computing them."""

from __future__ import annotations

import importlib.metadata
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
xgr = pytest.importorskip("xgrammar")

from holodesk.bench.tiny_checkpoint import write_tokenizer  # noqa: E402
from holodesk.policy.holotron import vocab  # noqa: E402
from holodesk.policy.holotron.loader import load_tokenizer  # noqa: E402
from holodesk.policy.holotron.runtime import Constraint  # noqa: E402

VOCAB = 512  # the tiny model's logits (the test tokenizer has 480 ids)


@pytest.fixture()
def tokenizer(tmp_path: Path) -> object:
    folder = tmp_path / "tok"
    folder.mkdir()
    write_tokenizer(folder)
    return load_tokenizer(folder)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts as a new process would: nothing memoised, its own state folder."""
    monkeypatch.setattr(vocab, "_MEMO", {})
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _same(a: vocab.VocabFacts, b: vocab.VocabFacts) -> None:
    assert torch.equal(a.ban, b.ban) and a.ends_with_lead == b.ends_with_lead
    assert a.starts_bad.keys() == b.starts_bad.keys()
    assert all(torch.equal(a.starts_bad[k], b.starts_bad[k]) for k in a.starts_bad)
    assert a.info.decoded_vocab == b.info.decoded_vocab and a.info.stop_token_ids == b.info.stop_token_ids
    assert a.info.vocab_type == b.info.vocab_type and a.info.vocab_size == b.info.vocab_size


def test_facts_are_kept_and_read_back_equal_by_a_new_process(tokenizer: object,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    stops = [5]
    first = vocab.vocab_facts(tokenizer, VOCAB, stops)
    assert first.kept is False
    kept = list((vocab.kept_vocab_path("x").parent).glob("*.pt"))
    assert len(kept) == 1
    assert vocab.vocab_facts(tokenizer, VOCAB, stops) is first  # the same process: memoised
    vocab._MEMO.clear()  # a new process
    caplog.set_level(logging.INFO, logger=vocab.log.name)
    again = vocab.vocab_facts(tokenizer, VOCAB, stops)
    assert again.kept is True and "read from" in caplog.text
    _same(first, again)
    # computed from scratch (not from the file) the facts are the same as well
    ban, starts_bad, ends = vocab.token_classes(again.info.decoded_vocab, VOCAB, set(stops))
    assert torch.equal(ban, first.ban) and ends == first.ends_with_lead
    assert all(torch.equal(starts_bad[k], first.starts_bad[k]) for k in vocab.BAD_SECOND)
    # another vocabulary size or other stop tokens: other facts, another file
    vocab.vocab_facts(tokenizer, VOCAB, [5, 6])
    vocab.vocab_facts(tokenizer, VOCAB + 64, stops)
    assert len(list(kept[0].parent.glob("*.pt"))) == 3


def test_a_grammar_on_kept_facts_masks_as_one_on_computed_facts(tokenizer: object) -> None:
    """The whole Constraint, built on computed facts and then on kept ones, allows the same tokens at every
    step of a reply (each step takes the highest allowed id that is not a stop, until only stops are allowed)."""
    schema = {"type": "object", "properties": {"x": {"type": "integer", "maximum": 99},
                                               "name": {"type": "string", "maxLength": 6}},
              "required": ["x", "name"], "additionalProperties": False}
    config = SimpleNamespace(text_config=SimpleNamespace(vocab_size=VOCAB))
    loaded = SimpleNamespace(model=SimpleNamespace(config=config), tokenizer=tokenizer, eos_ids=(5,),
                             device=torch.device("cpu"))
    computed = Constraint(loaded, schema)
    vocab._MEMO.clear()
    kept = Constraint(loaded, schema)
    assert vocab.vocab_facts(tokenizer, VOCAB, [5]).kept
    computed.start()
    kept.start()
    for _ in range(64):
        a, b = torch.zeros(VOCAB), torch.zeros(VOCAB)
        computed.mask(a)
        kept.mask(b)
        assert torch.equal(torch.isinf(a), torch.isinf(b))
        allowed = [t for t in torch.nonzero(~torch.isinf(a)).flatten().tolist() if t != 5]
        if not allowed:
            break
        computed.accept(allowed[-1])
        kept.accept(allowed[-1])
    else:
        pytest.fail("the reply did not end in 64 tokens")
    assert not torch.isinf(a[5])  # the reply is complete: the stop token is allowed


def test_an_unreadable_kept_file_is_computed_again_and_replaced(tokenizer: object,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    first = vocab.vocab_facts(tokenizer, VOCAB, [5])
    (path,) = vocab.kept_vocab_path("x").parent.glob("*.pt")
    path.write_bytes(b"not a torch file")
    vocab._MEMO.clear()
    again = vocab.vocab_facts(tokenizer, VOCAB, [5])
    assert again.kept is False and "unreadable" in caplog.text
    _same(first, again)
    vocab._MEMO.clear()
    assert vocab.vocab_facts(tokenizer, VOCAB, [5]).kept is True  # the file was replaced


def test_a_changed_tokenizer_file_is_another_key_and_a_tokenizer_without_a_folder_is_not_kept(
        tokenizer: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(tokenizer.name_or_path)  # type: ignore[attr-defined]
    before = vocab._key(tokenizer, VOCAB, [5])
    with monkeypatch.context() as m:  # xgrammar imported without its metadata: an upgrade could not be told
        def unknown(name: str) -> str:
            raise importlib.metadata.PackageNotFoundError(name)

        m.setattr(importlib.metadata, "version", unknown)
        assert vocab._key(tokenizer, VOCAB, [5]) is None
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = 1234
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert before is not None and vocab._key(tokenizer, VOCAB, [5]) not in (None, before)
    changed = vocab._key(tokenizer, VOCAB, [5])
    tokenizer.add_tokens(["<added in memory>"])  # type: ignore[attr-defined]
    assert vocab._key(tokenizer, VOCAB, [5]) not in (None, changed)
    tokenizer.name_or_path = "owner/model"  # type: ignore[attr-defined]
    assert vocab._key(tokenizer, VOCAB, [5]) is None
    facts = vocab.vocab_facts(tokenizer, VOCAB, [5])
    assert facts.kept is False and not vocab.kept_vocab_path("x").parent.exists()
