"""The first-run wizard: what this machine has, then one of three ways to run, each checked before it is
saved, so the wizard never leaves Holodesk set to something that cannot run here.

* **Run a model on this GPU** — offered only when a model of the registry (:mod:`holodesk.policy.models`)
  fits the GPU's free memory in some precision (the rule of :mod:`holodesk.core.fit`); the list shows only
  the models that fit, the precision is chosen for the user and explained; the checkpoint is a folder
  already on disk or the chosen model's hub repo downloaded through the download dialog.
* **Use a server** — URL, model name and API key; *Test* makes a real ``GET {url}/models`` request with
  the key and the page cannot finish until the test passed for the values shown; the key goes into the
  OS keychain (or, when none is usable, this session's memory after the user chooses so).
* **Try it with a replay file** — a file of protocol replies, read and checked before it is accepted.

Finishing writes the settings file (:func:`holodesk.settings.save_settings`) and emits ``applied``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QRadioButton,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from holodesk.core.fit import DISK_MARGIN_BYTES, GIB, PRECISION_TRADEOFF, disk_fits, explain_precision
from holodesk.core.units import format_bytes
from holodesk.display import check_display
from holodesk.download.cache import default_cache_dir
from holodesk.errors import HolodeskError, SecretStoreError, SettingsError
from holodesk.machine import GpuInfo, disk_free_bytes, probe_gpus
from holodesk.policy.models import (
    DEFAULT_MODEL,
    MODELS,
    ModelFit,
    ModelSpec,
    find_model,
    get_model,
    models_that_fit,
)
from holodesk.policy.scripted import read_script
from holodesk.secrets import keyring_status, resolve_api_key, set_session_api_key, store_api_key
from holodesk.settings import Settings, save_settings, validate_field
from holodesk.ui.download import DownloadDialog, DownloadFn
from holodesk.ui.theme import THEME, text_style
from holodesk.ui.widgets import SESSION_KEY_TEXT, name_window, plain_label, push_button

log = logging.getLogger(__name__)

MODEL_REPO = get_model(DEFAULT_MODEL).hub_id
"""The model name a server is expected to serve when none is typed (the default model's hub id)."""


@dataclass(frozen=True)
class MachineFacts:
    """What the wizard knows about this machine (the same probes ``holodesk doctor`` reports).

    Attributes:
        gpu: the NVIDIA GPU with the most free memory, or None.
        gpu_detail: why no GPU was found ("" when one was).
        cache_dir: where a downloaded checkpoint goes by default.
        disk_free_bytes: free space there.
        display: the display server in words ("x11 on :0", "wayland on wayland-0", ...).
        display_usable: whether screen capture and input can work on it.
        keychain_usable / keychain_detail: whether an API key can go into the OS keychain, and why not.
        tray: whether a system tray is available.
    """

    gpu: GpuInfo | None
    gpu_detail: str
    cache_dir: Path
    disk_free_bytes: int
    display: str
    display_usable: bool
    keychain_usable: bool
    keychain_detail: str
    tray: bool

    @property
    def fitting(self) -> list[ModelFit]:
        """The registry's models that fit the GPU in some precision ([]: no local model can run here)."""
        return models_that_fit(self.gpu.free_bytes if self.gpu else None)


def _keychain_status(timeout_s: float = 5.0) -> tuple[bool, str]:
    """(usable, detail) of the keychain, waiting at most ``timeout_s`` (a locked keychain may wait for
    an unlock prompt nobody answers, F19)."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(keyring_status()), name="wizard-keychain", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return False, "the keychain did not answer (it may be locked and waiting for an unlock prompt)"
    return bool(box.get("usable")), str(box.get("detail", ""))


def gather_facts(cache_dir: Path | None = None) -> MachineFacts:
    """Probe this machine (nvidia-smi, disk, display server, keychain, tray). Never raises."""
    probe = probe_gpus()
    cache = cache_dir or default_cache_dir()
    info = check_display()
    where = info.display or info.wayland_display
    display = f"{info.kind}{f' on {where}' if where else ''}" + (f": {info.problem}" if info.problem else "")
    usable, detail = _keychain_status()
    return MachineFacts(gpu=probe.best, gpu_detail=probe.detail, cache_dir=cache,
                        disk_free_bytes=disk_free_bytes(cache), display=display,
                        display_usable=info.usable, keychain_usable=usable,
                        keychain_detail=detail, tray=bool(QSystemTrayIcon.isSystemTrayAvailable()))


MUTED = text_style(THEME.palette.muted)
"""Style of the wizard's notes."""


def _mark(ok: bool | None) -> str:
    return "✔" if ok else "✖" if ok is False else "?"


# --------------------------------------------------------------------------------------------- pages
class _Page(QWizardPage):
    """A wizard page with a title, a subtitle when given, and a vertical layout (:attr:`body`)."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        super().__init__()
        self.setTitle(title)
        if subtitle:
            self.setSubTitle(subtitle)
        self.body = QVBoxLayout(self)


class ChoicePage(_Page):
    """What this machine has, and the three ways to run."""

    def __init__(self, facts: MachineFacts) -> None:
        super().__init__("Welcome to Holodesk",
                         "Holodesk needs a vision-language model to see the screen and propose actions. Here "
                         "is what this computer offers; choose how to run it.")
        gpu = facts.gpu
        gpu_text = (f"{gpu.name}, {gpu.free_bytes / GIB:.1f} GiB free of {gpu.total_bytes / GIB:.1f} GiB"
                    if gpu else f"none ({facts.gpu_detail})")
        form = QFormLayout()
        rows = [("GPU", _mark(bool(facts.fitting)), gpu_text),
                ("Disk", _mark(disk_fits(facts.disk_free_bytes)),
                 f"{format_bytes(facts.disk_free_bytes)} free in {facts.cache_dir}"),
                ("Display", _mark(facts.display_usable), facts.display),
                ("Keychain", _mark(facts.keychain_usable),
                 "usable for API keys" if facts.keychain_usable else
                 facts.keychain_detail.split(". ")[0].rstrip(".") + ". An API key can be kept for this session only."),
                ("Tray", _mark(facts.tray), "available" if facts.tray else
                 "none: Holodesk shows a small window instead")]
        for name, mark, text in rows:
            form.addRow(f"{mark} {name}", plain_label(text, f"fact_{name.lower()}"))
        self.body.addLayout(form)
        self.group = QButtonGroup(self)
        self.local = QRadioButton("Run a model on this GPU")
        self.local.setObjectName("choice_local")
        self.server = QRadioButton("Use a server (vLLM or another OpenAI-compatible server)")
        self.server.setObjectName("choice_server")
        self.replay = QRadioButton("Try it with a replay file (no model: replays recorded replies)")
        self.replay.setObjectName("choice_replay")
        for i, button in enumerate((self.local, self.server, self.replay)):
            self.group.addButton(button, i)
        self.body.addWidget(self.local)
        self.local_note = plain_label(_fitting_text(facts), "local_note", style=MUTED)
        self.local_note.setContentsMargins(THEME.spacing.indent, 0, 0, 6)
        self.body.addWidget(self.local_note)
        self.body.addWidget(self.server)
        self.body.addWidget(self.replay)
        self.body.addStretch(1)
        self.local.setEnabled(bool(facts.fitting))
        (self.local if facts.fitting else self.server).setChecked(True)

    def choice(self) -> str:
        """"local", "server" or "replay"."""
        return "local" if self.local.isChecked() else "server" if self.server.isChecked() else "replay"


def _fitting_text(facts: MachineFacts) -> str:
    """Which models fit this GPU and in which precision, or why none does (the choice page's note)."""
    gpu = facts.gpu
    if not facts.fitting:
        smallest = min(MODELS, key=lambda m: m.parameters)
        if gpu is None:  # no model at all runs here, not only the smallest one named
            return (f"No NVIDIA GPU was found, so none of the listed models (not even the smallest, "
                    f"{smallest.display_name}) can run here at a usable speed. Use a server instead.")
        return smallest.explain_fit(gpu.free_bytes, gpu.name)
    listed = ", ".join(f"{f.model.display_name} ({f.best})" for f in facts.fitting)
    assert gpu is not None
    return f"{gpu.name} has {gpu.free_bytes / GIB:.1f} GiB free; these models fit it: {listed}."


def _default_choice(facts: MachineFacts, current: str) -> ModelSpec | None:
    """The model the local page starts on: the current setting's model when it fits, else the default
    model when it fits, else the first model that fits (None: none fits)."""
    fitting = [f.model for f in facts.fitting]
    for wanted in (find_model(current), get_model(DEFAULT_MODEL)):
        if wanted is not None and wanted in fitting:
            return wanted
    return fitting[0] if fitting else None


class LocalPage(_Page):
    """The local model: the models that fit this GPU, the precision that fits the chosen one (chosen and
    explained), and the checkpoint folder (on disk, or the chosen model's hub repo downloaded)."""

    def __init__(self, facts: MachineFacts, download: DownloadFn | None, current_model: str = "") -> None:
        super().__init__("Run a model on this GPU")
        self.facts = facts
        self.download_fn = download
        form = QFormLayout()
        self.model = QComboBox()
        self.model.setObjectName("model")
        for fit in facts.fitting:
            m = fit.model
            self.model.addItem(f"{m.display_name} — {m.size_text()}, best fit {fit.best} "
                               f"(needs {m.needs_free_bytes(fit.best or 'bf16') / GIB:.0f} GiB)", m.key)
        start = _default_choice(facts, current_model)
        if start is not None:
            self.model.setCurrentIndex(self.model.findData(start.key))
        form.addRow("Model", self.model)
        self.explanation = plain_label("", "explanation")
        self.precision = QComboBox()
        self.precision.setObjectName("precision")
        form.addRow("Precision", self.precision)
        folder_row = QHBoxLayout()
        self.folder = QLineEdit(str(facts.cache_dir))
        self.folder.setObjectName("folder")
        self.folder.textChanged.connect(self._folder_changed)
        browse = push_button("Choose...", clicked=self._browse)
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        form.addRow("Folder", folder_row)
        self.body.addWidget(self.explanation)
        self.body.addLayout(form)
        self.folder_state = plain_label("", "folder_state")
        self.body.addWidget(self.folder_state)
        self.download_button = push_button("Download", "download", self.start_download)
        self.body.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.body.addStretch(1)
        self.checkpoint: Path | None = None
        self.dialog: DownloadDialog | None = None
        self.model.currentIndexChanged.connect(self._model_changed)
        self._model_changed()

    @property
    def spec(self) -> ModelSpec | None:
        """The chosen model (None: no model fits this GPU)."""
        key = self.model.currentData()
        return get_model(key) if key else None

    def _model_changed(self) -> None:
        """Fill the precision list and the texts for the chosen model, then judge the folder again."""
        spec = self.spec
        gpu = self.facts.gpu
        free = gpu.free_bytes if gpu else None
        self.precision.clear()
        if spec is None:
            self.explanation.setText(explain_precision(free, gpu.name if gpu else "this GPU"))
            self.download_button.setText("Download")
            self._folder_changed()
            return
        self.setSubTitle(f"{spec.display_name} is a {format_bytes(spec.download_bytes)} download; every precision "
                         "uses the same files.")
        self.explanation.setText(spec.explain_fit(free, gpu.name if gpu else "this GPU"))
        for fit in spec.precision_fits(free):
            text = f"{fit.precision} — {PRECISION_TRADEOFF[fit.precision]} (needs {fit.needs_bytes / GIB:.0f} GiB)"
            if fit.fits is False:
                text += ": does not fit"
            self.precision.addItem(text, fit.precision)
            model = self.precision.model()
            assert isinstance(model, QStandardItemModel)
            model.item(self.precision.count() - 1).setEnabled(bool(fit.fits))
        self.precision.setCurrentIndex(max(0, self.precision.findData(spec.best_precision(free))))
        self.download_button.setText(f"Download {spec.display_name}")
        self._folder_changed()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Checkpoint folder", self.folder.text())
        if folder:
            self.folder.setText(folder)

    def _folder_changed(self) -> None:
        folder = Path(self.folder.text().strip()).expanduser()
        spec = self.spec
        holds = find_model(str(folder)) if (folder / "config.json").is_file() else None
        if (folder / "config.json").is_file() and spec is not None and holds not in (None, spec):
            self.checkpoint = None
            self.folder_state.setText(f"This folder holds {holds.display_name}, not {spec.display_name}. Choose "
                                      f"{holds.display_name} above, or another folder.")
            self.download_button.setEnabled(False)
        elif (folder / "config.json").is_file():
            self.checkpoint = folder
            self.folder_state.setText(f"✔ A checkpoint is in this folder; Holodesk will load it from {folder}.")
            self.download_button.setEnabled(False)
        else:
            self.checkpoint = None
            need = spec.download_bytes if spec is not None else 0
            free = disk_free_bytes(folder) if self.folder.text().strip() else 0
            room = free >= need + DISK_MARGIN_BYTES
            if self.download_fn is None:
                self.folder_state.setText("No checkpoint in this folder. Downloading is not available in this "
                                          "build: run `holodesk download` in a terminal, then choose the folder.")
            elif not room:
                self.folder_state.setText(f"No checkpoint in this folder, and only {format_bytes(free)} free "
                                          f"there; the download needs {format_bytes(need)}. Choose "
                                          "another folder.")
            else:
                self.folder_state.setText(f"No checkpoint in this folder yet. Download it here "
                                          f"({format_bytes(free)} free).")
            self.download_button.setEnabled(self.download_fn is not None and room and spec is not None)
        self.completeChanged.emit()

    def start_download(self) -> DownloadDialog | None:
        """Open the download dialog for the chosen model's hub repo into this folder; on success the
        checkpoint folder is set."""
        spec = self.spec
        if self.download_fn is None or spec is None:
            return None
        dialog = DownloadDialog(self.download_fn, spec.hub_id, Path(self.folder.text().strip()).expanduser(),
                                parent=self)
        dialog.downloaded.connect(lambda path: self.folder.setText(str(path)))
        self.dialog = dialog
        dialog.show()
        dialog.start()
        return dialog

    def isComplete(self) -> bool:
        return self.checkpoint is not None and self.precision.currentData() is not None

    def updates(self) -> dict[str, Any]:
        return {"policy": "local", "model": str(self.checkpoint), "precision": self.precision.currentData()}


class _TestRelay(QObject):
    done = Signal(object, object)  # (values tested, error message or None)


class ServerPage(_Page):
    """A server: URL, model, key, and a Test that makes a real request."""

    def __init__(self, settings: Settings, facts: MachineFacts) -> None:
        super().__init__("Use a server",
                         "An OpenAI-compatible server that serves an H Company model (Holotron, Holo2, Holo3), "
                         "e.g. vLLM on a GPU machine (docs/scaling.md has a recipe per model). Test the "
                         "connection before you finish.")
        self.facts = facts
        form = QFormLayout()
        self.url = QLineEdit(settings.endpoint)
        self.url.setObjectName("url")
        self.url.setPlaceholderText("http://gpu-box:8000/v1")
        self.model = QLineEdit(settings.model if settings.policy == "remote" else MODEL_REPO)
        self.model.setObjectName("model")
        self.key = QLineEdit()
        self.key.setObjectName("key")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("empty when the server needs none, or to keep the stored key")
        form.addRow("Server URL", self.url)
        form.addRow("Model name", self.model)
        form.addRow("API key", self.key)
        self.body.addLayout(form)
        keychain = ("The key is stored in the system keychain, never in a file." if facts.keychain_usable else
                    "No usable keychain: " + facts.keychain_detail.split(". ")[0] + ". You can keep the key "
                    "for this session only.")
        self.body.addWidget(plain_label(keychain, "keychain_note", style=MUTED))
        row = QHBoxLayout()
        self.test_button = push_button("Test", "test", self.test)
        row.addWidget(self.test_button)
        row.addStretch(1)
        self.body.addLayout(row)
        self.result = plain_label("", "test_result")
        self.body.addWidget(self.result)
        self.session_button = push_button(SESSION_KEY_TEXT, "session_only", self._keep_for_session, hidden=True)
        self.body.addWidget(self.session_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.body.addStretch(1)
        self.passed: tuple[str, str, str] | None = None
        self.key_kept = False
        self._relay = _TestRelay(self)
        self._relay.done.connect(self._tested, Qt.ConnectionType.QueuedConnection)
        self._thread: threading.Thread | None = None
        for field in (self.url, self.model, self.key):
            field.textChanged.connect(self._edited)

    def values(self) -> tuple[str, str, str]:
        return self.url.text().strip().rstrip("/"), self.model.text().strip(), self.key.text()

    def _edited(self) -> None:
        self.key_kept = False
        self.session_button.hide()
        self.completeChanged.emit()

    def test(self) -> None:
        """Send ``GET {url}/models`` with the key (off the GUI thread); the result shows under the button."""
        values = self.values()
        url, model, key = values
        try:
            validate_field("endpoint", url)
        except SettingsError as exc:
            self.result.setText("✖ " + exc.message.removeprefix("invalid settings: endpoint: ")
                                .removeprefix("Value error, "))
            return
        if not url:
            self.result.setText("✖ Enter the server URL first.")
            return
        self.test_button.setEnabled(False)
        self.result.setText(f"Testing {url} ...")
        relay = self._relay

        def work() -> None:
            relay.done.emit(values, check_server(url, model, key or None))

        self._thread = threading.Thread(target=work, name="wizard-test", daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _tested(self, values: tuple[str, str, str], error: str | None) -> None:
        self.test_button.setEnabled(True)
        if error is None:
            self.passed = values
            self.result.setText(f"✔ Connected: {values[0]} serves {values[1]}.")
        else:
            self.passed = None
            self.result.setText(f"✖ {error}")
        self.completeChanged.emit()

    def isComplete(self) -> bool:
        return self.passed is not None and self.passed == self.values()

    def validatePage(self) -> bool:
        """Store the key (keychain, or session memory when the user chose it) before finishing."""
        url, _model, key = self.values()
        if not key or self.key_kept:
            return True
        try:
            store_api_key(url, key)
        except SecretStoreError as exc:
            self.result.setText(f"✖ {exc.message} {exc.hint}")
            self.session_button.show()
            return False
        except (HolodeskError, ValueError) as exc:
            self.result.setText(f"✖ {exc}")
            return False
        self.key_kept = True
        return True

    def _keep_for_session(self) -> None:
        url, _model, key = self.values()
        set_session_api_key(url, key)
        self.key_kept = True
        self.session_button.hide()
        self.result.setText("The key is kept in memory for this session only; it is gone when Holodesk exits. "
                            "Press Finish.")

    def updates(self) -> dict[str, Any]:
        url, model, _key = self.values()
        return {"policy": "remote", "endpoint": url, "model": model}


def check_server(url: str, model: str, key: str | None, timeout_s: float = 10.0) -> str | None:
    """Ask the server which models it serves (``GET {url}/models`` with ``key``); None when it answers and
    serves ``model``, else what is wrong and what to do, in words. Never raises; never shows the key."""
    from holodesk.policy.remote import RemotePolicy  # lazy: start-up time (httpx, about 0.15 s), only to test

    try:
        if key is None:
            key, _source = resolve_api_key(url)
        with RemotePolicy(url, model or MODEL_REPO, api_key=key, retries=0, timeout_s=timeout_s) as policy:
            models = policy.list_models()
    except HolodeskError as exc:
        return str(exc)
    except Exception as exc:  # a test must report, never crash the wizard
        log.exception("server test failed")
        return f"The test failed: {type(exc).__name__}: {exc}"
    if model not in models:
        return (f"The server answers, but does not serve {model!r}; it serves: {', '.join(models) or 'nothing'}. "
                "Enter one of those names as the model name.")
    return None


EXAMPLE_REPLAY = Path(__file__).resolve().parents[1] / "examples" / "first-replay.jsonl"
"""The replay file that ships with Holodesk (a pointer move, a wait and an answer), offered first."""


class ReplayPage(_Page):
    """A replay file: chosen, read and checked; :data:`EXAMPLE_REPLAY` until the settings name one."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("Try it with a replay file",
                         "A replay file holds model replies, one per line; Holodesk proposes them one step at "
                         "a time, and you still approve every action.")
        row = QHBoxLayout()
        self.file = QLineEdit(str(settings.script_file or EXAMPLE_REPLAY))
        self.file.setObjectName("replay_file")
        self.file.textChanged.connect(self._check)
        browse = push_button("Choose...", clicked=self._browse)
        row.addWidget(self.file, 1)
        row.addWidget(browse)
        self.body.addLayout(row)
        self.state = plain_label("", "replay_state")
        self.body.addWidget(self.state)
        self.body.addStretch(1)
        self.ok = False
        self._check()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Replay file", self.file.text(),
                                              "Replay files (*.jsonl *.txt);;All files (*)")
        if path:
            self.file.setText(path)

    def _check(self) -> None:
        text = self.file.text().strip()
        self.ok = False
        if not text:
            self.state.setText("Choose a replay file.")
        else:
            try:
                replies = read_script(Path(text).expanduser())
            except HolodeskError as exc:
                self.state.setText(f"✖ {exc}")
            else:
                self.ok = bool(replies)
                self.state.setText(f"✔ {len(replies)} replies." if replies else "✖ The file holds no replies.")
        self.completeChanged.emit()

    def isComplete(self) -> bool:
        return self.ok

    def updates(self) -> dict[str, Any]:
        return {"policy": "script", "script_file": Path(self.file.text().strip()).expanduser()}


# -------------------------------------------------------------------------------------------- wizard
class SetupWizard(QWizard):
    """The first-run wizard (also opened from the tray: *Setup wizard...*).

    Args:
        settings: the current settings (kept for every field the wizard does not set).
        facts: what this machine has (:func:`gather_facts`).
        path: the settings file to write (default: the user settings file).
        download: the download manager's function (None: the local page offers existing folders only).
    Signals:
        applied(Settings): the new settings were saved.
    """

    applied = Signal(object)
    PAGE_CHOICE, PAGE_LOCAL, PAGE_SERVER, PAGE_REPLAY = range(4)

    def __init__(self, settings: Settings, facts: MachineFacts, *, path: Path | None = None,
                 download: DownloadFn | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        name_window(self, "Set up Holodesk", "holodeskWizard")
        self.setWizardStyle(QWizard.WizardStyle.ClassicStyle)
        self.settings = settings
        self.facts = facts
        self.path = path
        self.saved_settings: Settings | None = None
        self.choice_page = ChoicePage(facts)
        self.local_page = LocalPage(facts, download, settings.model)
        self.server_page = ServerPage(settings, facts)
        self.replay_page = ReplayPage(settings)
        self.setPage(self.PAGE_CHOICE, self.choice_page)
        self.setPage(self.PAGE_LOCAL, self.local_page)
        self.setPage(self.PAGE_SERVER, self.server_page)
        self.setPage(self.PAGE_REPLAY, self.replay_page)
        for page in (self.local_page, self.server_page, self.replay_page):
            page.setFinalPage(True)
        self.resize(680, 520)

    def nextId(self) -> int:
        if self.currentId() == self.PAGE_CHOICE:
            return {"local": self.PAGE_LOCAL, "server": self.PAGE_SERVER,
                    "replay": self.PAGE_REPLAY}[self.choice_page.choice()]
        return -1

    def chosen_page(self) -> LocalPage | ServerPage | ReplayPage:
        pages: dict[int, LocalPage | ServerPage | ReplayPage] = {
            self.PAGE_LOCAL: self.local_page, self.PAGE_SERVER: self.server_page, self.PAGE_REPLAY: self.replay_page}
        return pages[self.currentId()]

    def done(self, result: int) -> None:
        """Close (Finish, Cancel, the window's close button): a running download is cancelled first, and
        its dialog closes with the wizard (the download stops within a second, in the background)."""
        dialog = self.local_page.dialog
        if dialog is not None:
            if dialog.state == "running":
                dialog.cancel()
            dialog.close()
        super().done(result)

    def accept(self) -> None:
        """Finish: build, validate and save the new settings; stay open (with the reason) on failure."""
        if self.currentId() not in (self.PAGE_LOCAL, self.PAGE_SERVER, self.PAGE_REPLAY):
            return
        page = self.chosen_page()
        if not page.isComplete() or not self.validateCurrentPage():
            return
        data = self.settings.model_dump()
        data.update(page.updates())
        try:
            new = Settings(**data)
            save_settings(new, self.path)
        except (SettingsError, ValueError) as exc:
            page.setSubTitle(f"Not saved: {exc}")
            return
        self.saved_settings = new
        self.applied.emit(new)
        super().accept()
