"""One Holodesk per desktop session: the single-instance lock and the local command channel.

The desktop app holds an exclusive ``flock`` on ``<runtime dir>/app-<desktop>.lock`` for its whole life
and listens on ``<runtime dir>/app-<desktop>.sock`` (an ``AF_UNIX`` stream socket). ``<desktop>`` names
the desktop actually reached (the Wayland socket, else the X server; :func:`desktop_key`), not how its
name is spelled, so each desktop session has one app and one task at a time. The runtime dir
(:func:`runtime_dir`) is created ``0700``; the socket is ``0600``. A client refuses a folder or socket
that another user owns or that others may use, and both ends check the peer's uid (``SO_PEERCRED``).

Protocol: one JSON object per line, UTF-8. The client sends one request ``{"command": NAME, ...}``; the
app answers with zero or more event lines ``{"event": ...}`` and one final line: ``{"ok": true, ...}``
or ``{"ok": false, "error": TEXT}``. Commands (see :data:`COMMANDS`): ``ping``, ``palette`` (open the
command box), ``stop`` (stop the running task), ``status``, ``run_task`` (``task``, ``mode``, ``by``;
streams ``{"event": "step", ...}`` lines, ends with ``{"ok": true, "outcome": {...}}``). Closing the
connection while ``run_task`` runs stops that task.

This module imports neither Qt nor the session: the command line uses it without starting Qt, and the
app plugs its own handler into :class:`ChannelServer`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from holodesk.errors import HolodeskError

log = logging.getLogger(__name__)

COMMANDS = ("ping", "palette", "stop", "status", "run_task")
"""Requests the running app answers."""

MAX_LINE = 1 << 20
"""Longest accepted request or reply line, in bytes."""

_UNIX_PATH_MAX = 107


class ChannelError(HolodeskError):
    """The channel to the running app cannot be used (unsafe permissions, broken reply, ...)."""


class NotRunning(ChannelError):
    """No Holodesk app runs on this desktop."""


_X11_DISPLAY = re.compile(r"^(?P<host>[^:]*):(?P<number>\d+)(?:\.\d+)?$")
_LOCAL_X11_HOSTS = ("", "unix", "localhost", "127.0.0.1")


def wayland_socket(env: dict[str, str] | None = None) -> Path | None:
    """The Wayland socket ``WAYLAND_DISPLAY`` reaches, symlinks resolved: the name itself when it is a
    path, else the name in ``XDG_RUNTIME_DIR`` (else in ``/run/user/<uid>``, where the session keeps it);
    None without ``WAYLAND_DISPLAY``."""
    env = dict(os.environ) if env is None else env
    name = env.get("WAYLAND_DISPLAY", "")
    if not name:
        return None
    base = env.get("XDG_RUNTIME_DIR", "") or f"/run/user/{os.getuid()}"
    return Path(os.path.realpath(Path(base) / name))  # an absolute name replaces base


def desktop_key(env: dict[str, str] | None = None) -> str:
    """A file-name-safe name of the desktop this environment reaches, the same however it is spelled:
    ``wayland-<socket file name>`` (see :func:`wayland_socket`), ``x11-<display number>`` for a local X
    server (``:1``, ``:1.0``, ``unix:1`` and ``localhost:1`` are one server), ``x11-<host>-<number>`` for a
    remote one, or ``none``."""
    env = dict(os.environ) if env is None else env
    wayland, display = wayland_socket(env), env.get("DISPLAY", "").strip()
    if wayland is not None:
        raw = "wayland-" + wayland.name
    elif display:
        parsed = _X11_DISPLAY.match(display)
        if parsed is None:
            raw = "x11-" + display.lstrip(":")
        elif parsed["host"] in _LOCAL_X11_HOSTS:
            raw = f"x11-{int(parsed['number'])}"
        else:
            raw = f"x11-{parsed['host']}-{int(parsed['number'])}"
    else:
        raw = "none"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)


def runtime_dir(env: dict[str, str] | None = None) -> Path:
    """The private folder of the locks and the socket (created ``0700`` when missing); ``env`` defaults
    to ``os.environ``. On Wayland it is ``holodesk`` beside the socket :func:`wayland_socket` reaches, so
    every process that reaches one compositor finds one folder; else ``$XDG_RUNTIME_DIR/holodesk``, else
    ``/run/user/<uid>/holodesk`` (the session's runtime folder, for a process started without
    ``XDG_RUNTIME_DIR``), else ``/tmp/holodesk-<uid>``.

    Raises:
        ChannelError: the folder belongs to another user, or group/others may use it.
    """
    env = dict(os.environ) if env is None else env
    wayland = wayland_socket(env)
    session_dir = Path(f"/run/user/{os.getuid()}")
    base = env.get("XDG_RUNTIME_DIR", "")
    if wayland is not None and wayland.parent.is_dir():
        folder = wayland.parent / "holodesk"
    elif base and Path(base).is_dir():
        folder = Path(base) / "holodesk"
    elif session_dir.is_dir() and session_dir.stat().st_uid == os.getuid():
        folder = session_dir / "holodesk"
    else:
        folder = Path(f"/tmp/holodesk-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, parents=False, exist_ok=True)
    except OSError as exc:
        raise ChannelError(f"cannot create Holodesk's runtime folder {folder}: {exc}") from exc
    check_private(folder, "folder")
    return folder


def check_private(path: Path, what: str) -> None:
    """Refuse ``path`` unless this user owns it and nobody else may read, write or enter it.

    Raises:
        ChannelError: naming the owner or the permissions found and what to do.
    """
    info = os.lstat(path)
    if info.st_uid != os.getuid():
        raise ChannelError(f"the {what} {path} belongs to user id {info.st_uid}, not to you",
                           hint="Holodesk will not use it; remove it or set XDG_RUNTIME_DIR to your own folder.")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ChannelError(f"the {what} {path} has permissions {stat.S_IMODE(info.st_mode):04o}; other users "
                           "could use it", hint="Holodesk will not use it; remove it (a new one is made 0700/0600).")


def socket_path(env: dict[str, str] | None = None) -> Path:
    """Path of this desktop's app socket.

    Raises:
        ChannelError: unsafe runtime folder, or a path longer than ``AF_UNIX`` allows.
    """
    path = runtime_dir(env) / f"app-{desktop_key(env)}.sock"
    if len(os.fsencode(path)) > _UNIX_PATH_MAX:
        raise ChannelError(f"the socket path {path} is too long for a local socket",
                           hint="Set XDG_RUNTIME_DIR to a shorter folder.")
    return path


def lock_path(env: dict[str, str] | None = None) -> Path:
    """Path of this desktop's single-instance lock file."""
    return runtime_dir(env) / f"app-{desktop_key(env)}.lock"


