"""Prompt layout: the fallback reproduces the chat template; images expand to <img> <image>*n </img>."""

from __future__ import annotations

import numpy as np
import pytest

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError
from holodesk.policy.holotron.prompt import (
    IMAGE_SENTINEL,
    fallback_chat,
    flatten_messages,
    reasoning_requested,
    render_chat,
    tokenize_prompt,
)


def _frame(w: int = 64, h: int = 48) -> Frame:
    return Frame(np.zeros((h, w, 3), dtype=np.uint8), Monitor(1, 0, 0, w, h))


CONVERSATIONS = [
    [{"role": "system", "content": "Be brief.\n/no_think"}, {"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief.\n/think"}, {"role": "user", "content": "Hello"}],
    [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "first " + IMAGE_SENTINEL},
        {"role": "assistant", "content": '{"a": 1}'},
        {"role": "user", "content": "again /no_think"},
    ],
    [{"role": "user", "content": "no system at all"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_fallback_equals_checkpoint_template(tiny_loaded, messages) -> None:  # type: ignore[no-untyped-def]
    rendered, how = render_chat(tiny_loaded.tokenizer, messages)
    assert how == "chat_template"
    assert fallback_chat(messages) == rendered


def test_layout_and_reasoning_switch() -> None:
    off = fallback_chat([{"role": "system", "content": "S\n/no_think"}, {"role": "user", "content": "U"}])
    assert off == "<s><SPECIAL_10>System\nS\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think></think>"
    on = fallback_chat([{"role": "system", "content": "S\n/think"}, {"role": "user", "content": "U"}])
    assert on.endswith("<SPECIAL_11>Assistant\n<think>\n")
    both = [{"role": "system", "content": "/think"}, {"role": "user", "content": "/no_think"}]
    assert reasoning_requested(both) is False


def test_fallback_used_without_template(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.policy.holotron.loader import load_tokenizer

    folder = write_tiny_checkpoint(tmp_path / "t", chat_template=False, shards=1)
    tok = load_tokenizer(folder)
    assert not getattr(tok, "chat_template", None)
    _, how = render_chat(tok, CONVERSATIONS[0])
    assert how == "fallback"


def test_flatten_and_tokenize(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    a, b = _frame(), _frame(32, 32)
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "frame": a},
                                     {"type": "text", "text": "and"}, {"type": "image", "frame": b}]},
    ]
    flat, frames = flatten_messages(messages)
    assert frames == [a, b]
    assert flat[1]["content"] == f"look\n{IMAGE_SENTINEL}\nand\n{IMAGE_SENTINEL}"
    text, _ = render_chat(tiny_loaded.tokenizer, flat)
    ids = tokenize_prompt(tiny_loaded.tokenizer, text, [512, 256], img_start_id=6, img_end_id=7, image_token_id=8)
    assert ids.count(8) == 768 and ids.count(6) == 2 and ids.count(7) == 2
    first = ids.index(6)
    assert ids[first + 1 : first + 513] == [8] * 512 and ids[first + 513] == 7
    assert tiny_loaded.tokenizer.decode(ids[:3]).startswith("<s><SPECIAL_10>")  # BOS first
    with pytest.raises(PolicyError):
        tokenize_prompt(tiny_loaded.tokenizer, text, [256], img_start_id=6, img_end_id=7, image_token_id=8)


def test_image_token_runs_one_per_image() -> None:
    from holodesk.policy.holotron.prompt import image_token_runs

    ids = [1, 5, 8, 8, 8, 6, 2, 5, 8, 8, 6, 8]  # <img>=5, <image>=8, </img>=6; a stray 8 at the end
    assert image_token_runs(ids, 8) == [(2, 3), (8, 2), (11, 1)]
    assert image_token_runs([1, 2], 8) == []


# ------------------------------------------------------------------ list-form content (NVIDIA's template)
def _parts_messages(a: Frame, b: Frame) -> list[dict]:  # type: ignore[type-arg]
    return [
        {"role": "system", "content": [{"type": "text", "text": "sys\n/no_think"}]},
        {"role": "user", "content": [{"type": "text", "text": "Task: look <image> here"}]},
        {"role": "user", "content": [{"type": "text", "text": "<observation>\n"}, {"type": "image", "frame": a},
                                     {"type": "text", "text": "\n</observation>"}]},
        {"role": "assistant", "content": [{"type": "text", "text": '{"note": null}'}]},
        {"role": "user", "content": [{"type": "text", "text": "<observation>\n"}, {"type": "image", "frame": b},
                                     {"type": "text", "text": "\n</observation>"}]},
    ]


