"""API keys for the remote policy live in the OS keychain through ``keyring`` only (F19).

The real-keychain tests run GNOME Keyring inside a private ``dbus-run-session`` with a temporary HOME
(Debian packages: gnome-keyring, dbus-daemon / dbus-bin); they are skipped, with the reason, only when
those programs are not installed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keyring
import pytest
from jaraco.classes.properties import classproperty
from keyring.backend import KeyringBackend
from keyring.backends import fail

from holodesk import secrets
from holodesk.errors import SecretStoreError

KEY = "sk-keychain-test-9f8e7d6c"
ENDPOINT = "http://gpu-box:8000/v1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def backend_restore():
    before = keyring.get_keyring()
    yield
    keyring.set_keyring(before)


@pytest.fixture(autouse=True)
def _no_session_keys(monkeypatch):
    monkeypatch.setattr(secrets, "_session_keys", {})
    monkeypatch.delenv(secrets.ENV_API_KEY, raising=False)


class KeychainDouble(KeyringBackend):
    """The base of this module's keychain doubles. keyring registers every backend class when it is defined and, when
    no backend was set, picks the viable one of highest priority: a double with a plain priority would become the
    keychain of every later test in the process (the prompting one made each remote policy's first keychain read wait
    out :data:`~holodesk.secrets.KEYCHAIN_TIMEOUT_S`). Its priority raises, as keyring's own backends' do where they
    cannot run, so it is never viable; a test sets it with ``keyring.set_keyring``."""

    @classproperty
    def priority(cls) -> float:
        raise RuntimeError("a test double of this module: used only where a test sets it")


def assert_choice(err: SecretStoreError) -> None:
    text = str(err)
    assert "unlock or install a system keychain" in text
    assert "GNOME Keyring or KWallet" in text
    assert "HOLODESK_API_KEY" in text and "this session only" in text
    assert "never writes the key to a plaintext file" in text
    assert KEY not in text


def test_fail_backend_store_gives_the_choice(backend_restore, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    keyring.set_keyring(fail.Keyring())
    with pytest.raises(SecretStoreError) as ei:
        secrets.store_api_key(ENDPOINT, KEY)
    assert_choice(ei.value)
    assert "keyrings.alt" not in str(ei.value)  # keyring's own message suggests a plaintext backend
    with pytest.raises(SecretStoreError):
        secrets.load_api_key(ENDPOINT)
    status = secrets.keyring_status()
    assert status["usable"] is False and status["backend"] == "keyring.backends.fail.Keyring"
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere as a fallback


def test_plaintext_backend_is_refused(backend_restore):
    written: list[str] = []

    class PlaintextKeyring(KeychainDouble):
        def get_password(self, service, username):
            return None

        def set_password(self, service, username, password):
            written.append(password)

        def delete_password(self, service, username):
            pass

    PlaintextKeyring.__module__ = "keyrings.alt.file"
    keyring.set_keyring(PlaintextKeyring())
    with pytest.raises(SecretStoreError) as ei:
        secrets.store_api_key(ENDPOINT, KEY)
    assert "stores secrets in a file" in str(ei.value)
    assert_choice(ei.value)
    assert written == []
    assert secrets.keyring_status()["usable"] is False


def test_session_only_and_env_keys_need_no_keychain(backend_restore, monkeypatch):
    keyring.set_keyring(fail.Keyring())
    assert secrets.resolve_api_key(ENDPOINT) == (None, "none (keychain unusable)")
    monkeypatch.setenv(secrets.ENV_API_KEY, "sk-from-env")
    assert secrets.resolve_api_key(ENDPOINT) == ("sk-from-env", "env")
    secrets.set_session_api_key("http://GPU-BOX:8000/v1/", KEY)
    assert secrets.resolve_api_key(ENDPOINT) == (KEY, "session")
    secrets.set_session_api_key(ENDPOINT, None)
    assert secrets.resolve_api_key(ENDPOINT) == ("sk-from-env", "env")


def test_endpoint_normalisation():
    assert secrets.normalize_endpoint("HTTP://GPU-Box:8000/v1/") == "http://gpu-box:8000/v1"
    with pytest.raises(SecretStoreError):
        secrets.normalize_endpoint("gpu-box")


def test_empty_key_is_refused():
    with pytest.raises(ValueError):
        secrets.store_api_key(ENDPOINT, "")


# ---------------------------------------------------------------------------------- real GNOME Keyring

_HAVE_KEYRING_DAEMON = bool(shutil.which("gnome-keyring-daemon") and shutil.which("dbus-run-session"))
needs_gnome_keyring = pytest.mark.skipif(
    not _HAVE_KEYRING_DAEMON,
    reason="gnome-keyring-daemon / dbus-run-session not installed (apt-get install -y gnome-keyring dbus-daemon)",
)


def run_in_keyring_session(tmp_path: Path, script: str, *, unlock: bool = True) -> subprocess.CompletedProcess:
    """Run ``script`` with the venv's Python inside a private D-Bus session with GNOME Keyring.

    unlock=False restarts the daemon after creating the login keyring, which leaves it locked.
    """
    home = tmp_path / "home"
    home.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (tmp_path / "script.py").write_text(textwrap.dedent(script))
    start = "echo -n pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null"
    if not unlock:
        start += "; gnome-keyring-daemon --replace --daemonize --components=secrets >/dev/null 2>&1; sleep 0.5"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_RUNTIME_DIR": str(run_dir),
        "PYTHONPATH": str(REPO / "app") + os.pathsep + str(REPO),
    }
    cmd = f'{start}; exec "{sys.executable}" "{tmp_path / "script.py"}"'
    return subprocess.run(["dbus-run-session", "--", "sh", "-c", cmd], env=env, capture_output=True, text=True,
                          timeout=60)


@needs_gnome_keyring
def test_gnome_keyring_round_trip(tmp_path):
    proc = run_in_keyring_session(tmp_path, f"""
        from holodesk import secrets
        status = secrets.keyring_status()
        assert status["usable"], status
        print("BACKEND", status["backend"])
        secrets.store_api_key("{ENDPOINT}", "{KEY}")
        assert secrets.load_api_key("HTTP://GPU-BOX:8000/v1/") == "{KEY}"
        assert secrets.resolve_api_key("{ENDPOINT}") == ("{KEY}", "keychain")
        assert secrets.delete_api_key("{ENDPOINT}") is True
        assert secrets.load_api_key("{ENDPOINT}") is None
        assert secrets.delete_api_key("{ENDPOINT}") is False
        print("ROUND TRIP OK")
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BACKEND keyring.backends.SecretService.Keyring" in proc.stdout
    assert "ROUND TRIP OK" in proc.stdout
    # the only file written is GNOME Keyring's encrypted store: the key is in no file in plain text
    written = [p for p in (tmp_path / "home").rglob("*") if p.is_file()]
    assert any(p.name == "login.keyring" for p in written), written
    for path in written:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@needs_gnome_keyring