def _flock(path: Path, operation: int) -> int | None:
    """Open the lock file ``path`` (created ``0600``, checked private) and ``flock`` it with ``operation``
    (``fcntl.LOCK_EX`` or ``LOCK_SH``) without waiting.

    Returns:
        The open descriptor that holds the lock, or None when another process holds a conflicting one.
    Raises:
        ChannelError: unsafe runtime folder or lock file.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        check_private(path, "lock file")
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


class _HeldLock:
    """An exclusive ``flock`` this process holds on a lock file that names it (its pid on the first line);
    the kernel drops it when the process ends, however it ends."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Give the lock up (also happens when the process exits)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


class InstanceLock(_HeldLock):
    """The exclusive claim of being this desktop's Holodesk app (``flock`` on :func:`lock_path`).

    The kernel drops the lock when the process ends, however it ends, so a crash never leaves a stale
    claim (a crash may leave a stale socket, which the next owner removes).
    """

    def __init__(self, fd: int, path: Path) -> None:
        super().__init__(fd)
        self.path = path

    @classmethod
    def acquire(cls, env: dict[str, str] | None = None) -> InstanceLock | None:
        """The lock, or None when another process holds it (an app already runs on this desktop).

        Raises:
            ChannelError: unsafe runtime folder or lock file.
        """
        path = lock_path(env)
        fd = _flock(path, fcntl.LOCK_EX)
        return None if fd is None else cls(fd, path)


