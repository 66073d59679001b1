"""The approval modes: who approves each proposed action. Shared by the settings file, the session's
approval policy, the CLI, the tray app and the MCP server (one vocabulary, its values as written in
settings.toml)."""

from __future__ import annotations

import enum


class ApprovalMode(enum.StrEnum):
    """Who approves each action; the values are the ``approval`` setting's words in settings.toml."""

    STEP = "step"
    """Step mode: the user approves every action."""
    AUTO = "auto"
    """Autopilot: low-risk actions are approved after a visible countdown; high-risk ones ask the user."""


def approval_mode(value: ApprovalMode | str) -> ApprovalMode:
    """``value`` as an :class:`ApprovalMode` (a member, or its word: ``"step"`` / ``"auto"``).

    Raises:
        ValueError: ``value`` names no mode (the message lists the modes).
    """
    try:
        return ApprovalMode(value)
    except ValueError:
        words = " or ".join(repr(m.value) for m in ApprovalMode)
        raise ValueError(f"approval mode must be {words}, got {value!r}") from None
