"""The download manager's errors: :class:`DownloadError` with a ``kind`` (:data:`KINDS`) and ``advice`` for the
user, and :func:`classify`, which turns what huggingface_hub, httpx2 or the file system raised into one."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from holodesk.core.units import format_bytes
from holodesk.errors import ModelLoadError

KINDS = ("not_found", "gated", "auth", "server", "offline", "disk_full", "stalled", "unstable",
         "truncated", "corrupt", "cancelled")
"""Values of :attr:`DownloadError.kind`."""


class DownloadError(ModelLoadError):
    """A model download failed. ``str()`` is the message followed by the advice.

    Attributes:
        kind: one of :data:`KINDS`.
        advice: what the user can do (same text as ``hint``).
        repo_id: the model asked for.
        folder: the repo's cache folder (where partial files are kept).
    """

    def __init__(self, kind: str, message: str, advice: str, *, repo_id: str = "",
                 folder: Path | None = None) -> None:
        super().__init__(message, hint=advice)
        self.kind = kind
        self.advice = advice
        self.repo_id = repo_id
        self.folder = folder


class DownloadCancelled(DownloadError):
    """The download was stopped through the ``cancel`` event (kind ``"cancelled"``)."""


def login_advice(repo_id: str) -> str:
    """How to give Holodesk a hub token (kept in the system keychain)."""
    return (f"Run `holodesk download {repo_id} --login` and paste a read token from "
            "https://huggingface.co/settings/tokens; Holodesk keeps it in the system keychain.")


_RESUMES = "What was downloaded so far is kept and the download resumes."
"""The end of the advice for a failure that leaves a resumable download."""


def move_cache_advice() -> str:
    return ("or move the model cache to a disk with room: set HF_HUB_CACHE (or HF_HOME) to a folder there, "
            "or run `holodesk download MODEL --cache-dir FOLDER`")


def disk_full_error(repo_id: str, folder: Path, needed: int, free: int) -> DownloadError:
    """The error for a cache disk without room for ``needed`` bytes."""
    return DownloadError(
        "disk_full",
        f"not enough disk space to download {repo_id}: it needs {format_bytes(needed)} more in {folder}, "
        f"which has {format_bytes(free)} free",
        f"Free {format_bytes(max(0, needed - free))} on that disk, {move_cache_advice()}. {_RESUMES}",
        repo_id=repo_id, folder=folder)


def cancelled_error(repo_id: str, folder: Path) -> DownloadCancelled:
    """The error for a download stopped through ``cancel``; ``folder`` is the repo's cache folder."""
    return DownloadCancelled(
        "cancelled", f"the download of {repo_id} was stopped",
        "Start it again to resume where it stopped: the partial file is kept in "
        f"{folder / 'blobs'}.", repo_id=repo_id, folder=folder)


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return int(status) if isinstance(status, int) else None


def classify(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None, *,
             token_given: bool) -> DownloadError:
    """Turn an exception raised by huggingface_hub/httpx2/the file system into a :class:`DownloadError`
    with the advice for its kind (see :data:`KINDS`); a :class:`DownloadError` is returned as it is.

    The hub's answers are read first (:func:`_hub_refusal`), then a full disk (:func:`_disk_full`), then
    offline mode and the network (:func:`_network_failure`); anything else is a "server" error."""
    # lazy: start-up time (huggingface_hub's modules load in about 0.1 s; the tray imports this module)
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, DownloadError):
        return exc
    error = (_hub_refusal(exc, repo_id, endpoint, folder, token_given=token_given)
             or _disk_full(exc, repo_id, folder)
             or _network_failure(exc, repo_id, endpoint, folder))
    if error is not None:
        return error
    said = " ".join(str(exc).split())  # huggingface_hub's messages span lines: one line here
    if isinstance(exc, HfHubHTTPError):
        return DownloadError("server", f"the model hub answered {status_of(exc)} for {repo_id}: {said}",
                             f"Try again later. {_RESUMES}", repo_id=repo_id, folder=folder)
    return DownloadError("server", f"downloading {repo_id} failed: {type(exc).__name__}: {said}",
                         f"Try again later. {_RESUMES}", repo_id=repo_id, folder=folder)