class DesktopBusy(ChannelError):
    """Another Holodesk task (another process, or this app) is driving this desktop."""


class DriveLock(_HeldLock):
    """The exclusive right to drive this desktop's pointer and keyboard, held for the whole of one task
    by whoever runs it (the app, ``holodesk run``, a ``holodesk mcp`` hosting a task), so that two tasks
    never move two cursors at once. An ``flock`` on ``<runtime dir>/drive-<desktop>.lock``, dropped by
    the kernel when the process ends.
    """

    @classmethod
    def acquire(cls, env: dict[str, str] | None = None) -> DriveLock:
        """Take the desktop for one task.

        Raises:
            DesktopBusy: another task drives this desktop (the message says which process).
            ChannelError: unsafe runtime folder or lock file.
        """
        path = runtime_dir(env) / f"drive-{desktop_key(env)}.lock"
        fd = _flock(path, fcntl.LOCK_EX)
        if fd is None:
            holder = ""
            with contextlib.suppress(OSError), path.open("rb") as f:
                holder = f.read(32).decode(errors="replace").strip()
            raise DesktopBusy(f"busy: another Holodesk task is driving this desktop (process {holder or '?'}); "
                              "one task drives the desktop at a time",
                              hint="Wait for it to end, or stop it (`holodesk stop`, Esc on its overlay).")
        return cls(fd)

    def __enter__(self) -> DriveLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def app_running(env: dict[str, str] | None = None) -> bool:
    """True when an app holds this desktop's instance lock.

    The check takes a *shared* lock for a moment: checks never block each other (many threads and
    processes may check at once), only the app's exclusive lock makes it fail.

    Raises:
        ChannelError: unsafe runtime folder or lock file.
    """
    fd = _flock(lock_path(env), fcntl.LOCK_SH)
    if fd is None:
        return True
    os.close(fd)  # closing drops the shared lock
    return False


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class Connection:
    """One open channel connection: JSON lines in both directions (thread-safe sending)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._file = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON line. Raises OSError when the peer is gone."""
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        with self._send_lock:
            self.sock.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        """The next JSON object, or None at end of stream.

        Raises:
            ChannelError: a line that is not a JSON object, or longer than :data:`MAX_LINE`.
        """
        line = self._file.readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE:
            raise ChannelError("a channel message is too long")
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise ChannelError(f"a channel message is not JSON: {line[:200]!r}") from exc
        if not isinstance(message, dict):
            raise ChannelError(f"a channel message is not a JSON object: {line[:200]!r}")
        return message

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._file.close()
            self.sock.close()


Handler = Callable[[dict[str, Any], Connection], None]
"""Answers one request on its own thread: sends event lines and the final ``{"ok": ...}`` line."""


