"""The checkpoint reader of :mod:`holodesk.policy.holotron.stream`: every tensor bit for bit as safetensors reads
it, across chunk boundaries and readers (CPU: host buffers; CUDA: page-locked, the load path)."""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron import stream
from holodesk.policy.holotron.checkpoint import safetensors_header


def _odd_tensors() -> dict[str, torch.Tensor]:
    """Mixed dtypes and sizes, so that tensors start at odd byte offsets and straddle every chunk size used."""
    g = torch.Generator().manual_seed(0)
    return {
        "a.bf16": torch.randn(37, 11, generator=g).to(torch.bfloat16),
        "b.bool": torch.rand(13, generator=g) > 0.5,
        "c.f32": torch.randn(5, 7, 3, generator=g),
        "d.u8": torch.randint(0, 255, (3,), generator=g, dtype=torch.uint8),
        "e.scalar": torch.tensor(3.25, dtype=torch.float64),
        "f.i64": torch.randint(-(2**40), 2**40, (9,), generator=g, dtype=torch.int64),
        "g.empty": torch.empty(0, 4, dtype=torch.float16),
        "h.f16": torch.randn(101, generator=g).to(torch.float16),
        "i.i8": torch.randint(-128, 127, (17, 2), generator=g, dtype=torch.int8),
    }


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8).cpu(), b.reshape(-1).view(torch.uint8).cpu()))


@pytest.mark.parametrize(("chunk", "readers"), [(7, 1), (64, 3), (1000, 8), (1 << 20, 2)])
def test_every_tensor_as_safetensors_reads_it(tmp_path: Path, chunk: int, readers: int) -> None:
    files = []
    tensors = _odd_tensors()
    names = sorted(tensors)
    for i, part in enumerate((names[:5], names[5:])):
        f = tmp_path / f"model-{i}.safetensors"
        save_file({k: tensors[k] for k in part}, str(f), metadata={"format": "pt"})
        files.append(f)
    got = stream.read_state_dict(files, torch.device("cpu"), readers=readers, chunk_bytes=chunk)
    assert sorted(got) == names
    for f in files:
        for k, t in load_file(str(f)).items():
            assert _same_bytes(got[k], t), k


def gate_reads(monkeypatch: pytest.MonkeyPatch, timeout: float = 300.0,
               fail: Exception | None = None) -> tuple[threading.Event, list[int]]:
    """Hold every read of :mod:`.stream` until the returned event is set (a reader waiting longer than ``timeout``
    fails, so that a test that waits for a held read fails instead of hanging), then read, or raise ``fail``; the
    list counts the reads done."""
    gate, done = threading.Event(), [0]
    real = stream._read

    def held(path: Path, start: int, size: int, into: memoryview) -> None:
        if not gate.wait(timeout):
            raise TimeoutError("the test never released the read")
        if fail is not None:
            raise fail
        real(path, start, size, into)
        done[0] += 1

    monkeypatch.setattr(stream, "_read", held)
    return gate, done