def _hub_refusal(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None, *,
                 token_given: bool) -> DownloadError | None:
    """The error for a hub answer that refuses the request: a gated repo, a missing revision, file or repo
    ("not_found", a bare 404 too), a refused token or account ("auth": 401 with a token, 403), an overloaded or failing
    hub ("server": 5xx, 429); None for any other exception."""
    # lazy: start-up time (as above)
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    page = f"{endpoint.rstrip('/')}/{repo_id}"
    status = status_of(exc)
    if isinstance(exc, GatedRepoError):
        return DownloadError(
            "gated", f"{repo_id} is a gated model: its owners must grant you access first",
            f"Open {page}, sign in and accept its terms. {login_advice(repo_id)}",
            repo_id=repo_id, folder=folder)
    if isinstance(exc, RevisionNotFoundError):
        return DownloadError("not_found", f"{repo_id} has no revision by that name ({status})",
                             "Check the revision (branch, tag or commit) on the model page, or leave it out.",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, RemoteEntryNotFoundError):
        return DownloadError("not_found", f"a file listed for {repo_id} is missing on the hub ({status})",
                             "The repo changed while downloading; run the download again.",
                             repo_id=repo_id, folder=folder)
    if status == 401 and token_given:
        return DownloadError("auth", f"the hub refused the token for {repo_id} (401)",
                             "The token may be expired or lack read access. " + login_advice(repo_id),
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, RepositoryNotFoundError) or status == 401:
        return DownloadError(
            "not_found", f"no model {repo_id} on {endpoint} (or it is private or gated: {status})",
            "Check the repo id (owner/name, exactly as on the model page). If the model is private or gated: "
            + login_advice(repo_id), repo_id=repo_id, folder=folder)
    if isinstance(exc, HfHubHTTPError) and status == 404:  # no reason code: a mirror, or a proxy in between
        return DownloadError(
            "not_found", f"{endpoint} answered 404 for {repo_id} (no such model there, or that address is not a "
            "model hub)",
            "Check the repo id (owner/name, exactly as on the model page) and the hub address (HF_ENDPOINT, when set: "
            "a mirror may not carry every model).", repo_id=repo_id, folder=folder)
    if isinstance(exc, HfHubHTTPError) and status == 403:
        return DownloadError("auth", f"the hub refused access to {repo_id} (403)",
                             f"Check that your account has access at {page}. " + login_advice(repo_id),
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, HfHubHTTPError) and status is not None and (status >= 500 or status == 429):
        return DownloadError("server", f"the model hub answered {status} for {repo_id}",
                             f"The problem is on the hub's side: try again later. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    return None


def _disk_full(exc: BaseException, repo_id: str, folder: Path | None) -> DownloadError | None:
    """The "disk_full" error for an :class:`OSError` ENOSPC/EDQUOT (with the free bytes of the disk the
    file was written to, else of ``folder``); None for any other exception."""
    if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return None
    where = Path(exc.filename).parent if getattr(exc, "filename", None) else folder or Path(".")
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = 0
    return DownloadError(
        "disk_full", f"the disk filled up while downloading {repo_id} into {where} "
        f"({format_bytes(free)} free)",
        f"Free space on that disk, {move_cache_advice()}. {_RESUMES}", repo_id=repo_id, folder=folder)


def _network_failure(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None) -> DownloadError | None:
    """The error for offline mode (``HF_HUB_OFFLINE``) or a network failure: "offline" (mode on, or the hub
    cannot be reached), "stalled" (a timeout), "unstable" (any other httpx2 transport error); None for any
    other exception."""
    import httpx2  # lazy: start-up time (as above; httpx2 is huggingface_hub's transport)
    from huggingface_hub.errors import OfflineModeIsEnabled  # lazy: start-up time (as above)

    if isinstance(exc, OfflineModeIsEnabled) or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return DownloadError("offline", f"{repo_id} cannot be downloaded: offline mode is on (HF_HUB_OFFLINE)",
                             "Unset HF_HUB_OFFLINE to download.", repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return DownloadError("offline", f"cannot reach the model hub at {endpoint} ({exc})",
                             f"Check the internet connection (and proxy settings), then try again. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.TimeoutException):
        return DownloadError("stalled", f"the model hub at {endpoint} stopped answering ({type(exc).__name__})",
                             f"The server or the network is stuck: try again later. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.TransportError):
        return DownloadError("unstable", f"the connection to {endpoint} kept failing ({type(exc).__name__}: {exc})",
                             f"Check the network and try again later. {_RESUMES}", repo_id=repo_id, folder=folder)
    return None
