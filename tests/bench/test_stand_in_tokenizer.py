"""The bench's stand-in tokenizer with Holotron's vocabulary size (tekken from mistral-common's data, built as
a byte-level BPE with the tokenizers library): its size and special ids, its encoding against ranked BPE by
definition, and the prompt lengths it gives next to the 480-entry test tokenizer."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
regex = pytest.importorskip("regex")

from holodesk.bench.runs import AGENT_REPLY  # noqa: E402
from holodesk.bench.stand_in_tokenizer import tekken_path, write_tekken_tokenizer  # noqa: E402
from holodesk.policy.holotron.loader import load_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tekken(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("tekken")
    assert write_tekken_tokenizer(folder) == 131_072
    return load_tokenizer(folder)


def _ranked_bpe(piece: bytes, rank: dict[bytes, int]) -> list[bytes]:
    """Byte-pair encoding of one pre-token by its definition for ranked vocabularies (tiktoken's): start from
    single bytes and merge, again and again, the adjacent pair whose concatenation has the lowest rank."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        ranked = [(rank.get(parts[i] + parts[i + 1]), i) for i in range(len(parts) - 1)]
        found = [(r, i) for r, i in ranked if r is not None]
        if not found:
            break
        _, i = min(found)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def test_size_and_special_ids(tekken: Any) -> None:
    assert len(tekken) == 131_072
    ids = tekken.convert_tokens_to_ids(["<unk>", "<s>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>"])
    assert ids == [0, 1, 2, 10, 11, 12]  # Nemotron Nano 2's turn tokens and end of turn at their ids
    stand_ins = tekken.convert_tokens_to_ids(["<img>", "</img>", "<image>", "<think>", "</think>", "<pad>"])
    assert all(0 < i < 1000 for i in stand_ins) and len(set(stand_ins)) == 6
    assert tekken.encode("<SPECIAL_11>User", add_special_tokens=False)[0] == 11


def test_encoding_is_ranked_bpe_by_definition(tekken: Any) -> None:
    raw = json.loads(Path(tekken_path()).read_text(encoding="utf-8"))
    used = raw["config"]["default_vocab_size"] - raw["config"]["default_num_special_tokens"]
    rank = {base64.b64decode(e["token_bytes"]): r for r, e in enumerate(raw["vocab"][:used])}
    texts = [AGENT_REPLY, "Open the settings and turn on dark mode.",
             "Grüße, 日本語のテキスト! x=1024 y=0768\n\n  done",
             "<observation>\n[Image omitted by context cleaning]\n</observation>", "naïve café ÆØÅ ελληνικά кириллица"]
    for text in texts:
        want = [1000 + rank[p] for piece in regex.findall(raw["config"]["pattern"], text)
                for p in _ranked_bpe(piece.encode(), rank)]
        assert tekken.encode(text, add_special_tokens=False) == want, text
        assert tekken.decode(want) == text


def test_prompt_lengths_next_to_the_test_tokenizer(tekken: Any, tmp_path: Path) -> None:
    """The agent-loop prompt of one step (system prompt, tool schema, task; the image as one sentinel) and the
    bench's agent reply: tekken spends far fewer tokens than the test tokenizer (measured here: about 5,100
    against 9,400 for the prompt, 76 against 147 for the reply)."""
    import numpy as np

    from holodesk.bench.tiny_checkpoint import write_tokenizer
    from holodesk.core.geometry import Frame, Monitor
    from holodesk.policy.base import Observation
    from holodesk.policy.holotron.prompt import render_prompt, special_token_strings
    from holodesk.policy.registry import get_protocol

    write_tokenizer(tmp_path)
    test = load_tokenizer(tmp_path)
    frame = Frame(np.zeros((1080, 1920, 3), dtype=np.uint8), Monitor(1, 0, 0, 1920, 1080))
    messages = get_protocol("agent-loop-v1").build_messages(Observation(task="Open the settings.", frame=frame),
                                                           max_images=3, reasoning=False)
    counts = {}
    for name, tok in (("tekken", tekken), ("test", test)):
        text, _frames, template = render_prompt(tok, messages, special_token_strings(tok))
        assert template == "chat_template"
        counts[name] = (len(tok.encode(text, add_special_tokens=False)), len(tok.encode(AGENT_REPLY,
                                                                                        add_special_tokens=False)))
    assert counts["tekken"][0] < 0.7 * counts["test"][0] and counts["tekken"][1] < 0.7 * counts["test"][1], counts
    assert counts["tekken"][0] > 2000  # the system prompt and tool schema are still thousands of tokens
