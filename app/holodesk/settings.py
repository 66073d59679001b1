"""Settings: one typed, versioned schema, layered defaults < user TOML < ``HOLODESK_*`` env < CLI.

Built on pydantic-settings. Every field carries its help text (shown as tooltips in the settings dialog
and rendered into docs/settings.md; a test fails when a field is undocumented). Secrets are never
settings: API keys live in the OS keychain (:mod:`holodesk.secrets`).

The file lives at ``$XDG_CONFIG_HOME/holodesk/settings.toml`` (platformdirs' user config dir) unless
``HOLODESK_CONFIG`` names another file. Saving writes a temporary file in the same folder, fsyncs it and
renames it over the old one, so a crash never leaves a half-written file.
"""

from __future__ import annotations

import enum
import os
import tempfile
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any, Literal

import platformdirs
import tomli_w
from pydantic import Field, ValidationError, field_validator
from pydantic.json_schema import JsonDict
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from holodesk.core.approval import ApprovalMode
from holodesk.errors import SettingsError
from holodesk.policy.models import DEFAULT_MODEL, get_model, series_names

SCHEMA_VERSION = 1
APP_NAME = "holodesk"


def config_path() -> Path:
    """Path of the user settings file (``HOLODESK_CONFIG`` overrides)."""
    override = os.environ.get("HOLODESK_CONFIG")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_config_dir(APP_NAME)) / "settings.toml"


def default_data_dir() -> Path:
    """Where episodes and logs go by default (``$XDG_DATA_HOME/holodesk``)."""
    return Path(platformdirs.user_data_dir(APP_NAME))


POLICY: JsonDict = {"policy": True}
"""The JSON-schema mark of a setting the policy is built from (:func:`policy_setting`)."""


def policy_setting(default: Any, **field: Any) -> Any:
    """Declare a setting that the policy is built from (:func:`policy_fields`): pydantic's ``Field(default,
    **field)`` marked :data:`POLICY` in the JSON schema. A change to it builds a new policy for the next task."""
    return Field(default, json_schema_extra=POLICY, **field)


