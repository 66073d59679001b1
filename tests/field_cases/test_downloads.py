"""Field case F30 (broken downloads) against a real HTTP server on loopback playing the hub.

:func:`tests.helpers.hub.loopback_hub` answers the requests huggingface_hub makes (model listing with sizes
and sha256, ``/resolve`` with Range) and injects each fault of the field case: a killed download, a
dropped connection without Range, a short body with a matching Content-Length, damaged bytes, 401 (gated),
404, 5xx, a server that accepts and never answers, no server at all, and a full disk (a real small tmpfs,
mounted as root; skipped with the reason where mounting is not permitted). ``HF_ENDPOINT`` points at it.
Every test asserts the message and advice, and what is on disk afterwards.

The shard is 24 MiB of seeded random bytes: huggingface_hub writes in 10 MiB chunks
(``constants.DOWNLOAD_CHUNK_SIZE``), so partial files hold whole chunks.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from holodesk.download.cache import cached_snapshot, repo_folder
from holodesk.download.errors import DownloadCancelled, DownloadError
from holodesk.download.manager import download_model
from holodesk.download.progress import DownloadProgress
from tests.helpers.hub import LoopbackHub, loopback_hub, partial_sizes

ROOT = Path(__file__).resolve().parents[2]
REPO = "owner/model"
SHARD = "model.safetensors"
MiB = 1024 * 1024
SHARD_BYTES = random.Random(30).randbytes(24 * MiB)
CONFIG = b'{"model_type": "qwen3_vl"}\n'  # a family Holodesk runs: the loader checks it before the weights
CHUNK = 10 * MiB


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LoopbackHub]:
    with loopback_hub() as server:
        server.add_repo(REPO, {"config.json": CONFIG, "notes.txt": b"", SHARD: SHARD_BYTES})
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_fs(mib)``: a fresh tmpfs of that size (unmounted afterwards)."""
    mounts: list[Path] = []

    def make(mib: int) -> Path:
        target = tmp_path / f"small{len(mounts)}"
        target.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(target)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"a small tmpfs cannot be mounted here (mount needs root): {done.stderr.strip()}")
        mounts.append(target)
        return target

    yield make
    for target in mounts:
        subprocess.run(["umount", str(target)], check=False)


def _blobs(cache: Path) -> Path:
    return repo_folder(REPO, cache) / "blobs"


def _partials(cache: Path) -> list[Path]:
    return list(partial_sizes(cache, REPO))


def _complete_blobs(cache: Path) -> list[Path]:
    folder = _blobs(cache)
    return sorted(p for p in folder.iterdir() if not p.name.endswith(".incomplete")) if folder.is_dir() else []


def _assert_complete(cache: Path) -> Path:
    snapshot = cached_snapshot(REPO, cache_dir=cache)
    assert snapshot is not None
    assert hashlib.sha256((snapshot / SHARD).read_bytes()).digest() == hashlib.sha256(SHARD_BYTES).digest()
    assert (snapshot / "config.json").read_bytes() == CONFIG and (snapshot / "notes.txt").read_bytes() == b""
    assert _partials(cache) == []
    return snapshot


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_F30_download_checks_every_file_and_reports_one_bar_in_bytes(hub: LoopbackHub, cache: Path) -> None:
    reports: list[DownloadProgress] = []
    hub.faults.bytes_per_s = 12 * MiB  # about two seconds, so the bar reports speed and time left
    result = download_model(REPO, cache_dir=cache, progress=reports.append)
    snapshot = _assert_complete(cache)
    assert result.folder == snapshot and result.downloaded_bytes == len(SHARD_BYTES) + len(CONFIG)
    commit = hub.repos[REPO].commit
    assert result.commit == commit and (repo_folder(REPO, cache) / "refs" / "main").read_text() == commit
    # the blob is named after the sha256 the listing gives, as huggingface_hub's own cache does
    assert (snapshot / SHARD).resolve() == _blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()
    total = len(SHARD_BYTES) + len(CONFIG)
    done = [r.done_bytes for r in reports]
    assert done == sorted(done) and reports[-1].done_bytes == total and {r.total_bytes for r in reports} == {total}
    assert any(r.bytes_per_s > 0 and r.eta_s is not None for r in reports)
    line = next(r for r in reports if r.eta_s is not None and r.done_bytes < total).describe()
    assert line.startswith(f"Downloading {REPO}: ") and " of 25.2 MB" in line and "/s" in line and "left" in line
    assert all(r.folder == repo_folder(REPO, cache) for r in reports)
    # a second run finds everything in the cache and fetches nothing
    hub.requests.clear()
    again = download_model(REPO, cache_dir=cache)
    assert again.downloaded_bytes == 0 and hub.gets(SHARD) == []