def test_template_iterating_content_parts_renders_one_placeholder_per_image(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The tiny checkpoint's template is written the way NVIDIA's iterates content parts (BOS first, an
    image part renders <image>, parts concatenated): the list form is what it gets."""
    from holodesk.policy.holotron.prompt import render_prompt, special_token_strings

    a, b = _frame(), _frame(32, 32)
    tok = tiny_loaded.tokenizer
    text, frames, how = render_prompt(tok, _parts_messages(a, b), special_token_strings(tok))
    assert how == "chat_template" and frames == [a, b]
    s = IMAGE_SENTINEL
    assert text == (
        "<s><SPECIAL_10>System\nsys\n"
        "<SPECIAL_11>User\nTask: look <\u200bimage> here\n"
        f"<SPECIAL_11>User\n<observation>\n{s}\n</observation>\n"
        '<SPECIAL_11>Assistant\n{"note": null}\n<SPECIAL_12>\n'
        f"<SPECIAL_11>User\n<observation>\n{s}\n</observation>\n"
        "<SPECIAL_11>Assistant\n<think></think>"
    )
    # the fallback (no template) renders exactly the same text
    from holodesk.policy.holotron.prompt import fallback_chat, template_parts

    parts, _ = template_parts(_parts_messages(a, b), special_token_strings(tok))
    assert fallback_chat(parts).replace("<image>", s) == text


class _StringOnlyTokenizer:
    """A tokenizer double whose template reads ``message['content']`` as a string (a list renders as its
    Python repr, with no <image> placeholder): the case NVIDIA's template-less string form used to hit."""

    bos_token = "<s>"

    def __init__(self) -> None:
        import jinja2

        self.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
        self._template = jinja2.Environment().from_string(self.chat_template)

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):  # type: ignore[no-untyped-def]
        return self._template.render(messages=messages)


def test_a_template_for_plain_strings_gets_the_string_form_and_it_is_reported(caplog) -> None:  # type: ignore[no-untyped-def]
    from holodesk.policy.holotron.prompt import render_prompt

    a, b = _frame(), _frame(32, 32)
    with caplog.at_level("WARNING"):
        text, frames, how = render_prompt(_StringOnlyTokenizer(), _parts_messages(a, b), ["<image>"])
    assert how == "chat_template (string content)" and frames == [a, b]
    assert text.count(IMAGE_SENTINEL) == 2
    assert "rendered 0 image placeholder(s) for 2 image(s)" in caplog.text