def test_locked_gnome_keyring_gives_the_choice(tmp_path):
    proc = run_in_keyring_session(tmp_path, f"""
        from holodesk import secrets
        from holodesk.errors import SecretStoreError
        status = secrets.keyring_status()
        assert status["usable"] is False and "locked" in status["detail"], status
        try:
            secrets.store_api_key("{ENDPOINT}", "{KEY}")
        except SecretStoreError as exc:
            print("ERROR", exc)
        else:
            raise SystemExit("stored into a locked keychain?")
    """, unlock=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR Cannot store the API key: the keychain is locked." in proc.stdout
    assert "HOLODESK_API_KEY" in proc.stdout and KEY not in proc.stdout


# ---------------------------------------------------------------------------------- a keychain that does not answer


class PromptingKeychainFake(KeychainDouble):
    """A named fake: a keychain backend whose calls block, as a locked GNOME Keyring does while its password
    prompt waits on screen (no prompt can be shown and answered in a test). ``answer`` lets the calls return."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()
        self.calls = 0

    def get_password(self, service: str, username: str) -> str | None:
        self.calls += 1
        self.answer.wait(60)
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self.calls += 1
        self.answer.wait(60)

    def delete_password(self, service: str, username: str) -> None:
        self.answer.wait(60)


@pytest.fixture
def prompting_keychain(backend_restore, monkeypatch):
    fake = PromptingKeychainFake()
    keyring.set_keyring(fake)
    monkeypatch.setattr(secrets, "KEYCHAIN_TIMEOUT_S", 0.5)
    yield fake
    fake.answer.set()


def bounded(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` in a thread; (its result or what it raised, seconds). Fails when it is still waiting after 10 s."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        t0 = time.monotonic()
        try:
            outcome["result"] = call()
        except BaseException as exc:
            outcome["result"] = exc
        outcome["took"] = time.monotonic() - t0

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the keychain call was still waiting after 10 s"
    return outcome["result"], outcome["took"]


@pytest.mark.parametrize("action", ["read", "store", "delete"])
def test_a_keychain_that_does_not_answer_is_given_up_with_what_to_do(prompting_keychain, action):
    call = {"read": lambda: secrets.load_api_key(ENDPOINT), "store": lambda: secrets.store_api_key(ENDPOINT, KEY),
            "delete": lambda: secrets.delete_api_key(ENDPOINT)}[action]
    error, took = bounded(call)
    assert isinstance(error, secrets.KeychainTimeoutError), error
    assert f"Cannot {action} the API key: the keychain did not answer within 0.5 s" in error.message
    assert "Unlock the keychain" in error.hint
    assert_choice(error)
    assert took < 3.0


def test_a_run_goes_on_without_the_key_and_says_why(prompting_keychain, caplog):
    """resolve_api_key (what a remote run calls first) returns in the bound, and the warning says what to do."""
    with caplog.at_level(logging.WARNING, logger="holodesk.secrets"):
        result, took = bounded(lambda: secrets.resolve_api_key(ENDPOINT))
    assert result == (None, "none (keychain did not answer)")
    assert took < 3.0 and prompting_keychain.calls == 1
    assert any("did not answer within 0.5 s" in r.getMessage() and "Unlock the keychain" in r.getMessage()
               for r in caplog.records)


def test_doctor_status_of_a_keychain_that_does_not_answer(prompting_keychain):
    status, took = bounded(secrets.keyring_status)
    assert status["usable"] is False and "did not answer within 0.5 s" in status["detail"]
    assert took < 3.0


def test_no_double_of_the_tests_is_a_keychain_keyring_may_choose():
    """keyring's own choice (no backend set) never falls on a test double: none is viable."""
    doubles = [c for c in KeyringBackend.get_viable_backends() if issubclass(c, KeychainDouble) or
               c.__module__.startswith("tests.")]
    assert doubles == [] and not PromptingKeychainFake.viable
