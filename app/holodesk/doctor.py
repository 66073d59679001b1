"""``holodesk doctor``: a truthful report of what this machine offers Holodesk.

Each check runs in isolation: one failing probe is reported as such and never hides the others. Every
slow path that would be taken (no fused SSM kernels, no GPU) is named here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import signal
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from holodesk import __version__
from holodesk.core.fit import GIB
from holodesk.core.risk import languages_without_words
from holodesk.core.units import format_bytes
from holodesk.display import MUTTER_NAMES, PORTAL_NAME, check_display, session_bus_names
from holodesk.download.cache import default_cache_dir
from holodesk.dpi import dpi_awareness, ensure_per_monitor_dpi_awareness
from holodesk.errors import HolodeskError
from holodesk.machine import disk_free_bytes, memory_bandwidth, probe_gpus
from holodesk.policy import start_files
from holodesk.policy.models import describe, find_model, models_that_fit, run_choice, thinking_words
from holodesk.policy.remote import RemotePolicy
from holodesk.policy.thinking_cost import thinking_note
from holodesk.secrets import keyring_status, resolve_api_key
from holodesk.settings import Settings, config_path, load_settings
from holodesk.ui.probe import tray_status

Check = tuple[str, Callable[[], dict[str, Any]]]


def _python() -> dict[str, Any]:
    return {"version": platform.python_version(), "executable": sys.executable,
            "platform": platform.platform(), "holodesk": __version__}


def _display() -> dict[str, Any]:
    info = check_display()
    out = info.to_dict() if hasattr(info, "to_dict") else dict(vars(info))
    if info.kind in ("wayland", "xwayland"):
        out["note"] = ("'usable' and 'problem' are about mss/pyautogui (X11 only); on GNOME the 'mutter' "
                       "backend serves Wayland windows: see Desktop backend")
    return out


def _desktop_backend() -> dict[str, Any]:
    # lazy (here and in the checks below): the desktop, session and control modules load jeepney (Linux only)
    # and python-xlib (which prints to stdout and needs a display); a failing import fails this check alone
    from holodesk.display.mutter import interface_versions
    from holodesk.display.portal import PERSIST_MIN_REMOTE_DESKTOP_VERSION
    from holodesk.session.desktop import executor_capabilities
    from holodesk.session.factory import desktop_backend

    out: dict[str, Any] = {}
    try:
        choice = desktop_backend(load_settings())
        out.update(choice.to_dict())
        out["executor capabilities"] = executor_capabilities(choice.backend).to_dict()
    except Exception as exc:  # report why no backend works, and still list what the bus offers
        out["backend"] = f"none: {exc}"
    if sys.platform.startswith("linux"):
        names = session_bus_names()
        out["session bus"] = "not reachable" if names is None else "reachable"
        if names is not None:
            out["interfaces"] = interface_versions()
            if all(n in names for n in MUTTER_NAMES):
                out["permission"] = "none needed: Mutter's own API asks no dialog"
            if PORTAL_NAME in names:
                from holodesk.display.portal import portal_state  # lazy: as above

                remote_desktop = out["interfaces"].get("portal RemoteDesktop", "")
                remembered = remote_desktop.isdigit() and int(remote_desktop) >= PERSIST_MIN_REMOTE_DESKTOP_VERSION
                out["portal permission"] = (
                    "none: the desktop portal runs but offers no RemoteDesktop, so it controls nothing"
                    if not remote_desktop.isdigit() else
                    "the desktop portal asks once and remembers it (restore token)" if remembered else
                    "the desktop will ask for permission to control the screen each time Holodesk starts "
                    f"(RemoteDesktop sessions cannot be remembered on portal RemoteDesktop version {remote_desktop})")
                out.update(portal_state())
        if out.get("backend") in ("mutter", "portal"):
            out["hotkeys"] = ("GNOME on Wayland has no global key listener for other apps: bind the commands "
                              "`holodesk palette` and `holodesk stop` in Settings > Keyboard > Keyboard "
                              "Shortcuts > Custom Shortcuts (docs/user-guide.md, Wayland)")
    return out


def _monitors() -> dict[str, Any]:
    from holodesk.session.factory import build_capture  # lazy: as in _desktop_backend

    cap = build_capture(load_settings())
    out_backend = getattr(cap, "name", "?")
    try:
        mons = cap.monitors()
        out: dict[str, Any] = {"backend": out_backend, "count": len(mons)}
        for m in mons:
            frame = cap.grab(m.index)
            sx, sy = frame.scale
            out[f"monitor {m.index}"] = (f"{m.width}x{m.height} at {m.left:+d}{m.top:+d} (input space), "
                                         f"frame {frame.width}x{frame.height} px, measured scale {sx:g}x{sy:g}")
        out["fail-safe corners (X11)"] = _failsafe_corners()
        return out
    finally:
        cap.close()


def _failsafe_corners() -> str:
    """Which corners stop a run on X11: the screen's and each X11 monitor's, or only the screen's where the
    X server does not list its monitors (the executor then logs the same)."""
    from holodesk.control.window import monitor_rects  # lazy: see _desktop_backend
    try:
        rects = monitor_rects()
    except HolodeskError as exc:
        return f"only the screen's corners: {exc}"
    if not rects:
        return "no X display"
    return f"the screen's and those of {len(rects)} monitor(s): " + ", ".join(
        f"{w}x{h}{x:+d}{y:+d}" for x, y, w, h in rects)


def _dpi() -> dict[str, Any]:
    ensure_per_monitor_dpi_awareness()  # what a run does before its first grab
    return dpi_awareness()


def _torch() -> dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        return {"installed": False, "note": "the local model needs the 'local' extra: pip install 'holodesk[local]'"}
    import torch  # lazy: the optional 'local' extra

    out: dict[str, Any] = {"installed": True, "version": torch.__version__,
                           "cuda_available": torch.cuda.is_available(), "cuda_build": torch.version.cuda}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out[f"gpu {i}"] = f"{props.name}, {props.total_memory / 2**30:.1f} GiB, sm_{props.major}{props.minor}"
    else:
        out["note"] = "no CUDA GPU: a local model would run on the CPU (far too slow for use)"
    for name in ("transformers", "torchvision", "mamba_ssm", "causal_conv1d", "bitsandbytes", "xgrammar"):
        out[name] = _version_of(name)
    if importlib.util.find_spec("transformers") is not None:
        from holodesk.policy.native.processor import processor_choices  # lazy: needs transformers ('local')

        out["native family processors"] = processor_choices()
    return out


def _local_fit() -> dict[str, Any]:
    """The chosen model (the ``model`` setting) and this GPU: what the model is (from the model registry),
    which precision of it fits the GPU's free memory, whether the chosen precision fits, and which models
    fit at all (the one rule of :mod:`holodesk.core.fit`, as the wizard and Settings use it)."""
    try:
        s = load_settings()
        settings_note = ""
    except Exception as exc:  # the Settings section reports the error itself; judge the defaults here
        s = Settings.model_construct()
        settings_note = f"the settings could not be read ({str(exc).splitlines()[0]}); showing the defaults"
    probe = probe_gpus()
    gpu = probe.best
    free = gpu.free_bytes if gpu else None
    out: dict[str, Any] = {
        "gpu": f"{gpu.name}, {free / GIB:.1f} GiB free of {gpu.total_bytes / GIB:.1f} GiB"
        if gpu and free is not None else f"none ({probe.detail})",
        "chosen model": s.model,
    }
    if settings_note:
        out["note"] = settings_note
    spec = find_model(s.model)
    if spec is None:
        out["model"] = (f"{s.model!r} is not in Holodesk's model registry: its architecture, size and memory "
                        "need are unknown")
        out["precision that fits"] = "unknown"
    else:
        out.update(describe(spec))
        chosen = next(f for f in spec.precision_fits(free) if f.precision == s.precision)
        verdict = "unknown (no GPU measured)" if chosen.fits is None else ("yes" if chosen.fits else "no")
        out["chosen precision"] = f"{s.precision}: needs {chosen.needs_bytes / GIB:.0f} GiB; fits this GPU: {verdict}"
        out["precision that fits"] = spec.best_precision(free) or "none: use a server"
        out["advice"] = spec.explain_fit(free, gpu.name if gpu else "this GPU")
        cache = default_cache_dir()
        disk = disk_free_bytes(cache)
        estimated = "" if spec.checkpoint_bytes is not None else " (estimated)"
        out["disk"] = (f"{format_bytes(disk)} free in {cache} (the checkpoint needs "
                       f"{format_bytes(spec.download_bytes)}{estimated})"
                       + ("" if spec.disk_fits(disk) else ": not enough"))
    try:  # what the next policy will run with: the profile where the settings say "auto" / unset
        choice = run_choice(s.model, reasoning=getattr(s, "reasoning", "auto"), greedy=getattr(s, "greedy", False),
                            temperature=getattr(s, "temperature", None), top_p=getattr(s, "top_p", None), seed=0)
        out["generation"] = (thinking_words(choice.reasoning, choice.think_budget, choice.reasoning_effort,
                                            why=f" (setting {getattr(s, 'reasoning', 'auto')!r})") + "; "
                             + ("greedy" if choice.sampling.greedy else f"sampling at temperature "
                                f"{choice.sampling.temperature}, top_p {choice.sampling.top_p}")
                             + ("" if choice.known else "; " + "; ".join(choice.notes)))
    except Exception as exc:  # a bad sampling setting: said here, refused when the policy is built
        out["generation"] = f"the generation settings are not valid: {exc}"
    out["cost of thinking"] = thinking_note(  # what "think before acting" adds a step on this GPU
        policy=s.policy, model=s.model, precision=s.precision, gpu=gpu,
        bandwidth=memory_bandwidth(gpu.index) if gpu is not None and s.policy == "local" else None)
    fitting = models_that_fit(free)
    out["models that fit this GPU"] = [
        f"{f.model.display_name}: {f.best} (needs {f.model.needs_free_bytes(f.best) / GIB:.0f} GiB)"
        for f in fitting if f.best is not None] or ("unknown: no GPU measured" if gpu is None else "none")
    return out


def _no_gpu_runtime() -> str | None:
    """Why the Holotron kernels cannot run here (torch is not installed, or sees no CUDA GPU), else None."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed (the 'local' extra)"
    import torch  # lazy: the optional 'local' extra

    if not torch.cuda.is_available():
        return ("this PyTorch is built without CUDA" if torch.version.cuda is None
                else "PyTorch finds no CUDA GPU (driver or device missing)")
    return None