class Settings(BaseSettings):
    """All user-facing settings. Field descriptions are the user documentation."""

    model_config = SettingsConfigDict(
        env_prefix="HOLODESK_", extra="forbid", validate_assignment=True, frozen=False
    )

    schema_version: int = Field(SCHEMA_VERSION, description="Version of this settings schema.")

    # Policy
    policy: Literal["local", "remote", "script"] = policy_setting(
        "local",
        description="Where actions come from: 'local' runs the chosen model (setting 'model') on this machine's GPU, "
        "'remote' asks an OpenAI-compatible server (vLLM), 'script' replays a file of protocol replies.",
    )
    model: str = policy_setting(
        get_model(DEFAULT_MODEL).hub_id,
        description="Local policy: a checkpoint folder or a Hugging Face repo id (the wizard and Settings list "
        f"H Company's models that fit this GPU: {', '.join(series_names())}). Remote "
        "policy: the model name the server serves.",
    )
    precision: Literal["bf16", "8bit", "4bit"] = policy_setting(
        "bf16",
        description="Weights of the local model: bf16 (about 25 GB of GPU memory), 8bit or 4bit "
        "(bitsandbytes; smaller, slightly less accurate).",
    )
    decoder: Literal["static", "stock"] = policy_setting(
        "static",
        description="Local model: 'static' keeps the decoder state in memory reserved at load, reuses the "
        "part of the prompt shared with the previous step and replays each token as a CUDA graph (fast); "
        "'stock' uses transformers' own generation loop (slower; for comparison or troubleshooting).",
    )
    endpoint: str = policy_setting(
        "",
        description="Base URL of an OpenAI-compatible server, e.g. http://gpu-box:8000/v1. Its API key is "
        "kept in the OS keychain, never here.",
    )
    request_timeout_s: float = policy_setting(
        60.0, gt=0, le=3600,
        description="Seconds a policy server ('remote') may take to answer one request before the step fails; "
        "raise it for a server that is slow to reply (connecting is capped at 10 s).",
    )
    script_file: Path | None = policy_setting(
        None,
        description="Replay policy ('script'): the file of protocol replies to replay, one JSON reply per line "
        "(the format of `holodesk run --script FILE`).",
    )
    protocol: str = policy_setting(
        "auto",
        description="Action protocol spoken with the model (prompt, schema, parser): 'auto' speaks the one the "
        "model registry declares for the chosen model ('agent-loop-v1', H Company's agent-loop contract, for "
        "every Holotron, Holo2 and Holo3 model, and for a model the registry does not know); 'agent-loop-v1' or "
        "'holo-v1' (Holodesk's first protocol) override it. A script file names its own protocol.",
    )
    reasoning: Literal["auto", "on", "off"] = policy_setting(
        "auto",
        description="Think before acting: 'auto' follows the model's profile (on for Holo2, Holo3, Holo3.1 and "
        "Holotron-3-Nano, whose makers run them thinking; off for Holotron-12B, for which nothing is published), "
        "'on' lets the model reason before each action (recommended where the makers say so; each step costs up to "
        "the profile's thought budget of extra tokens, 1,024 to 3,072), 'off' acts at once (faster). "
        "docs/model-fidelity.md lists each model's profile.",
    )
    greedy: bool = policy_setting(
        False, description="Choose the most likely token every time instead of sampling (replies repeat exactly; "
        "a greedy agent may repeat an action forever).",
    )
    temperature: float | None = policy_setting(
        None, gt=0.0, le=2.0, description="Sampling temperature; unset = the model's profile (0.8 for every model "
        "in the registry). Not used when greedy is on.",
    )
    top_p: float | None = policy_setting(
        None, gt=0.0, le=1.0, description="Sampling keeps the most likely tokens up to this probability mass; unset "
        "= the model's profile (0.95 for Holotron-3-Nano and Holotron-12B, 1 for the others).",
    )
    seed: int | None = policy_setting(
        None, ge=0, le=2**31 - 1, description="Seed of the sampling; unset = a new random seed for each model load. "
        "Each step's seed is recorded in the episode, so a run can be replayed exactly.",
    )
    constrained_decoding: bool = policy_setting(
        True, description="Constrain the model's output to the action protocol's JSON schema.",
    )
    max_reply_tokens: int = policy_setting(
        1024, ge=16, le=32768,
        description="Most tokens in one reply after any thinking (a server is asked for this plus the model's "
        "thought budget when it thinks).",
    )
    max_string_chars: int | None = policy_setting(
        None, ge=1, le=10_000,
        description="Local model with constrained decoding: cap every text field of a reply (thought, typed "
        "text) at this many characters; unset = the protocol's own limits.",
    )
    max_images: int = policy_setting(
        3, ge=1, le=16, description="Screenshots kept in the prompt; older steps are kept as text only.",
    )

    # Session
    approval: ApprovalMode = Field(
        ApprovalMode.STEP,
        description="'step' asks you before every action; 'auto' (autopilot) approves low-risk actions "
        "after a countdown and always asks for high-risk ones.",
    )
    autopilot_countdown_s: float = Field(
        2.0, ge=0.0, le=30.0, description="Seconds an autopilot approval is shown before it runs."
    )
    monitor: int = Field(
        1, ge=1, description="The one monitor to look at and act on (1 = first monitor; `holodesk doctor` lists "
        "them). There is no 'all monitors' choice.",
    )
    max_steps: int = Field(30, ge=1, le=1000, description="Hard cap on the steps of one task.")
    max_wall_s: float = Field(900.0, gt=0, description="Hard cap on one task's wall time, in seconds.")
    max_parse_failures: int = Field(
        3, ge=1, le=20, description="Stop after this many consecutive replies that are not a valid action."
    )
    max_repeats: int = Field(
        3, ge=2, le=10, description="Stop when the same action is proposed this many times on an unchanged screen."
    )
    typing: Literal["auto", "xtest", "clipboard"] = Field(
        "auto",
        description="How text is typed: 'xtest' types any Unicode character directly (X11), 'clipboard' "
        "pastes it and restores your clipboard, 'auto' picks xtest on X11.",
    )

    desktop_backend: Literal["auto", "mss", "mutter", "portal"] = Field(
        "auto",
        description="How the desktop is seen and driven: 'auto' picks 'mutter' on GNOME under Wayland, 'portal' "
        "on other Wayland desktops that offer the screen-cast and remote-desktop portals, and 'mss' elsewhere; "
        "'mutter' uses GNOME's own screen-cast and remote-desktop interfaces (every window, no dialog); "
        "'portal' uses xdg-desktop-portal (the desktop asks for permission in a dialog; KDE, sandboxes); 'mss' "
        "uses mss and pyautogui (X11, Windows, macOS; under XWayland only X11 windows). "
        "`holodesk doctor` shows the choice and why.",
    )

    # Desktop app
    hotkey_palette: str = Field("<ctrl>+<alt>+h", description="Global hotkey that opens the command box.")
    hotkey_stop: str = Field("<ctrl>+<alt>+x", description="Global hotkey that stops the running task at once.")

    # MCP server (holodesk mcp)
    mcp_allowed_modes: Literal["step", "step,auto"] = Field(
        "step",
        description="Approval modes an MCP client may ask for in run_task: 'step' only (you approve every "
        "action), or 'step,auto' (it may also ask for the autopilot, which approves low-risk actions). A "
        "request for a mode not listed is refused.",
    )
    mcp_share_screenshots: bool = Field(
        False, description="Let MCP clients read the screenshots of recorded episodes (the step records are "
        "always readable).",
    )

    # Storage
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Folder for episode records and logs."
    )

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning_word(cls, value: Any) -> Any:
        # settings files written before 'auto' existed hold true / false (an environment variable, "true")
        words = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str) and value.strip().lower() in words:
            return words[value.strip().lower()]
        return value

    @field_validator("monitor", mode="before")
    @classmethod
    def _one_monitor(cls, value: Any) -> Any:
        # mss numbers the whole virtual desktop 0; the geometry check, the fail-safe corners and the
        # Mutter capture work on one monitor, so 0 is refused with what to do instead
        if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip() == "0":
            raise ValueError("Holodesk looks at and acts on one monitor, not all monitors together; pick one "
                             "(1 = first), `holodesk doctor` lists them")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("endpoint must start with http:// or https://, e.g. http://localhost:8000/v1")
        if "@" in value.split("//", 1)[-1].split("/", 1)[0]:
            raise ValueError("put no credentials in the endpoint URL; the API key goes into the keychain")
        if value:
            try:
                parts = urllib.parse.urlsplit(value)
                parts.port  # noqa: B018 - reading it checks the port (0-65535)
            except ValueError as exc:
                raise ValueError(f"endpoint is not a valid URL ({exc}), e.g. http://localhost:8000/v1") from None
            if not parts.hostname:
                raise ValueError("endpoint names no host, e.g. http://localhost:8000/v1")
        return value.rstrip("/")

    @property
    def episodes_dir(self) -> Path:
        """Folder holding one sub-folder per episode."""
        return Path(self.data_dir) / "episodes"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # CLI values arrive as init kwargs: CLI > env > TOML file > defaults.
        return (init_settings, env_settings, _TomlFileSource(settings_cls))