class ChannelServer:
    """The app's end: accepts connections on :func:`socket_path` and runs ``handler`` for each request
    on a thread of its own. Hold the :class:`InstanceLock` first: the owner of the lock owns the socket,
    so any socket file found then is stale and is replaced.

    Args:
        lock: this process's instance lock.
        handler: answers requests (called off the GUI thread).
    """

    def __init__(self, lock: InstanceLock, handler: Handler, env: dict[str, str] | None = None) -> None:
        self.lock = lock
        self.handler = handler
        self.path = socket_path(env)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        """Bind (``0600``) and listen; accept on a daemon thread.

        Raises:
            ChannelError: the socket cannot be created.
        """
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # we hold the lock: a socket left here is a crashed app's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ChannelError(f"cannot listen on {self.path}: {exc}") from exc
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        sock.listen(8)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="holodesk-channel", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                log.exception("the command channel stopped accepting")
                return
            threading.Thread(target=self._serve, args=(client,), name="holodesk-channel-client",
                             daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        conn = Connection(client)
        try:
            if _peer_uid(client) != os.getuid():
                conn.send({"ok": False, "error": "refused: another user's process"})
                return
            request = conn.receive()
            if request is None:
                return
            command = request.get("command")
            if command not in COMMANDS:
                conn.send({"ok": False, "error": f"unknown command {command!r}; known: {', '.join(COMMANDS)}"})
                return
            self.handler(request, conn)
        except (OSError, ChannelError) as exc:
            log.info("a channel connection ended: %s", exc)
        except Exception:  # a broken request must not take the app down; it is logged
            log.exception("the command channel failed on a request")
            with contextlib.suppress(OSError):
                conn.send({"ok": False, "error": "internal error in the app (see its log)"})
        finally:
            conn.close()

    def close(self) -> None:
        """Stop listening and remove the socket file."""
        self._stopping.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def connect(timeout_s: float = 5.0, env: dict[str, str] | None = None) -> Connection:
    """Connect to this desktop's running app.

    While the instance lock is held but the socket is not (yet) answering, e.g. while the app starts,
    retries for up to ``timeout_s`` seconds.

    Raises:
        NotRunning: no app holds the lock (a stale socket is reported as such).
        ChannelError: unsafe folder/socket permissions, another user's process, or no answer in time.
    """
    path = socket_path(env)
    deadline = time.monotonic() + timeout_s
    while True:
        if not app_running(env):
            stale = "; a stale socket was left by an app that ended" if path.exists() else ""
            raise NotRunning(f"Holodesk is not running on this desktop{stale}", hint="Start it with `holodesk`.")
        try:
            if path.exists():
                check_private(path, "socket")
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                try:
                    sock.connect(str(path))
                except OSError:
                    sock.close()
                    raise
                if _peer_uid(sock) != os.getuid():
                    sock.close()
                    raise ChannelError(f"the process listening on {path} belongs to another user",
                                       hint="Holodesk will not talk to it.")
                return Connection(sock)
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        if time.monotonic() >= deadline:
            raise ChannelError(f"Holodesk is running but does not answer on {path}",
                               hint="Wait for it to finish starting, or quit it and start it again.")
        time.sleep(0.05)


def request(command: str, timeout_s: float = 10.0, env: dict[str, str] | None = None,
            **fields: Any) -> dict[str, Any]:
    """Send one request and return the app's final reply (``{"ok": ...}``); event lines are skipped.

    Raises:
        NotRunning, ChannelError: as :func:`connect`; ChannelError also when the app closes the
            connection without a reply or does not reply within ``timeout_s``.
    """
    for message in stream(command, timeout_s=timeout_s, env=env, **fields):
        if "ok" in message:
            return message
    raise ChannelError("the app closed the connection without a reply")


def stream(command: str, timeout_s: float | None = 10.0, env: dict[str, str] | None = None,
           **fields: Any) -> Iterator[dict[str, Any]]:
    """Send one request and yield every reply line, up to and including the final ``{"ok": ...}``.
    Closing the generator early closes the connection (which stops a ``run_task``).

    Raises:
        NotRunning, ChannelError: as :func:`request`.
    """
    conn = connect(env=env)
    try:
        conn.sock.settimeout(timeout_s)
        conn.send({"command": command, **fields})
        while True:
            try:
                message = conn.receive()
            except TimeoutError as exc:
                raise ChannelError(f"the app did not answer {command!r} within {timeout_s:g} s") from exc
            if message is None:
                raise ChannelError(f"the app closed the connection before answering {command!r}")
            yield message
            if "ok" in message:
                return
    finally:
        conn.close()