def _kernels() -> dict[str, Any]:
    """The Holotron runtime's kernels and decoder where a GPU runtime is installed; else one line saying why they
    are not used (their details and an earlier load's record mean nothing without one)."""
    missing = _no_gpu_runtime()
    if missing is not None:
        return {"not used": f"{missing}: the Holotron kernels and decoders run on an NVIDIA GPU with a CUDA build of "
                            "PyTorch, and are shown where one is"}
    # lazy: the local runtime's modules belong to the optional 'local' extra (torch)
    from holodesk.policy.holotron import kernel_report
    from holodesk.policy.holotron.engine import planned_decoder
    from holodesk.policy.holotron.kernels import last_decoder

    report = dict(kernel_report())
    try:
        s = load_settings()
    except Exception as exc:  # the Settings section reports the settings error itself
        report["decoder"] = f"unknown: the settings could not be read ({str(exc).splitlines()[0]})"
    else:
        report["decoder"] = planned_decoder(s.decoder, cuda=True, precision=s.precision)
    try:
        last = last_decoder()
    except (OSError, ValueError) as exc:
        report[EARLIER_LOAD] = f"its record could not be read: {exc}"
    else:  # the load-time fallbacks (notes) of the last static decoder built on this machine, by another process
        report[EARLIER_LOAD] = _earlier_load(last) if last else "none built on this machine yet"
    report["start read-ahead"] = start_files.describe()
    return report