def _write(tmp_path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    f = tmp_path / "model.safetensors"
    save_file(tensors, str(f), metadata={"format": "pt"})
    return f


def test_reading_returns_before_the_values_and_wait_gives_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensors = _odd_tensors()
    f = _write(tmp_path, tensors)
    gate, done = gate_reads(monkeypatch)
    reading = stream.start_reading([f], torch.device("cpu"), chunk_bytes=64, readers=2)
    # every tensor exists with its final shape and dtype while nothing is read yet
    assert not reading.done() and done[0] == 0
    assert {k: (t.shape, t.dtype) for k, t in reading.tensors.items()} == {
        k: (t.shape, t.dtype) for k, t in tensors.items()}
    gate.set()
    seconds = reading.wait()
    assert reading.done() and seconds >= 0 and reading.wait() == seconds  # idempotent
    assert all(_same_bytes(reading.tensors[k], t) for k, t in tensors.items())


def test_only_beside_readers_read_until_the_caller_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a load builds beside the read, ``beside`` readers read at once (the build's own small reads queue
    behind fewer large ones); all of them once the caller waits."""
    f = _write(tmp_path, {"w": torch.randn(64, 64)})  # 256 pieces of 64 bytes, 20 ms each: 5 s for one reader
    lock, now, most, reads = threading.Lock(), [0], [0], [0]
    real = stream._read

    def counted(path: Path, start: int, size: int, into: memoryview) -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        real(path, start, size, into)
        with lock:
            now[0] -= 1
            reads[0] += 1

    monkeypatch.setattr(stream, "_read", counted)
    reading = stream.start_reading([f], torch.device("cpu"), chunk_bytes=64, readers=4, beside=1)
    deadline = time.monotonic() + 30
    while reads[0] < 3 and time.monotonic() < deadline:  # a few pieces read, one at a time
        time.sleep(0.01)
    before = most[0]
    reading.wait()
    assert reads[0] == 256 and before == 1 and most[0] > 1
    assert torch.equal(reading.tensors["w"], load_file(str(f))["w"])


def test_a_group_is_read_into_one_buffer_in_its_order(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    tensors = {"q": torch.randn(8, 6, generator=g), "k": torch.randn(2, 6, generator=g),
               "v": torch.randn(2, 6, generator=g), "other": torch.randn(3, 5, generator=g),
               "wide": torch.randn(2, 7, generator=g)}
    f = _write(tmp_path, tensors)
    got = stream.read_state_dict([f], torch.device("cpu"))  # no groups: each its own allocation
    assert len({t.untyped_storage().data_ptr() for t in got.values()}) == len(tensors)
    reading = stream.start_reading([f], torch.device("cpu"), chunk_bytes=40,
                                   groups=[("q", "k", "v"), ("other", "wide"), ("q", "missing")])
    reading.wait()
    out = reading.tensors
    assert all(_same_bytes(out[k], t) for k, t in tensors.items())
    q, k, v = out["q"], out["k"], out["v"]
    assert len({t.untyped_storage().data_ptr() for t in (q, k, v)}) == 1
    assert (k.storage_offset(), v.storage_offset()) == (q.storage_offset() + q.numel(), q.storage_offset() + 60)
    # rows of another length, or a key the files lack: each tensor its own allocation
    assert out["other"].untyped_storage().data_ptr() != out["wide"].untyped_storage().data_ptr()


def test_cancel_stops_the_readers_after_their_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _write(tmp_path, {"w": torch.randn(64, 64)})  # 16 KiB: 64 pieces of 256 bytes
    gate, done = gate_reads(monkeypatch)
    reading = stream.start_reading([f], torch.device("cpu"), chunk_bytes=256, readers=2)
    canceller = threading.Thread(target=reading.cancel)
    canceller.start()
    deadline = time.monotonic() + 30
    while not reading._stop and time.monotonic() < deadline:  # the stop is asked for while the readers are held
        time.sleep(0.01)
    gate.set()
    canceller.join(30)
    assert not canceller.is_alive() and reading.done()
    assert done[0] <= 2 and reading.tensors == {}  # the tensors let go
    with pytest.raises(ModelLoadError, match="stopped before its end"):  # its tensors are not the checkpoint's
        reading.wait()


def test_a_failed_read_is_raised_by_wait_at_each_call(tmp_path: Path) -> None:
    f = _write(tmp_path, {"w": torch.ones(1000)})
    f.write_bytes(f.read_bytes()[:-100])
    reading = stream.start_reading([f], torch.device("cpu"), chunk_bytes=512)
    for _ in range(2):
        with pytest.raises(ModelLoadError, match="truncated"):
            reading.wait()


def test_the_tiny_checkpoint_as_safetensors_reads_it(tiny_dir: Path) -> None:
    files = sorted(tiny_dir.glob("*.safetensors"))
    got = stream.read_state_dict(files, torch.device("cpu"), chunk_bytes=4096)
    want = {k: v for f in files for k, v in load_file(str(f)).items()}
    assert got.keys() == want.keys()
    assert all(_same_bytes(got[k], want[k]) for k in want)


def test_from_pretrained_keeps_the_tensors_it_is_given(tiny_dir: Path) -> None:
    """The load's memory rests on this: transformers takes the state dict's tensors as the parameters (in the
    checkpoint's dtype: the tiny one stores float32), so the weights are on the device once, not twice."""
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    from holodesk.policy.holotron.checkpoint import read_checkpoint
    from holodesk.policy.holotron.hf_config import translate_config

    info = read_checkpoint(tiny_dir)
    sd = stream.read_state_dict(info.weight_files, torch.device("cpu"))
    storages = {t.untyped_storage().data_ptr() for t in sd.values()}
    model = NemotronH_Omni_Reasoning_V3.from_pretrained(None, config=translate_config(info, attn_implementation="sdpa"),
                                                        state_dict=sd, dtype=torch.float32, device_map={"": "cpu"})
    copied = [n for n, p in model.named_parameters() if p.untyped_storage().data_ptr() not in storages]
    # not from the state dict: the part the checkpoint lacks, and the vision layer scales transformers renames
    assert all("video_patch_projection" in n or "layer_scale" in n for n in copied), copied
    assert len(copied) <= 5


def test_a_truncated_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(1000)}, str(f))
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match="truncated") as err:
        stream.read_state_dict([f], torch.device("cpu"), chunk_bytes=512)
    assert "Download the checkpoint again" in err.value.hint


