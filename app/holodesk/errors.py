"""The exception hierarchy. Every error says what went wrong and what the user can do about it.

Errors are raised where they are detected; the session records them and the UI shows them.
"""

from __future__ import annotations


class HolodeskError(Exception):
    """Base class of every error Holodesk raises on purpose.

    Attributes:
        hint: one sentence telling the user what to do next (may be empty).
    """

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if not self.hint:
            return self.message
        message = self.message.rstrip()
        # a closing parenthesis or quote ends a sentence only when the text inside it did: "(about 25 GB)"
        # needs a full stop after it, "(see the log.)" does not
        end = "" if message.rstrip(")\"'’”").endswith((".", "!", "?", ":")) else "."
        return f"{message}{end} {self.hint}".strip()


class TaskError(HolodeskError, ValueError):
    """The task the user gave cannot be run as given (it is empty)."""


class DisplayError(HolodeskError):
    """No usable display server (DISPLAY unset, Wayland without XWayland, ...)."""


class GeometryMismatch(DisplayError):
    """The start-up self-check found that the monitor geometry the capture reports disagrees with the
    input space the pointer moves in (F28): clicks would land in the wrong place."""


class CaptureError(HolodeskError):
    """Grabbing the screen failed (unknown monitor index, X error, ...)."""


class ActionError(HolodeskError):
    """An action is malformed (bad field) or could not be carried out.

    Attributes:
        field: name of the offending field when the error is about one field, else None.
    """

    def __init__(self, message: str, *, field: str | None = None, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.field = field


class PolicyOutputError(HolodeskError):
    """The policy's reply is not a valid action. Carries the raw text so it can be shown and recorded.

    Attributes:
        raw_text: the model's reply exactly as received.
        timings_ms: what producing the reply cost, by stage (a policy fills it when it can, as in
            ``Proposal.timings_ms``), so a rejected step is recorded with its timings.
        extra: the policy's details of the reply (as ``Proposal.extra``: decoder, tokens, ...).
    """

    def __init__(self, message: str, *, raw_text: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.raw_text = raw_text
        self.timings_ms: dict[str, float] = {}
        self.extra: dict[str, object] = {}

    def __str__(self) -> str:
        shown = self.raw_text if len(self.raw_text) <= 300 else self.raw_text[:300] + "…"
        said = super().__str__()
        return f"{said}{'' if said.endswith(('.', '!', '?')) else '.'} Raw reply: {shown!r}"


class PolicyError(HolodeskError):
    """The policy could not produce a reply at all (server unreachable, generation failed, ...)."""


class ModelLoadError(HolodeskError):
    """A model checkpoint could not be found, read or mapped onto the runtime."""


class SettingsError(HolodeskError):
    """A setting has a bad value, or the settings file cannot be read or written."""


class SecretStoreError(HolodeskError):
    """The OS keychain is missing or locked, so a secret cannot be stored or read."""