def test_F30_killed_download_resumes_from_the_partial_file(hub: LoopbackHub, cache: Path) -> None:
    """``holodesk download`` is killed (SIGKILL) half way; the next run continues with a Range request."""
    hub.faults.bytes_per_s = 8 * MiB
    env = {**os.environ, "PYTHONPATH": str(ROOT / "app"), "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    child = subprocess.Popen([sys.executable, "-m", "holodesk", "download", REPO, "--cache-dir", str(cache)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any(n >= CHUNK for n in partial_sizes(cache, REPO).values()), 90, "a 10 MiB partial file")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    [partial] = _partials(cache)
    kept = partial.stat().st_size
    assert 0 < kept < len(SHARD_BYTES) and partial.read_bytes() == SHARD_BYTES[:kept]
    assert not (_blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()).exists()
    hub.faults.bytes_per_s = None
    hub.requests.clear()
    result = download_model(REPO, cache_dir=cache)
    assert hub.gets(SHARD) == [f"bytes={kept}-"]
    assert result.downloaded_bytes == len(SHARD_BYTES) - kept and result.reused_bytes >= kept
    _assert_complete(cache)


def test_F30_stop_ends_the_download_within_a_second_and_leaves_it_resumable(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.bytes_per_s = 6 * MiB
    cancel = threading.Event()
    stopped_at: list[float] = []

    def on_progress(report: DownloadProgress) -> None:
        if report.done_bytes >= CHUNK and not cancel.is_set():
            stopped_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(DownloadCancelled) as info:
        download_model(REPO, cache_dir=cache, progress=on_progress, cancel=cancel)
    elapsed = time.monotonic() - stopped_at[0]
    assert elapsed < 1.0, f"Stop took {elapsed:.2f} s"
    assert info.value.kind == "cancelled" and "resume" in info.value.advice
    [partial] = _partials(cache)
    kept = partial.stat().st_size
    time.sleep(1.0)  # the stream is still open for a moment: nothing more may be written to the file
    assert partial.stat().st_size == kept and partial.read_bytes() == SHARD_BYTES[:kept]
    assert not (_blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()).exists()
    hub.faults.bytes_per_s = None
    hub.requests.clear()
    download_model(REPO, cache_dir=cache)
    assert hub.gets(SHARD) == [f"bytes={kept}-"]
    _assert_complete(cache)


def test_F30_stop_is_honoured_while_the_callers_thread_is_busy(hub: LoopbackHub, cache: Path) -> None:
    """Setting ``cancel`` alone stops the writes, whatever the caller's thread is doing: here it sits in the
    progress callback for 5 s, long enough for the rest of the shard (14 MiB at 6 MiB/s) to arrive, and
    the partial file must not grow meanwhile (a SIGINT handler that only sets the event relies on this)."""
    hub.faults.bytes_per_s = 6 * MiB
    cancel = threading.Event()
    sizes: list[int] = []

    def on_disk() -> int:  # bytes of the shard on disk: its partial file, or all of it once stored
        partial = list(partial_sizes(cache, REPO).values())
        return partial[0] if partial else len(SHARD_BYTES)

    def on_progress(report: DownloadProgress) -> None:
        if report.done_bytes >= CHUNK and not cancel.is_set():
            cancel.set()
            time.sleep(0.5)  # a write begun before the event was set has ended
            sizes.append(on_disk())
            time.sleep(4.5)  # the caller's thread is busy; the next 10 MiB chunk arrives within 2 s
            sizes.append(on_disk())

    with pytest.raises(DownloadCancelled) as info:
        download_model(REPO, cache_dir=cache, progress=on_progress, cancel=cancel)
    assert info.value.kind == "cancelled" and "resume" in info.value.advice
    assert len(sizes) == 2 and sizes[0] == sizes[1] < len(SHARD_BYTES), sizes
    [partial] = _partials(cache)
    assert partial.stat().st_size == sizes[0] and partial.read_bytes() == SHARD_BYTES[:sizes[0]]
    assert not (_blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()).exists()


def test_F30_dropped_connections_resume_with_range(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.drop_after = 12 * MiB  # every response stops after 12 MiB
    download_model(REPO, cache_dir=cache)
    ranges = hub.gets(SHARD)
    assert ranges[0] is None and len(ranges) >= 2 and all(r and r.startswith("bytes=") for r in ranges[1:])
    _assert_complete(cache)


def test_F30_drops_without_range_end_after_the_retry_budget(hub: LoopbackHub, cache: Path) -> None:
    """The server drops every connection and ignores Range: each retry starts the file again. This used to
    loop forever; it ends after the retry budget with its own message."""
    hub.faults.drop_after = 12 * MiB
    hub.faults.ignore_range = True
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, retry_budget=2)
    assert time.monotonic() - started < 60
    assert info.value.kind == "unstable"
    assert "does not resume" in info.value.message and SHARD in info.value.message
    assert "try again later" in info.value.advice
    assert len(hub.gets(SHARD)) <= 4
    assert not (_blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()).exists()
    [partial] = _partials(cache)  # what arrived is a true prefix, kept for a server that resumes
    assert partial.read_bytes() == SHARD_BYTES[:partial.stat().st_size]


def test_F30_short_body_with_matching_length_is_never_stored(hub: LoopbackHub, cache: Path) -> None:
    """The server sends 5 MiB with ``Content-Length: 5242880`` for a 24 MiB file (the HTTP exchange is
    consistent); the hub's listing says otherwise, so nothing is stored as complete."""
    hub.faults.truncate_to = 5 * MiB
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, retry_budget=2)
    assert info.value.kind == "truncated"
    assert f"{5 * MiB} of {len(SHARD_BYTES)} bytes" in info.value.message and SHARD in info.value.message
    assert cached_snapshot(REPO, cache_dir=cache) is None
    assert not (_blobs(cache) / hashlib.sha256(SHARD_BYTES).hexdigest()).exists()
    assert not (repo_folder(REPO, cache) / "snapshots" / hub.repos[REPO].commit / SHARD).exists()
    [partial] = _partials(cache)
    assert partial.stat().st_size == 5 * MiB
    hub.faults.truncate_to = None  # the server is fixed: the rest comes with a Range request
    hub.requests.clear()
    download_model(REPO, cache_dir=cache)
    assert hub.gets(SHARD) == [f"bytes={5 * MiB}-"]
    _assert_complete(cache)


def test_F30_damaged_bytes_fail_the_sha256_and_are_deleted(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.corrupt = SHARD
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, retry_budget=1)
    assert info.value.kind == "corrupt"
    assert "sha256" in info.value.message and SHARD in info.value.message and "deleted" in info.value.message
    assert "Nothing damaged was stored" in info.value.advice
    assert _partials(cache) == [] and all(b.stat().st_size < MiB for b in _complete_blobs(cache))
    assert cached_snapshot(REPO, cache_dir=cache) is None
    hub.faults.corrupt = None
    download_model(REPO, cache_dir=cache)
    _assert_complete(cache)


def test_F30_gated_model_says_how_to_log_in(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.gated = True
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    error = info.value
    assert error.kind == "gated" and "gated" in error.message
    assert f"{hub.url}/{REPO}" in error.advice and "accept its terms" in error.advice
    assert f"holodesk download {REPO} --login" in error.advice and "keychain" in error.advice
    assert _partials(cache) == [] and _complete_blobs(cache) == []


def test_F30_wrong_repo_id_404(hub: LoopbackHub, cache: Path) -> None:
    with pytest.raises(DownloadError) as info:
        download_model("owner/no-such-model", cache_dir=cache)
    assert info.value.kind == "not_found" and "no model owner/no-such-model" in info.value.message
    assert "Check the repo id" in info.value.advice
    assert not cache.exists() or list(cache.iterdir()) == []


def test_F30_bare_404_from_a_mirror_says_what_to_check(hub: LoopbackHub, cache: Path) -> None:
    """A hub (or mirror) that answers 404 with no reason code: "not found", naming the hub it asked, in one line."""
    hub.faults.api_status = 404
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    error = info.value
    assert error.kind == "not_found" and REPO in error.message and hub.url in error.message, error
    assert "404" in error.message and "\n" not in error.message and "\\n" not in error.message, error.message
    assert "Check the repo id" in error.advice and "HF_ENDPOINT" in error.advice, error.advice
    assert _partials(cache) == [] and _complete_blobs(cache) == []

def test_F30_server_errors_say_try_later(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.api_status = 503
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    assert info.value.kind == "server" and "503" in info.value.message and "try again later" in info.value.advice
    hub.faults.api_status = None
    hub.faults.resolve_status = 500  # the listing works, the files fail: retried within the budget
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, retry_budget=1)
    assert info.value.kind == "server" and "500" in info.value.message and "try again later" in info.value.advice
    assert len(hub.gets("config.json")) == 2
    assert _partials(cache) == [] and _complete_blobs(cache) == []


def test_F30_silent_server_ends_at_the_stall_timeout(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.silent = True
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, stall_timeout_s=2.0)
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 6.0
    assert info.value.kind == "stalled" and "sent nothing for 2 s" in info.value.message
    assert "try again later" in info.value.advice
    assert _partials(cache) == [] and _complete_blobs(cache) == []


def test_F30_silent_server_while_sending_a_file(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.before_body = lambda name: hub.released.wait() if name == SHARD else None
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache, stall_timeout_s=2.0)
    assert time.monotonic() - started < 8.0
    assert info.value.kind == "stalled"
    assert _partials(cache) == []


def test_F30_offline(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    assert info.value.kind == "offline" and f"127.0.0.1:{port}" in info.value.message
    assert "internet connection" in info.value.advice
    assert not cache.exists() or list(cache.iterdir()) == []


def test_F30_disk_full_is_found_before_the_first_byte(hub: LoopbackHub, small_fs: Callable[[int], Path]) -> None:
    cache = small_fs(8) / "cache"
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    error = info.value
    assert error.kind == "disk_full"
    assert str(cache.parent) in error.message and "free" in error.message and "needs 29.4 MB" in error.message
    assert "HF_HUB_CACHE" in error.advice and "--cache-dir" in error.advice
    assert hub.gets(SHARD) == [] and hub.gets("config.json") == []
    assert _partials(cache) == [] and _complete_blobs(cache) == []


def test_F30_disk_filling_up_during_the_download(hub: LoopbackHub, small_fs: Callable[[int], Path]) -> None:
    """There is room when the download starts; another program fills the disk while it runs."""
    disk = small_fs(32)
    cache = disk / "cache"
    filler = disk / "filler"

    def fill(name: str) -> None:
        if name == SHARD and not filler.exists():
            filler.write_bytes(b"\0" * (16 * MiB))

    hub.faults.before_body = fill
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    assert info.value.kind == "disk_full" and "filled up" in info.value.message
    assert str(repo_folder(REPO, cache)) in info.value.message and "HF_HUB_CACHE" in info.value.advice
    [partial] = _partials(cache)
    assert partial.read_bytes() == SHARD_BYTES[:partial.stat().st_size]
    filler.unlink()
    hub.faults.before_body = None
    download_model(REPO, cache_dir=cache)
    _assert_complete(cache)


def test_F30_orphan_partial_files_are_removed(hub: LoopbackHub, cache: Path) -> None:
    blobs = _blobs(cache)
    blobs.mkdir(parents=True)
    orphan = blobs / "0123abcd.5f3e2a1b.incomplete"  # huggingface_hub's per-process name, from a killed run
    orphan.write_bytes(b"x" * 1000)
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    fresh = blobs / "fedc.99999999.incomplete"  # written to a moment ago: maybe another download's
    fresh.write_bytes(b"y")
    download_model(REPO, cache_dir=cache)
    assert not orphan.exists() and fresh.exists()
    fresh.unlink()
    _assert_complete(cache)


# ------------------------------------------------------------------- the loader, the command, the keychain


def _holodesk(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "holodesk", *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)


def _child_env(hub: LoopbackHub) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "app"), "HF_ENDPOINT": hub.url,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def test_F30_holodesk_download_prints_bytes_speed_and_advice(hub: LoopbackHub, cache: Path) -> None:
    hub.faults.bytes_per_s = 16 * MiB
    done = _holodesk("download", REPO, "--cache-dir", str(cache), env=_child_env(hub))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(f"Downloading {REPO}: ")]
    assert lines and " of 25.2 MB" in lines[-1] and lines[-1].count("(") >= 1
    assert any("/s" in line and "left" in line for line in lines)
    assert f"{REPO} is ready in {repo_folder(REPO, cache)}" in done.stdout
    _assert_complete(cache)
    missing = _holodesk("download", "owner/no-such-model", "--cache-dir", str(cache), env=_child_env(hub))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no model owner/no-such-model" in missing.stderr and "Check the repo id" in missing.stderr
    hub.faults.api_status = 502
    failing = _holodesk("download", REPO, "--cache-dir", str(cache), env=_child_env(hub))
    assert failing.returncode == 2 and "answered 502" in failing.stderr and "try again later" in failing.stderr


def test_holodesk_download_takes_the_chosen_models_hub_id(hub: LoopbackHub, cache: Path, tmp_path: Path) -> None:
    """`holodesk download holo2-8b` fetches the registry model's hub repo; with no argument it fetches the
    'model' setting's model (here set to Holo3.1-9B by its short name)."""
    for repo in ("Hcompany/Holo2-8B", "Hcompany/Holo-3.1-9B"):
        hub.add_repo(repo, {"config.json": CONFIG})
    env = _child_env(hub)
    by_key = _holodesk("download", "holo2-8b", "--cache-dir", str(cache), env=env)
    assert by_key.returncode == 0, by_key.stderr
    assert f"Hcompany/Holo2-8B is ready in {repo_folder('Hcompany/Holo2-8B', cache)}" in by_key.stdout
    assert cached_snapshot("Hcompany/Holo2-8B", cache_dir=cache) is not None
    config = tmp_path / "settings.toml"
    config.write_text('model = "holo3.1-9b"\n', encoding="utf-8")
    from_setting = _holodesk("download", "--cache-dir", str(cache), env={**env, "HOLODESK_CONFIG": str(config)})
    assert from_setting.returncode == 0, from_setting.stderr
    assert "Hcompany/Holo-3.1-9B is ready" in from_setting.stdout
    assert cached_snapshot("Hcompany/Holo-3.1-9B", cache_dir=cache) is not None


def test_holodesk_download_of_a_mistyped_short_name_lists_the_models(hub: LoopbackHub, cache: Path) -> None:
    """A name that is neither a listed model nor owner/name is refused before any request, with the list of
    models (offline it used to end in "cannot reach the model hub")."""
    before = len(hub.requests)
    typo = _holodesk("download", "holo9", "--cache-dir", str(cache), env=_child_env(hub))
    assert typo.returncode != 0
    assert "'holo9' is neither a model Holodesk lists nor a Hugging Face repo id (owner/name)" in typo.stderr
    assert "holo2-8b" in typo.stderr and "Traceback" not in typo.stderr
    assert len(hub.requests) == before


def test_F30_loader_downloads_through_the_manager_and_falls_back_to_the_cache(
        hub: LoopbackHub, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from huggingface_hub import constants

    from holodesk.policy.source import resolve_source

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    stages: list[tuple[str, float | None]] = []
    folder = resolve_source(REPO, progress=lambda stage, fraction: stages.append((stage, fraction)))
    assert folder == _assert_complete(cache)
    assert stages and stages[-1][0].startswith(f"Downloading {REPO}: 25.2 MB of 25.2 MB (100%)")
    assert stages[-1][1] == 1.0
    hub.faults.api_status = 503  # the hub fails later: the complete cached copy is used, with a warning
    assert resolve_source(REPO) == folder
    assert "answered 503" in caplog.text and "using the cached copy" in caplog.text
    hub.faults.api_status = None
    with pytest.raises(DownloadError) as info:  # a wrong repo id is not hidden behind the cache
        resolve_source("owner/no-such-model")
    assert info.value.kind == "not_found"
    # Stop (the app's stop event, handed down by build_policy and load_holotron) ends the download at once
    hub.add_repo("owner/other", {"config.json": CONFIG, SHARD: SHARD_BYTES})
    hub.faults.bytes_per_s = 4 * MiB
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(DownloadCancelled):
        resolve_source("owner/other", cancel=stop)
    assert stop.is_set()


def test_F30_bad_cached_file_at_load_time_says_how_to_repair_it(
        hub: LoopbackHub, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged file in the cache (here: weights cut short, as an older Holodesk stored them) makes the
    load fail with the repair in the message; ``holodesk download`` then checks and re-fetches it."""
    from huggingface_hub import constants

    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.errors import ModelLoadError
    from holodesk.policy.holotron.loader import load_holotron

    tiny = write_tiny_checkpoint(tmp_path / "tiny", seed=0)
    hub.add_repo("owner/tiny", {p.name: p.read_bytes() for p in tiny.iterdir() if p.is_file()})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    folder = download_model("owner/tiny", cache_dir=cache).folder
    weights = sorted(folder.glob("*.safetensors"))[-1]
    blob = weights.resolve()
    data = blob.read_bytes()
    blob.chmod(0o644)
    blob.write_bytes(data[:len(data) // 2])
    with pytest.raises(ModelLoadError) as info:
        load_holotron(folder, device="cpu", dtype="float32")
    text = str(info.value)
    assert "Traceback" not in text and "holodesk download owner/tiny" in text
    assert str(repo_folder("owner/tiny", cache)) in text and "delete" in text
    repaired = _holodesk("download", "owner/tiny", "--cache-dir", str(cache), env=_child_env(hub))
    assert repaired.returncode == 0, repaired.stderr
    assert blob.read_bytes() == data
    assert load_holotron(folder, device="cpu", dtype="float32").model is not None


def test_F30_gated_model_token_from_login_is_kept_in_the_keychain(hub: LoopbackHub, tmp_path: Path) -> None:
    """``holodesk download MODEL --login`` stores the token in a real GNOME Keyring (private D-Bus session);
    the next download, in a fresh cache, sends it without being asked."""
    if not (shutil.which("gnome-keyring-daemon") and shutil.which("dbus-run-session")):
        pytest.skip("gnome-keyring-daemon / dbus-run-session not installed (apt-get install gnome-keyring dbus-daemon)")
    hub.faults.gated = True
    hub.faults.token = "hf_loopbackToken123"
    script = tmp_path / "script.sh"
    py = sys.executable
    script.write_text(
        "echo -n pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null\n"
        f'"{py}" -m holodesk download {REPO} --cache-dir "{tmp_path}/c1"; echo "first=$?"\n'
        f'echo hf_loopbackToken123 | "{py}" -m holodesk download {REPO} --login --cache-dir "{tmp_path}/c2"; '
        'echo "login=$?"\n'
        f'"{py}" -m holodesk download {REPO} --cache-dir "{tmp_path}/c3"; echo "again=$?"\n')
    home = tmp_path / "home"
    run_dir = tmp_path / "run"
    home.mkdir()
    run_dir.mkdir(mode=0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_RUNTIME_DIR": str(run_dir),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": str(ROOT / "app"), "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(["dbus-run-session", "--", "sh", str(script)], env=env, capture_output=True, text=True,
                          timeout=180)
    out = done.stdout + done.stderr
    assert "first=2" in out and f"holodesk download {REPO} --login" in out
    assert "login=0" in out and "The token is kept in the system keychain" in out
    assert "again=0" in out, out
    assert "hf_loopbackToken123" not in done.stderr
    for name in ("c2", "c3"):
        snapshot = cached_snapshot(REPO, cache_dir=tmp_path / name)
        assert snapshot is not None and (snapshot / SHARD).read_bytes() == SHARD_BYTES


def test_F30_holodesk_download_rechecks_the_cache_and_replaces_a_damaged_file(hub: LoopbackHub, cache: Path) -> None:
    """A cached file with the right size but wrong bytes (bit rot, a copy edited by hand) is only found by
    hashing it again, which ``holodesk download`` does (``verify_cached``)."""
    snapshot = download_model(REPO, cache_dir=cache).folder
    blob = (snapshot / SHARD).resolve()
    damaged = bytearray(SHARD_BYTES)
    damaged[1000] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(damaged))
    hub.requests.clear()
    reports: list[DownloadProgress] = []
    result = download_model(REPO, cache_dir=cache, verify_cached=True, progress=reports.append)
    assert hub.gets(SHARD) == [None] and result.downloaded_bytes == len(SHARD_BYTES)
    assert reports[-1].stage == "downloading" and reports[-1].done_bytes == reports[-1].total_bytes
    _assert_complete(cache)


def test_F30_two_downloads_of_the_same_model_share_the_work(hub: LoopbackHub, cache: Path) -> None:
    """Two downloads at once (the app and ``holodesk download``, here two threads) never write the same
    partial file: the second waits on the file's lock, then finds the verified file."""
    hub.faults.bytes_per_s = 12 * MiB
    results: list[object] = []

    def one() -> None:
        try:
            results.append(download_model(REPO, cache_dir=cache))
        except Exception as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 2 and all(not isinstance(r, Exception) for r in results), results
    assert hub.gets(SHARD) == [None]
    _assert_complete(cache)


def test_F30_a_stopped_download_restarts_at_once(hub: LoopbackHub, cache: Path) -> None:
    """Stop while the server sends nothing, then start again: the new download does not wait for the old
    request, which is still open on the network, and resumes the file."""
    gate = threading.Event()
    hub.faults.before_body = lambda name: gate.wait() if name == SHARD else None
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    with pytest.raises(DownloadCancelled):
        download_model(REPO, cache_dir=cache, cancel=cancel)
    hub.faults.before_body = None
    started = time.monotonic()
    download_model(REPO, cache_dir=cache)
    assert time.monotonic() - started < 5.0  # the old request would hold the file ~11 s (10 s read timeout)
    gate.set()  # the old request ends; it must not touch the finished file
    time.sleep(0.5)
    _assert_complete(cache)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_F30_ctrl_c_stops_holodesk_download_within_a_second(hub: LoopbackHub, cache: Path, inherited: str) -> None:
    """SIGINT stops ``holodesk download`` with exit 3, also where it inherited SIGINT ignored (how a
    background job of a non-interactive shell, e.g. a CI script, starts: ``trap '' INT`` is the same).
    The rest of the shard (14 MiB at 6 MiB/s) takes over two seconds, so exiting within one is a stop."""
    hub.faults.bytes_per_s = 6 * MiB
    command = [sys.executable, "-m", "holodesk", "download", REPO, "--cache-dir", str(cache)]
    if inherited == "ignored":  # the shell sets SIGINT ignored and execs Python, which keeps the same pid
        command = ["sh", "-c", "trap '' INT; exec \"$@\"", "sh", *command]
    child = subprocess.Popen(command, env=_child_env(hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: any(n >= CHUNK for n in partial_sizes(cache, REPO).values()), 90, "a 10 MiB partial file")
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = child.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 3 and took < 1.0, (child.returncode, took, err)
    assert "download stopped; run the same command again to resume it" in err and "Traceback" not in err
    [partial] = _partials(cache)
    kept = partial.stat().st_size
    time.sleep(0.5)
    assert partial.stat().st_size == kept and partial.read_bytes() == SHARD_BYTES[:kept]


def test_F30_a_file_damaged_at_the_source_is_fetched_twice_not_six_times(hub: LoopbackHub, cache: Path) -> None:
    """The hub sends the same damaged bytes every time: after one more try the download ends, instead of
    fetching the file again until the whole retry budget (5) is spent."""
    hub.faults.corrupt = SHARD
    with pytest.raises(DownloadError) as info:
        download_model(REPO, cache_dir=cache)
    assert info.value.kind == "corrupt"
    assert "arrived damaged 2 times" in info.value.message, info.value.message
    assert len(hub.gets(SHARD)) == 2
    assert _partials(cache) == [] and cached_snapshot(REPO, cache_dir=cache) is None


def test_F30_the_first_estimates_of_time_left_are_not_absurd(hub: LoopbackHub, cache: Path) -> None:
    """The hub's client hands bytes over in 10 MiB chunks; the time left given before the speed is known
    (a small file after a pause, then seconds until the first chunk) once read "771 h left". Every estimate given
    is of the order of the time that was really left (within ten times and ten seconds: the hub's pacing on
    loopback is bursty)."""
    reports: list[tuple[float, DownloadProgress]] = []
    hub.faults.bytes_per_s = 6 * MiB  # about 4 s for the 24 MiB shard
    # the hub is slow to start sending the small config.json (as a real hub's first answers are)
    hub.faults.before_body = lambda name: time.sleep(1.0) if name == "config.json" else None

    def seen(progress: DownloadProgress) -> None:
        reports.append((time.monotonic(), progress))

    download_model(REPO, cache_dir=cache, progress=seen)
    ended = time.monotonic()
    estimates = [(at, r.eta_s) for at, r in reports if r.eta_s is not None and r.done_bytes < r.total_bytes]
    assert estimates, "no time left was ever given"
    for at, eta in estimates:
        assert eta <= 10 * (ended - at) + 10, f"{eta:.0f} s left given with {ended - at:.1f} s really left"


def test_F30_progress_moves_in_small_steps_and_matches_the_bytes_on_disk(hub: LoopbackHub, cache: Path) -> None:
    """The bar follows the bytes as they arrive (not huggingface_hub's 10 MiB chunks), and each figure is
    what the cache folder holds at that moment (complete blobs plus partial files)."""
    hub.faults.bytes_per_s = 6 * MiB  # the 24 MiB shard takes about four seconds
    seen: list[tuple[int, int]] = []  # (reported bytes, bytes on disk when the report arrived)

    def record(report: DownloadProgress) -> None:
        partial = list(partial_sizes(cache, REPO).values())
        if report.file == SHARD and partial:  # config.json and the empty notes.txt are complete by then
            seen.append((report.done_bytes, len(CONFIG) + partial[0]))

    download_model(REPO, cache_dir=cache, progress=record)
    _assert_complete(cache)
    done = [d for d, _disk in seen]
    assert done, "no report while the shard was fetched"
    steps = [b - a for a, b in itertools.pairwise(done)]
    assert len(set(done)) >= 10, f"the bar moved only through {sorted(set(done))}"
    assert max(steps) <= 6 * MiB, f"a step of {max(steps) / MiB:.1f} MiB"
    # the worker keeps writing while a report is delivered: the disk may be ahead, by a chunk at most
    assert all(d <= disk <= d + 2 * MiB for d, disk in seen), seen