def test_a_header_whose_range_is_not_the_tensor_size_is_named(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(8)}, str(f))
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = raw[8:8 + n].replace(b'"shape":[8]', b'"shape":[9]')
    assert header != raw[8:8 + n]
    f.write_bytes(raw[:8] + header + raw[8 + n:])
    with pytest.raises(ModelLoadError, match="spans 32 bytes, not 36"):
        stream.read_state_dict([f], torch.device("cpu"))


def test_an_unmapped_dtype_is_named_before_reading(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(4, dtype=torch.float8_e4m3fn), "v": torch.ones(2)}, str(f))
    assert safetensors_header(f)["w"].dtype == "F8_E4M3"
    assert stream.readable([f]) == "model.safetensors holds tensors of dtype F8_E4M3"
    with pytest.raises(ModelLoadError, match="F8_E4M3"):
        stream.read_state_dict([f], torch.device("cpu"))


def test_a_failed_read_is_a_load_error(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FAKE device: the reader is replaced by one that runs out of memory, as a card too small for bf16 would, so
    that the CUDA branch of the loader runs here; the user gets a ModelLoadError, not torch's exception."""
    from holodesk.policy.holotron.checkpoint import read_checkpoint
    from holodesk.policy.holotron.loader import _start_reading

    def out_of_memory(*_a: object, **_k: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB")

    monkeypatch.setattr(stream, "start_reading", out_of_memory)
    with pytest.raises(ModelLoadError, match="OutOfMemoryError: CUDA out of memory"):
        _start_reading(read_checkpoint(tiny_dir), None, torch.device("cuda"))


def test_header_offsets_count_from_the_file_start(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    save_file({"x": torch.arange(6, dtype=torch.int32)}, str(f))
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    entry = safetensors_header(f)["x"]
    assert json.loads(raw[8:8 + n])["x"]["data_offsets"] == [entry.begin - 8 - n, entry.end - 8 - n]
    assert torch.equal(torch.frombuffer(bytearray(raw[entry.begin:entry.end]), dtype=torch.int32),
                       torch.arange(6, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_load_reads_through_page_locked_buffers_and_matches_transformers(
        tiny_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    from holodesk.policy.holotron.checkpoint import read_checkpoint
    from holodesk.policy.holotron.hf_config import translate_config
    from holodesk.policy.holotron.layout import lay_out_qkv
    from holodesk.policy.holotron.loader import _from_pretrained, load_holotron

    with caplog.at_level(logging.INFO, logger="holodesk.policy.holotron.loader"):
        loaded = load_holotron(tiny_dir, dtype="bfloat16", device="cuda")
    assert any("page-locked" in r.getMessage() for r in caplog.records)
    assert loaded.weights_reader.startswith("page-locked, 8 readers")
    info = read_checkpoint(tiny_dir)
    # transformers' own reader (no weight files given) on the same folder: the same parameters, bit for bit
    stock, report = _from_pretrained(tiny_dir, translate_config(info, attn_implementation="sdpa"), torch.bfloat16,
                                     None, torch.device("cuda"), "sdpa")
    lay_out_qkv(stock)
    ours, theirs = loaded.model.state_dict(), stock.state_dict()
    assert ours.keys() == theirs.keys()
    missing = set(report["missing_keys"])  # not in the checkpoint: initialised at random by either load
    assert missing and all("video_patch_projection" in k for k in missing), missing
    differ = [k for k in theirs if k not in missing and not _same_bytes(ours[k], theirs[k])]
    assert not differ, differ
    assert all(p.device.type == "cuda" for p in loaded.model.parameters())
    assert loaded.model.generation_config.eos_token_id == stock.generation_config.eos_token_id


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_load_names_a_missing_key(tiny_dir: Path, tmp_path: Path) -> None:
    import shutil

    from holodesk.policy.holotron.loader import load_holotron
    from tests.policy.holotron.test_loading import _rewrite

    copy = Path(shutil.copytree(tiny_dir, tmp_path / "copy"))
    key = "language_model.backbone.layers.3.mixer.q_proj.weight"
    _rewrite(copy, lambda t: t.pop(key, None))
    with pytest.raises(ModelLoadError) as err:
        load_holotron(copy, dtype="bfloat16", device="cuda")
    assert key in str(err.value)
