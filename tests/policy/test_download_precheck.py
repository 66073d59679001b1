"""A checkpoint Holodesk cannot run is refused before any weight is downloaded: ``resolve_source`` as the local
policy calls it, and ``holodesk download``, fetch the small files first (config.json, the weight index), check the
family and the size (:func:`holodesk.policy.native.families.check_checkpoint_before_weights`), and only then the
weights.
Against the loopback hub (tests/helpers/hub.py: a real HTTP server playing huggingface.co); the assertions read
the requests the server received and the files in the cache."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from holodesk.cli import main as holodesk
from holodesk.download.cache import repo_folder
from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import check_checkpoint_before_weights
from holodesk.policy.source import resolve_source
from tests.helpers.hub import LoopbackHub, loopback_hub

SHARD = "model-00001-of-00001.safetensors"
SHARD_BYTES = random.Random(32).randbytes(256 * 1024)


def _index(total_size: int) -> bytes:
    return json.dumps({"metadata": {"total_size": total_size}, "weight_map": {"lm_head.weight": SHARD}}).encode()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LoopbackHub]:
    from huggingface_hub import constants

    with loopback_hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # no hub token
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        yield server


def _publish(hub: LoopbackHub, repo: str, config: dict[str, object], total_size: int) -> None:
    hub.add_repo(repo, {"config.json": json.dumps(config).encode(), "model.safetensors.index.json": _index(total_size),
                        SHARD: SHARD_BYTES})


def fetch(name: str) -> Path:
    """The checkpoint folder for ``name``, resolved as :func:`holodesk.policy.local.load_local_policy` does."""
    return resolve_source(name, before_weights=check_checkpoint_before_weights)


def _weights_fetched(hub: LoopbackHub, tmp_path: Path, repo: str) -> bool:
    blobs = repo_folder(repo, tmp_path / "hub-cache") / "blobs"
    on_disk = [p for p in blobs.glob("*") if p.stat().st_size == len(SHARD_BYTES)] if blobs.exists() else []
    return bool(hub.gets(SHARD)) or bool(on_disk)


def test_an_unsupported_family_is_refused_before_any_weight(hub: LoopbackHub, tmp_path: Path) -> None:
    _publish(hub, "someone/llama-agent", {"model_type": "llama"}, 16_000_000_000)
    with pytest.raises(ModelLoadError, match="'llama', which Holodesk does not run locally") as caught:
        fetch("someone/llama-agent")
    assert "Supported:" in caught.value.hint
    assert hub.gets("config.json")  # the config was read from the hub
    assert not _weights_fetched(hub, tmp_path, "someone/llama-agent")


def test_a_listed_model_with_weights_of_another_size_is_refused_before_any_weight(hub: LoopbackHub,
                                                                                  tmp_path: Path) -> None:
    _publish(hub, "Hcompany/Holo2-8B", {"model_type": "qwen3_vl"}, 1_000_000_000)  # Holo2-8B is ~18 GB in bf16
    with pytest.raises(ModelLoadError, match="not the checkpoint Holodesk lists for it"):
        fetch("holo2-8b")
    assert not _weights_fetched(hub, tmp_path, "Hcompany/Holo2-8B")


def test_a_supported_checkpoint_downloads_whole(hub: LoopbackHub, tmp_path: Path) -> None:
    _publish(hub, "Hcompany/Holo2-8B", {"model_type": "qwen3_vl"}, 17_500_000_000)
    folder = fetch("Hcompany/Holo2-8B")
    assert (folder / SHARD).read_bytes() == SHARD_BYTES
    names = [path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]
    assert names.index(SHARD) > max(names.index("config.json"), names.index("model.safetensors.index.json"))


def test_holodesk_download_refuses_an_unsupported_family_before_any_weight(hub: LoopbackHub, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _publish(hub, "someone/llama-agent", {"model_type": "llama"}, 16_000_000_000)
    code = holodesk(["download", "someone/llama-agent", "--cache-dir", str(tmp_path / "hub-cache")])
    assert code != 0
    assert "Holodesk does not run locally" in capsys.readouterr().err
    assert hub.gets("config.json")
    assert not _weights_fetched(hub, tmp_path, "someone/llama-agent")