EARLIER_LOAD = "static decoder of an earlier load"
"""The kernel section's key for the record the last Holotron load on this machine left (another process)."""


def _earlier_load(last: dict[str, Any]) -> dict[str, Any]:
    """The record of the last static decoder built on this machine, led by what it is: when, by which process,
    for which checkpoint, and that it is not this doctor run."""
    pid, checkpoint = last.pop("pid", None), last.pop("checkpoint", None)
    about = (f"recorded {last.pop('recorded', 'at an unknown time')} by "
             + (f"process {pid}" if pid else "another process") + " loading "
             + (str(checkpoint) if checkpoint else "a checkpoint it did not name")
             + "; not this doctor run, and not necessarily the model set now")
    return {"about": about, **last, "notes": last.get("notes") or "none"}


def _checkpoint() -> dict[str, Any]:
    s = load_settings()
    if s.policy != "local":
        return {"note": f"not used: the policy is {s.policy!r}"}
    spec = find_model(s.model)
    if spec is not None and spec.family.runtime != "holotron":
        return {"note": f"not used: {spec.display_name} is run by transformers' {spec.architecture.transformers_class}"
                        ", not the Holotron runtime"}
    if importlib.util.find_spec("transformers") is None:
        return {"note": "the local model needs the 'local' extra: pip install 'holodesk[local]'"}
    from holodesk.policy.holotron.loader import inspect_checkpoint  # lazy: the optional 'local' extra

    return inspect_checkpoint(s.model)