def test_fallback_without_template_starts_with_bos(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.policy.holotron.loader import load_tokenizer
    from holodesk.policy.holotron.prompt import render_prompt, special_token_strings

    tok = load_tokenizer(write_tiny_checkpoint(tmp_path / "t", chat_template=False, shards=1))
    a, b = _frame(), _frame(32, 32)
    text, _frames, how = render_prompt(tok, _parts_messages(a, b), special_token_strings(tok))
    assert how == "fallback" and text.startswith("<s><SPECIAL_10>System\n") and text.count(IMAGE_SENTINEL) == 2
    ids = tokenize_prompt(tok, text, [256, 256], img_start_id=6, img_end_id=7, image_token_id=8)
    assert ids[0] == tok.convert_tokens_to_ids("<s>")  # the BOS token, not its characters


def test_a_step_tokenizes_only_the_text_it_did_not_have(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The policy's segment encoder gives the ids of the uncached path, and a second step whose prompt repeats
    the first's text before and between screenshots sends only its new text to the tokenizer."""
    from holodesk.policy.holotron.prompt import segment_encoder

    calls: list[str] = []

    class Counting:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            calls.append(text)
            return [int(t) for t in tiny_loaded.tokenizer.encode(text, add_special_tokens=add_special_tokens)]

    encode = segment_encoder(Counting())
    head = "<s>system prompt and tools " * 40 + "task: save the file " + IMAGE_SENTINEL + " reply one "
    steps = [head + IMAGE_SENTINEL + " now?", head + IMAGE_SENTINEL + " reply two " + IMAGE_SENTINEL + " now?"]
    for text in steps:
        counts = [9] * text.count(IMAGE_SENTINEL)
        cached = tokenize_prompt(tiny_loaded.tokenizer, text, counts, img_start_id=6, img_end_id=7, image_token_id=8,
                                 encode=encode)
        assert cached == tokenize_prompt(tiny_loaded.tokenizer, text, counts, img_start_id=6, img_end_id=7,
                                         image_token_id=8)
    assert calls == ["<s>system prompt and tools " * 40 + "task: save the file ", " reply one ", " now?",
                     " reply two "]


def _tokenizers(tiny_loaded, tmp_path) -> list[object]:  # type: ignore[no-untyped-def]
    from holodesk.bench.stand_in_tokenizer import write_tekken_tokenizer
    from holodesk.errors import HolodeskError
    from holodesk.policy.holotron.loader import load_tokenizer

    found = [tiny_loaded.tokenizer]
    try:
        write_tekken_tokenizer(tmp_path)
    except HolodeskError:  # mistral-common is a bench-only dependency (installers/test.sh installs it)
        return found
    return [*found, load_tokenizer(tmp_path)]


def test_text_cut_at_special_tokens_has_the_ids_of_the_whole(tiny_loaded, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The segment encoder cuts text at the template's special tokens and remembers the pieces; for the test
    tokenizer and the 131,072-id tekken stand-in the ids equal those of the whole text, over texts that put
    special tokens next to spaces, newlines, digits, punctuation and other scripts."""
    import random

    from holodesk.policy.holotron.prompt import segment_encoder, special_splitter

    rng = random.Random(7)
    words = ["open", " the", "  file", "\n", "\n\n", " 12", "3", ".", "!?", " é", "日本", " Привет", "\t", " ", '"}}',
             "{\"tool_name\": \"click\"", " <im", "age>", "SPECIAL"]
    for tokenizer in _tokenizers(tiny_loaded, tmp_path):
        splitter = special_splitter(tokenizer)
        assert splitter is not None
        specials = [s for s in tokenizer.all_special_tokens if s][:12]
        encode = segment_encoder(tokenizer)
        for _ in range(200):
            text = "".join(rng.choice(words) if rng.random() < 0.8 else rng.choice(specials)
                           for _ in range(rng.randint(1, 30)))
            assert list(encode(text)) == [int(t) for t in tokenizer.encode(text, add_special_tokens=False)], text


def test_no_cutting_where_a_piece_would_tokenize_otherwise() -> None:
    """A tokenizer whose pre-tokenizer marks only the first piece (Metaspace) or whose special token strips
    the space next to it is not cut."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from holodesk.policy.holotron.prompt import special_splitter

    def fast(pre: object, token: AddedToken) -> object:
        backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
        backend.pre_tokenizer = pre  # type: ignore[assignment]
        backend.add_special_tokens([token])
        return PreTrainedTokenizerFast(tokenizer_object=backend)

    plain = AddedToken("<eot>", special=True, lstrip=False, rstrip=False)
    assert special_splitter(fast(pre_tokenizers.ByteLevel(add_prefix_space=False), plain)) is not None
    assert special_splitter(fast(pre_tokenizers.Metaspace(prepend_scheme="first"), plain)) is None
    stripping = AddedToken("<eot>", special=True, lstrip=True, rstrip=False)
    assert special_splitter(fast(pre_tokenizers.ByteLevel(add_prefix_space=False), stripping)) is None
    assert special_splitter(object()) is None


def _splitter_from_the_whole_state(tokenizer: object) -> object:
    """The rule of ``special_splitter`` read from the whole tokenizer serialised (the reference)."""
    import json
    import re

    state = json.loads(tokenizer.backend_tokenizer.to_str())  # type: ignore[attr-defined]
    if state.get("normalizer") is not None or "Metaspace" in json.dumps(state.get("pre_tokenizer")):
        return None
    added = [a for a in state.get("added_tokens") or [] if a.get("special") and a.get("content")]
    if not added or any(a.get("lstrip") or a.get("rstrip") or a.get("single_word") for a in added):
        return None
    contents = sorted({str(a["content"]) for a in added}, key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")


def test_the_splitter_reads_only_what_it_needs_and_equals_the_whole_states_rule(tiny_loaded, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The splitter reads the normaliser, the pre-tokenizer and the added tokens, not the whole serialised
    tokenizer (a 131,072-id vocabulary took about 0.8 s of CPU to serialise and parse at each load), and cuts
    exactly where the rule read from the whole state does: the test tokenizer, the tekken stand-in, and
    tokenizers with a normaliser, a Metaspace inside a sequence, a stripping special token, no special token."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from holodesk.policy.holotron.prompt import special_splitter

    def fast(pre: object, tokens: list[AddedToken], normalizer: object = None) -> object:
        backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
        backend.pre_tokenizer = pre  # type: ignore[assignment]
        if normalizer is not None:
            backend.normalizer = normalizer  # type: ignore[assignment]
        backend.add_special_tokens(tokens)
        return PreTrainedTokenizerFast(tokenizer_object=backend)

    eot = AddedToken("<eot>", special=True, lstrip=False, rstrip=False)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cases = [*_tokenizers(tiny_loaded, tmp_path),
             fast(byte_level, [eot, AddedToken("<eot_long>", special=True)]),
             fast(byte_level, [eot], normalizer=normalizers.NFC()),
             fast(pre_tokenizers.Sequence([pre_tokenizers.Digits(), pre_tokenizers.Metaspace()]), [eot]),
             fast(byte_level, [AddedToken("<eot>", special=True, rstrip=True)]),
             fast(byte_level, [])]
    got = [special_splitter(t) for t in cases]
    assert got == [_splitter_from_the_whole_state(t) for t in cases]  # compiled patterns compare by pattern
    assert [g is None for g in got[-5:]] == [False, True, True, True, True]
    assert got[-5].pattern == "(<eot_long>|<eot>)"  # type: ignore[union-attr]

    class Backend:  # the test tokenizer's backend, except that the whole tokenizer cannot be serialised
        def __init__(self, real: object) -> None:
            self.normalizer = real.normalizer  # type: ignore[attr-defined]
            self.pre_tokenizer = real.pre_tokenizer  # type: ignore[attr-defined]
            self.get_added_tokens_decoder = real.get_added_tokens_decoder  # type: ignore[attr-defined]

        def to_str(self) -> str:
            raise AssertionError("the whole tokenizer was serialised")

    class Wrapped:
        backend_tokenizer = Backend(tiny_loaded.tokenizer.backend_tokenizer)

    assert special_splitter(Wrapped()) == got[0]
