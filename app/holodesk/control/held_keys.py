"""Keys an executor holds down between steps (``key_down``), and their release whatever ends the run.

A held key outlives the step that pressed it, so it must never outlive the run: the executor releases every
held key when the episode ends (its ``end_episode``, which the session calls in a ``finally`` for every end:
the last step, a stop, the fail-safe, an error, an exception in the session thread). A process that is killed
runs no ``finally``, so the held keys are also written to a state file in Holodesk's runtime folder
(:func:`holodesk.instance.runtime_dir`), one per desktop (``held-keys-<desktop>.json``), *before* each key goes
down; the next run on that desktop releases what the file names (:meth:`HeldKeys.release_left_over`) and
removes it. Without a usable runtime folder no key is held (the ``key_down`` fails with the reason).

File format (JSON): ``{"pid": int, "executor": str, "keys": [canonical key names, in press order]}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from holodesk.core.actions import MAX_HELD_KEYS, Key, KeyDown, KeyUp
from holodesk.errors import ActionError, HolodeskError
from holodesk.instance import desktop_key, runtime_dir

log = logging.getLogger(__name__)

KeyPress = Callable[[str], None]
"""Presses or releases one key, given its canonical name (:func:`holodesk.core.actions.normalize_key`)."""


def held_keys_file(env: dict[str, str] | None = None) -> Path:
    """The state file of the keys held on the desktop ``env`` reaches (``os.environ`` by default).

    Raises:
        ChannelError: the runtime folder cannot be made private (:func:`holodesk.instance.runtime_dir`).
    """
    return runtime_dir(env) / f"held-keys-{desktop_key(env)}.json"


def key_result(action: Key | KeyDown | KeyUp) -> str:
    """What a performed key action did, in words: "pressed ctrl+s 2 times", "held shift down",
    "released shift", "held shift and tapped tab, tab"."""
    keys = "+".join(action.keys)
    if isinstance(action, KeyDown):
        return f"held {keys} down"
    if isinstance(action, KeyUp):
        return f"released {keys}"
    done = f"held {keys} and tapped {', '.join(action.taps)}" if action.taps else f"pressed {keys}"
    return done + (f" {action.repeat} times" if action.repeat > 1 else "")


def refuse_typing_while_held(held: Sequence[str]) -> None:
    """Refuse to type text while keys are held: every typed character would become a chord with them
    (Ctrl+letters are shortcuts).

    Raises:
        ActionError: (field ``text``) ``held`` is not empty; nothing is typed.
    """
    if held:
        raise ActionError(f"did not type: {'+'.join(held)} {'is' if len(held) == 1 else 'are'} held down, so each "
                          "typed character would be a key chord", field="text",
                          hint="Release the held keys (key_up) before typing text.")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HeldKeys:
    """The keys one executor holds down, in press order, mirrored in a state file.

    Args:
        executor: the executor's name, written to the file (a later start releases only its own kind's keys).
        path: the state file; None: :func:`held_keys_file` for this process's desktop, found at first use.
    """

    def __init__(self, executor: str, path: Path | None = None) -> None:
        self.executor = executor
        self._path = path
        self._keys: list[str] = []

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys held now, in press order (canonical names)."""
        return tuple(self._keys)

    def path(self) -> Path:
        """The state file.

        Raises:
            ChannelError: no private runtime folder for it.
        """
        if self._path is None:
            self._path = held_keys_file()
        return self._path

    def _save(self, keys: Sequence[str]) -> None:
        """Write ``keys`` to the state file (removed when empty); atomic, ``0600``.

        Raises:
            HolodeskError: the file cannot be written (OSError wrapped, or ChannelError from :meth:`path`).
        """
        path = self.path()
        try:
            if not keys:
                path.unlink(missing_ok=True)
                return
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"pid": os.getpid(), "executor": self.executor, "keys": list(keys)}, out)
            os.replace(tmp, path)
        except OSError as exc:
            raise HolodeskError(f"cannot record the held keys in {path}: {exc}",
                                hint="Check Holodesk's runtime folder (holodesk doctor).") from exc

    def hold(self, keys: Sequence[str], press: KeyPress) -> None:
        """Press ``keys`` in order and keep them held; each is recorded in the state file before it goes down.

        Raises:
            ActionError: a key is held already, or more than :data:`MAX_HELD_KEYS` would be held.
            HolodeskError: the state file cannot be written (nothing more is pressed).
        """
        again = [k for k in keys if k in self._keys]
        if again:
            raise ActionError(f"{', '.join(again)} {'is' if len(again) == 1 else 'are'} held down already",
                              field="keys", hint="Release keys with key_up before pressing them again.")
        if len(self._keys) + len(keys) > MAX_HELD_KEYS:
            raise ActionError(f"at most {MAX_HELD_KEYS} keys are held at once; held now: "
                              f"{', '.join(self._keys) or 'none'}", field="keys",
                              hint="Release a held key with key_up first.")
        for key in keys:
            self._save([*self._keys, key])
            try:
                press(key)
            except BaseException:
                self._keys.append(key)  # it may be down: the end of the run releases it
                raise
            self._keys.append(key)

    def release(self, keys: Sequence[str], release: KeyPress) -> None:
        """Release ``keys`` (held by :meth:`hold`) in reverse order.

        Raises:
            ActionError: a key that is not held (nothing is released then).
            HolodeskError: the state file cannot be written (the keys are released all the same).
        """
        stray = [k for k in keys if k not in self._keys]
        if stray:
            raise ActionError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not held down; held now: "
                              f"{', '.join(self._keys) or 'none'}", field="keys",
                              hint="key_up releases only keys that key_down pressed in this run.")
        for key in reversed(keys):
            release(key)
            self._keys.remove(key)
        self._save(self._keys)

    def release_all(self, release: KeyPress) -> tuple[str, ...]:
        """Release every held key in reverse order and clear the state file. Never raises: a key that cannot be
        released is logged (and stays in the file, so the next start tries again).

        Returns:
            The keys released.
        """
        done: list[str] = []
        for key in reversed(self._keys):
            try:
                release(key)
                done.append(key)
            except Exception:
                log.exception("could not release the held key %s", key)
        self._keys = [k for k in self._keys if k not in done]
        try:
            self._save(self._keys)
        except HolodeskError as exc:
            log.error("%s", exc)
        if done:
            log.info("released the held keys %s", "+".join(reversed(done)))
        return tuple(reversed(done))

    def release_left_over(self, release: KeyPress) -> tuple[str, ...]:
        """Release the keys the state file names, left held by a run of this executor kind that ended without
        releasing them (a killed process); then remove the file. A file of a live process other than this one
        is left alone (another run holds them). Never raises: what fails is logged.

        Returns:
            The keys released (empty when the file is absent or not this executor's).
        """
        try:
            path = self.path()
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return ()
        except (HolodeskError, OSError, ValueError) as exc:
            log.error("could not read the held-keys file: %s", exc)
            return ()
        pid, keys = data.get("pid"), data.get("keys")
        if data.get("executor") != self.executor or not isinstance(keys, list):
            return ()
        if isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid):
            log.warning("the held-keys file %s belongs to the running process %d; left alone", path, pid)
            return ()
        done: list[str] = []
        for key in reversed(keys):
            try:
                release(str(key))
                done.append(str(key))
            except Exception:
                log.exception("could not release the key %s left held by an earlier run", key)
        with contextlib.suppress(OSError):
            path.unlink()
        if done:
            log.warning("released %s, left held by an earlier run that was killed", "+".join(reversed(done)))
        return tuple(reversed(done))