def _endpoint() -> dict[str, Any]:
    s = load_settings()
    if not s.endpoint:
        return {"configured": False,
                "note": "no server set (setup wizard > Use a server, or Settings > Basic > Server URL)"}
    key, source = resolve_api_key(s.endpoint)
    with RemotePolicy(s.endpoint, s.model, api_key=key) as policy:
        return {"configured": True, "api_key_from": source, **policy.check_endpoint()}


def _keyring() -> dict[str, Any]:
    return dict(keyring_status())


def _tray() -> dict[str, Any]:
    return dict(tray_status())


def _settings() -> dict[str, Any]:
    s = load_settings()
    return {"file": str(config_path()), "exists": config_path().exists(), "policy": s.policy, "model": s.model,
            "approval": s.approval, "episodes": str(s.episodes_dir)}


def _accessibility() -> dict[str, Any]:
    from holodesk.control.accessibility import NO_SCREEN_POSITIONS, AccessibilityProbe  # lazy: see _desktop_backend

    report: dict[str, Any] = {
        "without it": "programs that publish no accessibility tree (Tk, games, remote desktops) are judged by "
                      "the model's words and the window alone"}
    missing = languages_without_words(os.environ)
    if missing:
        report["languages without risky-word lists"] = (", ".join(missing) + " (English and de, fr, es, it, pt, "
                                                        "ru are checked)")
    try:
        from holodesk.session.factory import desktop_backend  # lazy: see _desktop_backend

        backend: str = desktop_backend().backend
    except Exception as exc:  # no display: the desktop backend section says why
        backend = f"unknown ({exc})"
    if backend in ("mutter", "portal"):
        report["lookup"] = (f"the focused element only, on the {backend} backend, from the window that states it is "
                            f"active (typing and keys); no element under a point: {NO_SCREEN_POSITIONS}; the "
                            "autopilot asks for every pointer action there (the window under a point is not known)")
    elif backend == "mss":  # X11
        from holodesk.control.grabs import grab_watcher  # lazy: see _desktop_backend

        report["lookup"] = ("the element under each of an action's points and the focused element (X11): the autopilot "
                            "judges a step by what is really there, and checks it again at the moment of input")

        try:
            grab_watcher()
            report["input grabs"] = ("watched (X RECORD extension): a program's own open menu is judged by its items; "
                                     "a grab by another program, or one taken before Holodesk started, asks")
        except OSError as exc:
            report["input grabs"] = f"not watched ({exc}): every input grab asks, a program's own open menu too"
    probe = AccessibilityProbe()
    try:
        report["applications publishing it"] = ", ".join(probe.applications()) or "none"
    except (LookupError, OSError, TimeoutError) as exc:
        report["error"] = f"the accessibility bus (AT-SPI) cannot be read: {exc}"
    finally:
        probe.close()
    return report


