"""The look of every Holodesk window: one palette of named colour roles, the spacing and the font sizes,
and the Qt style sheets built from them.

Widgets never write a colour, a margin or a font size of their own: they take it from :data:`THEME`
(or a :class:`Theme` passed to them) or use a style sheet function below. Tests read the same roles (the
marker colour the overlay paints, the colour an error must not have).

Colours are ``#rrggbb`` strings, as Qt style sheets and ``QColor`` take them; sizes are logical pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Palette:
    """Colours by role (``#rrggbb``).

    The dark surfaces (approval card, command palette, banner) carry light text; the light windows
    (settings, wizard, download, fallback window) use the desktop's own colours plus the ``muted`` and
    ``error_text`` / ``notice_*`` roles.
    """

    surface: str = "#1f2430"
    """Background of the approval card, the command palette and the pick banner."""
    surface_sunken: str = "#11141b"
    """Text fields on a dark surface."""
    control: str = "#343b4b"
    """Buttons and the progress track on a dark surface."""
    control_disabled: str = "#262b36"
    """A disabled button on a dark surface."""
    border: str = "#4b5468"
    """Outlines on a dark surface (buttons, the palette's frame)."""
    field_border: str = "#3a4252"
    """The outline of a text field on a dark surface."""
    text: str = "#f2f4f8"
    """Body text on a dark surface."""
    text_strong: str = "#ffffff"
    """Text on a coloured badge or in a field; the glyphs of the status icons."""
    text_secondary: str = "#aab3c5"
    """Titles, details and hints on a dark surface."""
    text_thought: str = "#d6dbe6"
    """The model's thought on the card."""
    text_disabled: str = "#6b7385"
    """A disabled button's label on a dark surface."""
    text_faint: str = "#8d96a8"
    """The card's smallest line (where the step acts)."""
    attention: str = "#ffd479"
    """What the user should do now (the edit hint, the pick banner)."""
    countdown: str = "#9fe6b8"
    """The autopilot countdown."""
    accent: str = "#2f7de1"
    """Focus and activity: the palette's input outline, the "thinking" status."""
    success: str = "#1f9d55"
    """Approve, low risk, acting, the countdown bar."""
    stop: str = "#a52a22"
    """The Stop button."""
    danger: str = "#d93025"
    """High risk and a failed task."""
    waiting: str = "#f0a000"
    """A decision is needed (the "awaiting" status)."""
    muted: str = "#5b6b7f"
    """Secondary text on a light window; the idle status."""
    error_text: str = "#b3261e"
    """A field's error message on a light window."""
    notice_background: str = "#fff4e5"
    """A notice box that asks for something (the API key message), not an error."""
    notice_text: str = "#5f3700"
    """Text of a notice box."""
    notice_border: str = "#f0c36d"
    """Outline of a notice box."""
    marker: str = "#ff00cc"
    """Target marks on the screen: a magenta that desktops rarely show (the F13 test looks for it)."""


@dataclass(frozen=True)
class Spacing:
    """Margins and gaps (logical pixels)."""

    card_margins: tuple[int, int, int, int] = (14, 12, 14, 12)
    """Inside the approval card: left, top, right, bottom."""
    card_gap: int = 7
    """Between the card's rows."""
    button_gap: int = 6
    """Between buttons in a row."""
    panel_margins: tuple[int, int, int, int] = (12, 12, 12, 10)
    """Inside the command palette."""
    field_gap: int = 2
    """Between a settings field and its message lines."""
    list_gap: int = 2
    """Between the items of a list (the history's steps)."""
    indent: int = 24
    """A note under the option it explains (wizard)."""


@dataclass(frozen=True)
class Fonts:
    """Font sizes (pixels) and the monospace family."""

    small: int = 11
    """Hints, badges, the card's "where" line."""
    secondary: int = 12
    """Titles and details on a dark surface."""
    body: int = 13
    """Card text and the edit field."""
    banner: int = 14
    """The pick banner."""
    heading: int = 15
    """The fallback window's status line."""
    large: int = 16
    """The card's headline and the palette's input."""
    monospace: str = "monospace"


@dataclass(frozen=True)
class Theme:
    """Palette, spacing and fonts together; :data:`THEME` is the one Holodesk shows."""

    palette: Palette = field(default_factory=Palette)
    spacing: Spacing = field(default_factory=Spacing)
    fonts: Fonts = field(default_factory=Fonts)


THEME = Theme()
"""The theme every widget uses."""


def card_style(marker: str, theme: Theme = THEME) -> str:
    """Style sheet of the approval card (``#approvalCard``), outlined in the ``marker`` colour."""
    p, f = theme.palette, theme.fonts
    return (
        f"#approvalCard {{ background: {p.surface}; border: 2px solid {marker}; border-radius: 10px; }}"
        f"#approvalCard QLabel {{ color: {p.text}; font-size: {f.body}px; }}"
        f"#approvalCard QLabel#title {{ font-size: {f.secondary}px; color: {p.text_secondary}; }}"
        f"#approvalCard QLabel#description {{ font-size: {f.large}px; font-weight: 600; }}"
        f"#approvalCard QLabel#details {{ color: {p.text_secondary}; font-size: {f.secondary}px; }}"
        f"#approvalCard QLabel#thought {{ color: {p.text_thought}; font-style: italic; }}"
        f"#approvalCard QLabel#edit_hint {{ color: {p.attention}; }}"
        f"#approvalCard QLabel#countdown {{ color: {p.countdown}; }}"
        f"#approvalCard QPlainTextEdit {{ background: {p.surface_sunken}; color: {p.text_strong}; border: 1px solid "
        f"{p.field_border}; font-family: {f.monospace}; font-size: {f.body}px; }}"
        f"#approvalCard QPushButton {{ padding: 5px 10px; border-radius: 5px; background: {p.control};"
        f" color: {p.text}; border: 1px solid {p.border}; }}"
        f"#approvalCard QPushButton:disabled {{ color: {p.text_disabled}; background: {p.control_disabled}; }}"
        f"#approvalCard QPushButton#approve {{ background: {p.success}; border-color: {p.success}; }}"
        f"#approvalCard QPushButton#stop {{ background: {p.stop}; border-color: {p.stop}; }}"
        f"#approvalCard QProgressBar {{ border: 0; background: {p.control}; height: 6px; border-radius: 3px; }}"
        f"#approvalCard QProgressBar::chunk {{ background: {p.success}; border-radius: 3px; }}"
    )


def risk_badge_style(high: bool, theme: Theme = THEME) -> str:
    """Style sheet of the card's risk badge: red for high risk, green for low."""
    p = theme.palette
    return (f"background: {p.danger if high else p.success}; color: {p.text_strong}; border-radius: 4px;"
            f" padding: 2px 6px; font-weight: 700; font-size: {theme.fonts.small}px;")


def banner_style(marker: str, theme: Theme = THEME) -> str:
    """Style sheet of the banner shown while the user picks a point, outlined in the ``marker`` colour."""
    p = theme.palette
    return (f"background: {p.surface}; color: {p.attention}; border: 2px solid {marker}; border-radius: 6px;"
            f" padding: 6px 12px; font-size: {theme.fonts.banner}px;")


def command_palette_style(theme: Theme = THEME) -> str:
    """Style sheet of the command palette's frame (``#paletteFrame``), its input and its hint."""
    p, f = theme.palette, theme.fonts
    return (
        f"#paletteFrame {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 10px; }}"
        f"QLineEdit {{ background: {p.surface_sunken}; color: {p.text}; border: 1px solid {p.accent};"
        f" border-radius: 6px; padding: 8px; font-size: {f.large}px; }}"
        f"QLabel {{ color: {p.text_secondary}; font-size: {f.secondary}px; }}"
    )


def text_style(color: str, size: int | None = None) -> str:
    """Style sheet of a label's text: ``color`` (a palette role's value) and, when given, ``size`` (pixels)."""
    return f"color: {color};" + (f" font-size: {size}px;" if size is not None else "")


def notice_style(theme: Theme = THEME) -> str:
    """Style sheet of a notice box on a light window: something to do, not an error (no red)."""
    p = theme.palette
    return (f"background: {p.notice_background}; color: {p.notice_text}; border: 1px solid {p.notice_border}; "
            "border-radius: 4px; padding: 6px;")


def strong_style(size: int | None = None) -> str:
    """Style sheet of a bold line (a header, a status line), in ``size`` pixels when given."""
    return (f"font-size: {size}px; " if size is not None else "") + "font-weight: 600;"