class _TomlFileSource(PydanticBaseSettingsSource):
    """Reads the user's settings.toml; a syntax error becomes a SettingsError naming the file."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self._data = read_settings_file(config_path())

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def read_settings_file(path: Path) -> dict[str, Any]:
    """Parse a settings TOML file; a missing file is empty.

    Raises:
        SettingsError: unreadable file, TOML syntax error, nesting too deep to read, or a secret in the file.
    """
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(
            f"settings file {path} is not valid TOML: {exc}", hint="Fix the line it names or delete the file."
        ) from exc
    except RecursionError as exc:  # tomllib reads nested arrays and tables recursively
        raise SettingsError(f"settings file {path} nests arrays or tables deeper than can be read",
                            hint="Settings are flat 'name = value' lines: fix the file or delete it.") from exc
    for key in data:
        if ("key" in key.lower() and "hotkey" not in key.lower()) or "password" in key.lower():
            raise SettingsError(
                f"settings file {path} contains a secret ({key!r})",
                hint="Remove it; API keys are kept in the OS keychain (Settings > Basic > API key, or the setup "
                "wizard).",
            )
    return data


def load_settings(**overrides: Any) -> Settings:
    """Build the effective settings: defaults < settings.toml < HOLODESK_* env < ``overrides`` (CLI).

    ``None`` overrides are ignored, so CLI flags that were not given fall through.

    Raises:
        SettingsError: naming each bad field and value.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError(_format_validation_error(exc), hint=f"Check {config_path()} and HOLODESK_* "
                            "variables.") from exc


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write ``settings`` to the TOML file atomically (temp file + fsync + rename).

    Only values that differ from the defaults are written. Returns the path written.

    Raises:
        SettingsError: when the folder cannot be created or written.
    """
    target = path or config_path()
    data = settings.model_dump(mode="json", exclude_defaults=True)
    data["schema_version"] = SCHEMA_VERSION
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".toml", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                tomli_w.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise SettingsError(f"cannot save settings to {target}: {exc}") from exc
    return target


def validate_field(name: str, value: Any) -> Any:
    """Validate one field's value alone (for the settings dialog's per-field messages).

    Returns the coerced value. Raises SettingsError with the field's own message.
    """
    try:
        probe = Settings.model_construct()
        Settings.__pydantic_validator__.validate_assignment(probe, name, value)
        return getattr(probe, name)
    except ValidationError as exc:
        raise SettingsError(_format_validation_error(exc)) from exc


def _format_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "settings"
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown setting"
        parts.append(f"{loc}: {msg} (got {_shown_input(loc, err.get('input'))!r})")
    return "invalid settings: " + "; ".join(parts)


def _shown_input(loc: str, value: Any) -> Any:
    """A refused value as an error message may show it: an endpoint's credentials (``user:password@``)
    replaced by ``***@``, so a refused URL never prints them."""
    if loc == "endpoint" and isinstance(value, str) and "@" in value:
        scheme, sep, rest = value.partition("//")
        authority, slash, path = rest.partition("/")
        return f"{scheme}{sep}***@{authority.rsplit('@', 1)[-1]}{slash}{path}"
    return value


def policy_fields() -> tuple[str, ...]:
    """The names of the settings declared with :func:`policy_setting`, in schema order:
    everything the policy is built from (:func:`holodesk.session.factory.build_policy` reads no other)."""
    return tuple(name for name, f in Settings.model_fields.items()
                 if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("policy") is True)


def documented_fields() -> dict[str, str]:
    """Field name -> help text, from the schema itself (used by docs and the settings dialog)."""
    return {name: (f.description or "") for name, f in Settings.model_fields.items()}


def settings_markdown() -> str:
    """docs/settings.md, rendered from the schema (``python -m holodesk.settings > docs/settings.md``)."""
    lines = [
        "# Settings",
        "",
        "Generated from `holodesk.settings.Settings` by `python -m holodesk.settings > docs/settings.md`;",
        "a test fails when this page and the schema disagree.",
        "",
        "Settings file: `$XDG_CONFIG_HOME/holodesk/settings.toml` (or the file named by `HOLODESK_CONFIG`).",
        "Precedence: defaults < settings file < `HOLODESK_<NAME>` environment variables <",
        "command-line flags.",
        "API keys are never settings: they live in the OS keychain.",
        "",
        "| setting | default | description |",
        "| --- | --- | --- |",
    ]
    for name, f in Settings.model_fields.items():
        value = f.default.value if isinstance(f.default, enum.Enum) else f.default  # as written in the file
        default = "(data folder)" if name == "data_dir" else repr(value)
        lines.append(f"| `{name}` | `{default}` | {f.description or ''} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(settings_markdown(), end="")