def _version_of(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    dist = {"mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d"}.get(module, module)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "installed (version unknown)"


CHECKS: list[Check] = [
    ("Python", _python),
    ("Settings", _settings),
    ("Display server", _display),
    ("Desktop backend", _desktop_backend),
    ("Monitors", _monitors),
    ("DPI awareness", _dpi),
    ("PyTorch and GPU", _torch),
    ("Model and GPU fit", _local_fit),
    ("Holotron kernels", _kernels),
    ("Holotron checkpoint", _checkpoint),
    ("Remote endpoint", _endpoint),
    ("Keychain", _keyring),
    ("System tray", _tray),
    ("Autopilot element checks (AT-SPI)", _accessibility),
]


def shown_value(key: str, value: Any) -> Any:
    """``value`` as the text report shows it: a byte count (an integer under a key ``bytes`` or ending in
    ``_bytes``, e.g. the decoder record's ``state_bytes``) in human units with the exact number,
    ``448700000`` -> ``"448.7 MB (448700000 bytes)"`` (:func:`holodesk.core.units.format_bytes`; below 1 kB the
    unit alone says it: ``"512 B"``); anything else unchanged. The JSON report keeps the numbers."""
    if isinstance(value, int) and not isinstance(value, bool) and (key == "bytes" or key.endswith("_bytes")):
        return format_bytes(value) if abs(value) < 1000 else f"{format_bytes(value)} ({value} bytes)"
    return value


def _write_items(out: TextIO, items: dict[str, Any], depth: int) -> None:
    pad = "  " * depth
    for key, value in items.items():
        if isinstance(value, dict) and value:
            out.write(f"{pad}{key}:\n")
            _write_items(out, value, depth + 1)
        elif isinstance(value, (list, tuple)) and value:
            out.write(f"{pad}{key}:\n")
            for item in value:
                out.write(f"{pad}  - {item}\n")
        else:
            out.write(f"{pad}{key}: {shown_value(key, value)}\n")


CHECK_TIMEOUT_S = 30.0
"""Seconds one check may take before doctor reports it as hanging and moves on."""


def _run_check(check: Callable[[], dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """Run one check in a daemon thread; a check that does not return in ``timeout_s`` is reported,
    not waited for (a keychain waiting on an unlock prompt nobody sees must not hang doctor, F19)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = check()
        except Exception as exc:  # report, never crash: doctor must describe broken machines
            box["result"] = {"error": f"{type(exc).__name__}: {exc}"}

    worker = threading.Thread(target=target, name="doctor-check", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return {"error": f"no answer within {timeout_s:g} s: this part of the system is hanging (for the "
                         "keychain: it may be locked and waiting for an unlock prompt; unlock it in your "
                         "desktop session, or use HOLODESK_API_KEY for this session)"}
    return dict(box["result"])


BUS_SERVICES_TITLE = "Session bus services the checks started"


def collect(timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """Run every check; a failing check yields ``{"error": message}`` for that section, and so does a
    check that takes longer than ``timeout_s`` seconds. The checks' D-Bus calls activate services (the
    desktop portal, the keyring daemon, the accessibility bus); the last section names those that were not
    on the session bus before the checks and have been stopped again (see :func:`_session_bus_services`)."""
    before = _session_bus_services()
    report = {title: _run_check(check, timeout_s) for title, check in CHECKS}
    report[BUS_SERVICES_TITLE] = _stop_services_started_since(before)
    return report


def _session_bus_services() -> dict[int, list[str]] | None:
    """``{process id: its well-known names}`` of every process connected to the session bus
    (``DBUS_SESSION_BUS_ADDRESS``; ``ListNames`` and ``GetConnectionUnixProcessID`` of
    ``org.freedesktop.DBus``; a process with unique names only maps to ``[]``); None without a reachable
    session bus."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return None
    from jeepney import DBusAddress, new_method_call  # lazy: jeepney is installed on Linux only
    from jeepney.io.blocking import open_dbus_connection

    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
    services: dict[int, list[str]] = {}
    try:
        with open_dbus_connection(bus="SESSION") as conn:
            names = conn.send_and_get_reply(new_method_call(bus, "ListNames"), timeout=5.0).body[0]
            for name in sorted(names):
                if name == "org.freedesktop.DBus":
                    continue
                reply = conn.send_and_get_reply(new_method_call(bus, "GetConnectionUnixProcessID", "s", (name,)),
                                                timeout=5.0)
                if reply.header.message_type.name == "method_return":
                    known = services.setdefault(int(reply.body[0]), [])
                    if not name.startswith(":"):
                        known.append(name)
    except (OSError, ValueError):  # no session bus to speak of (gone, refused, bad address): nothing to compare
        return None
    return services


def _stop_services_started_since(before: dict[int, list[str]] | None) -> dict[str, Any]:
    """Stop (SIGTERM) the processes that joined the session bus since ``before``
    (:func:`_session_bus_services`) and that a D-Bus daemon started on demand (``DBUS_STARTER_BUS_TYPE`` in
    their environment; read from ``/proc``): the services the checks activated (desktop portal, keyring
    daemon, accessibility bus and registry). Programs the user starts meanwhile carry no such variable.
    Doctor inspects the desktop; it leaves no daemon of its own running. A process on the bus before is
    never touched; D-Bus activates a stopped service again on its next use.

    Returns the report section: ``{"stopped": ["name, name (pid N)" or "command (pid N)", ...]}`` or
    ``{"stopped": "none"}``."""
    if before is None:
        return {"stopped": "none (no session bus)"}
    after = _session_bus_services() or {}
    stopped = []
    for pid, names in sorted(after.items()):
        if pid in before or pid in (os.getpid(), 0, 1):
            continue
        try:
            activated = b"DBUS_STARTER_BUS_TYPE=" in Path(f"/proc/{pid}/environ").read_bytes()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:  # gone, or another user's
            continue
        if not activated:  # a program the user started meanwhile, not a service a check woke up
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        stopped.append(f"{', '.join(names) or command} (pid {pid})")
    return {"stopped": stopped or "none"}


def _collect_quietly() -> dict[str, dict[str, Any]]:
    """:func:`collect` with whatever the probes print to standard output (python-xlib prints
    "Xlib.xauth: warning, no xauthority details available" there; child processes inherit file
    descriptor 1) sent to standard error, so that standard output holds only the report."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            return collect()
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_report(out: TextIO, *, as_json: bool = False) -> int:
    """Print the report, as indented text (values through :func:`shown_value`: byte counts in human units) or
    (``as_json``) as one JSON object ``{section: {item: value}}`` on one line and nothing else on ``out`` (what
    the probes print goes to standard error); exit status 0 (doctor reports problems, it does not fail on them)."""
    if as_json:
        report = _collect_quietly()
        out.write(json.dumps(report, default=str) + "\n")
        return 0
    report = collect()
    for title, section in report.items():
        out.write(f"{title}\n")
        _write_items(out, section, 1)
    return 0
