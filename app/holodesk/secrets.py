"""API keys for remote policy servers, kept in the OS keychain through ``keyring`` and nowhere else.

Where a key may live (field case F19):

* the OS keychain (Secret Service / GNOME Keyring or KWallet on Linux, Keychain on macOS, Credential
  Manager on Windows), through :mod:`keyring` -- :func:`store_api_key`, :func:`load_api_key`;
* this process's memory only, for one session -- :func:`set_session_api_key`;
* the ``HOLODESK_API_KEY`` environment variable, set by the user for one shell session.

Never in a settings file, a log line, an episode record or an error message, and never in a plaintext
file: backends that write plaintext (``keyrings.alt``) or store nothing (the ``fail`` and ``null``
backends) are refused with a :class:`~holodesk.errors.SecretStoreError` that gives the user the choice
between unlocking/installing a keychain and keeping the key for this session only.

Keys are filed under service :data:`SERVICE` with the normalised endpoint URL as the user name, so one
key is kept per server.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import keyring
import keyring.errors
from keyring.backend import KeyringBackend

from holodesk.errors import SecretStoreError

log = logging.getLogger(__name__)

SERVICE = "holodesk"
"""Keychain service name under which every Holodesk secret is filed."""

ENV_API_KEY = "HOLODESK_API_KEY"
"""Environment variable read by :func:`resolve_api_key` for a key kept for this session only."""

_REFUSED_MODULE_PREFIXES = ("keyrings.alt",)
"""Backends that would keep the key in a plaintext or home-made file: never used (F19)."""

_REFUSED_BACKENDS = ("keyring.backends.fail.Keyring", "keyring.backends.null.Keyring")

KEYCHAIN_TIMEOUT_S = 10.0
"""Seconds one keychain call may take. A locked keychain may wait for its password in a prompt, and a
Secret Service that does not answer holds a D-Bus call for minutes; past this bound the call is given up
(:class:`KeychainTimeoutError`) and its thread is left to end on its own."""

_T = TypeVar("_T")

_session_keys: dict[str, str] = {}

_CHOICE = (
    "Either unlock or install a system keychain (on Linux: GNOME Keyring or KWallet running in your "
    "desktop session, e.g. `apt install gnome-keyring`), then try again; or keep the key for this "
    f"session only: set the {ENV_API_KEY} environment variable, or choose 'this session only' when "
    "Holodesk asks. Holodesk never writes the key to a plaintext file."
)


def normalize_endpoint(endpoint: str) -> str:
    """Canonical form of a server URL used as the keychain user name.

    Lower-cases scheme and host, drops a trailing slash, query and fragment:
    ``"HTTP://GPU-Box:8000/v1/"`` -> ``"http://gpu-box:8000/v1"``.

    Raises:
        SecretStoreError: when ``endpoint`` is not an http(s) URL with a host.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise SecretStoreError(
            f"{endpoint!r} is not a server URL",
            hint="Give the full address, e.g. http://gpu-box:8000/v1.",
        )
    netloc = parts.hostname.lower()
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def _backend_name(backend: KeyringBackend) -> str:
    cls = type(backend)
    return f"{cls.__module__}.{cls.__qualname__}"


def _leaf_backends(backend: KeyringBackend) -> list[KeyringBackend]:
    """The real backends behind ``backend`` (a ChainerBackend wraps several)."""
    inner = getattr(backend, "backends", None)
    if isinstance(inner, list | tuple):
        return [b for b in inner if isinstance(b, KeyringBackend)]
    return [backend]


def _refusal_reason(backend: KeyringBackend) -> str | None:
    """Why ``backend`` must not hold a secret, or None when it is a real keychain."""
    leaves = _leaf_backends(backend)
    if not leaves:
        return "no keychain backend is available (no Secret Service / KWallet / system keychain found)"
    for leaf in leaves:
        name = _backend_name(leaf)
        if name.startswith(_REFUSED_MODULE_PREFIXES):
            return f"the configured keyring backend {name} stores secrets in a file, which Holodesk refuses"
        if name in _REFUSED_BACKENDS:
            return "no keychain backend is available (no Secret Service / KWallet / system keychain found)"
    return None


def _get_backend() -> KeyringBackend:
    """The keyring backend, or SecretStoreError when it is one Holodesk refuses."""
    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # keyring may raise anything while probing backends
        raise SecretStoreError(f"Cannot open the OS keychain: {type(exc).__name__}.", hint=_CHOICE) from exc
    reason = _refusal_reason(backend)
    if reason is not None:
        raise SecretStoreError(f"Cannot use the OS keychain: {reason}.", hint=_CHOICE)
    return backend


class KeychainTimeoutError(SecretStoreError):
    """A keychain call did not return within :data:`KEYCHAIN_TIMEOUT_S` (locked and prompting, or hung)."""


def _bounded(action: str, call: Callable[[], _T]) -> _T:
    """``call()`` (which opens the keychain with :func:`_get_backend`: probing may also wait on D-Bus) in a
    worker thread, waited for at most :data:`KEYCHAIN_TIMEOUT_S` seconds.

    Raises:
        KeychainTimeoutError: no answer in time; the message says to unlock the keychain or use a session key.
        SecretStoreError: a refused backend, or the call failed (never quoting the key).
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = call()
        except SecretStoreError as exc:
            outcome["error"] = exc
        except Exception as exc:  # keyring and D-Bus errors of many types
            outcome["error"] = _wrap(action, exc)
        finally:
            done.set()

    threading.Thread(target=work, name=f"holodesk-keychain-{action}", daemon=True).start()
    if not done.wait(KEYCHAIN_TIMEOUT_S):
        raise KeychainTimeoutError(
            f"Cannot {action} the API key: the keychain did not answer within {KEYCHAIN_TIMEOUT_S:g} s (it may be "
            "locked and waiting for its password in a prompt, or its service is not responding).",
            hint="Unlock the keychain (answer its password prompt, or open Passwords and Keys), then try again. "
            + _CHOICE,
        )
    if "error" in outcome:
        raise outcome["error"]
    value: _T = outcome["value"]
    return value


def _wrap(action: str, exc: Exception) -> SecretStoreError:
    """Turn a keyring failure into SecretStoreError without quoting anything that might hold the key."""
    if isinstance(exc, keyring.errors.KeyringLocked):
        what = "the keychain is locked"
    elif isinstance(exc, keyring.errors.NoKeyringError):
        what = "no keychain backend is available"
    else:
        what = f"the keychain reported {type(exc).__name__}"
    return SecretStoreError(f"Cannot {action} the API key: {what}.", hint=_CHOICE)


def keyring_status() -> dict[str, Any]:
    """Describe the keychain for ``holodesk doctor``.

    Returns:
        ``{"backend": str, "usable": bool, "detail": str}``. ``usable`` is True only when the backend
        is a real keychain and a read succeeded (a locked keychain that cannot be unlocked is not
        usable). Never raises; never reveals a stored secret.
    """
    try:
        return _bounded("read", _status_now)
    except KeychainTimeoutError as exc:
        return {"backend": "unknown", "usable": False, "detail": str(exc)}


def _status_now() -> dict[str, Any]:
    """:func:`keyring_status` without its time bound."""
    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # keyring may raise anything while probing backends
        return {"backend": "unknown", "usable": False, "detail": f"keyring failed: {type(exc).__name__}"}
    names = ", ".join(_backend_name(b) for b in _leaf_backends(backend)) or _backend_name(backend)
    reason = _refusal_reason(backend)
    if reason is not None:
        return {"backend": names, "usable": False, "detail": f"{reason}. {_CHOICE}"}
    try:
        backend.get_password(SERVICE, "__holodesk_probe__")
    except keyring.errors.KeyringError as exc:
        return {"backend": names, "usable": False, "detail": str(_wrap("read", exc))}
    except Exception as exc:  # D-Bus errors surface as many types
        return {"backend": names, "usable": False, "detail": f"keychain read failed: {type(exc).__name__}"}
    return {"backend": names, "usable": True, "detail": "keychain reachable and unlocked"}


def store_api_key(endpoint: str, key: str) -> None:
    """Save ``key`` for ``endpoint`` in the OS keychain (replacing an earlier one).

    Raises:
        SecretStoreError: when no usable keychain exists (fail / null / plaintext backend, locked,
            headless without Secret Service); the message offers unlock/install or "this session only".
        ValueError: when ``key`` is empty.
    """
    if not key:
        raise ValueError("the API key is empty")
    user = normalize_endpoint(endpoint)

    def store() -> str:
        backend = _get_backend()
        backend.set_password(SERVICE, user, key)
        return _backend_name(backend)

    log.info("API key for %s stored in the keychain (%s)", user, _bounded("store", store))


def load_api_key(endpoint: str) -> str | None:
    """The key stored for ``endpoint`` in the OS keychain, or None when none is stored.

    Raises:
        SecretStoreError: when no usable keychain exists or it is locked.
        KeychainTimeoutError: the keychain did not answer within :data:`KEYCHAIN_TIMEOUT_S`.
    """
    user = normalize_endpoint(endpoint)
    return _bounded("read", lambda: _get_backend().get_password(SERVICE, user))


def delete_api_key(endpoint: str) -> bool:
    """Remove the key stored for ``endpoint``; also forgets a session-only key for it.

    Returns:
        True when a keychain entry was deleted, False when none existed.
    Raises:
        SecretStoreError: when no usable keychain exists or it is locked.
    """
    user = normalize_endpoint(endpoint)
    _session_keys.pop(user, None)

    def delete() -> bool:
        backend = _get_backend()
        if backend.get_password(SERVICE, user) is None:
            return False
        backend.delete_password(SERVICE, user)
        return True

    return _bounded("delete", delete)


def set_session_api_key(endpoint: str, key: str | None) -> None:
    """Keep ``key`` for ``endpoint`` in this process's memory only (None forgets it).

    The choice offered when no keychain is usable; the key is gone when Holodesk exits.
    """
    user = normalize_endpoint(endpoint)
    if key:
        _session_keys[user] = key
    else:
        _session_keys.pop(user, None)


def resolve_api_key(endpoint: str) -> tuple[str | None, str]:
    """Find the key to use for ``endpoint``, in order: session memory, ``HOLODESK_API_KEY``, keychain.

    An unusable keychain is not an error here (a server may need no key, F19): it is logged at
    DEBUG and reported through the returned source.

    Returns:
        ``(key or None, source)`` with source one of ``"session"``, ``"env"``, ``"keychain"``,
        ``"none"``, ``"none (keychain unusable)"`` or ``"none (keychain did not answer)"`` (logged at
        WARNING, with what to do). The key itself is never logged.
    """
    user = normalize_endpoint(endpoint)
    if user in _session_keys:
        return _session_keys[user], "session"
    env = os.environ.get(ENV_API_KEY)
    if env:
        return env, "env"
    try:
        key = load_api_key(user)
    except KeychainTimeoutError as exc:  # a hung keychain is worth telling: the run goes on without a key
        log.warning("no key from the keychain for %s: %s %s", user, exc.message, exc.hint)
        return None, "none (keychain did not answer)"
    except SecretStoreError as exc:
        log.debug("no key from the keychain for %s: %s", user, exc.message)
        return None, "none (keychain unusable)"
    return (key, "keychain") if key else (None, "none")
