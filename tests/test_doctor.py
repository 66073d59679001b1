"""holodesk doctor: one broken or hanging probe never hides or blocks the others (F19)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from holodesk import doctor

ROOT = Path(__file__).resolve().parents[1]


def test_a_hanging_check_is_reported_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hangs() -> dict[str, object]:
        release.wait(60)  # like a keychain waiting on an unlock prompt nobody sees
        return {"never": "shown"}

    def fails() -> dict[str, object]:
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(doctor, "CHECKS", [("Keychain", hangs), ("Broken", fails),
                                           ("Python", lambda: {"version": "3"})])
    t0 = time.monotonic()
    report = doctor.collect(timeout_s=0.5)
    release.set()
    assert time.monotonic() - t0 < 5
    assert "no answer within 0.5 s" in report["Keychain"]["error"]
    assert "unlock" in report["Keychain"]["error"]
    assert report["Broken"] == {"error": "RuntimeError: probe exploded"}
    assert report["Python"] == {"version": "3"}


def test_kernel_section_names_the_decoder_and_survives_bad_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(doctor, "_no_gpu_runtime", lambda: None)  # fake: a CUDA GPU runtime, which cannot run here
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron kernels", doctor._kernels)])
    config = tmp_path / "config.toml"
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    config.write_text('decoder = "stock"\n')
    section = doctor.collect(timeout_s=30)["Holotron kernels"]
    assert section["decoder"].startswith("stock:") and "slow path" in section["decoder"]
    config.write_text('decoder = "fast"\n')  # invalid: the kernel report must still be shown
    section = doctor.collect(timeout_s=30)["Holotron kernels"]
    assert "functions" in section and section["decoder"].startswith("unknown: the settings could not be read")


def test_local_fit_names_the_precision_the_wizard_would_pick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    from holodesk.core.fit import best_precision

    exe = tmp_path / "nvidia-smi"  # a fake nvidia-smi: this machine has no NVIDIA driver
    exe.write_text('#!/bin/sh\necho "0, NVIDIA GeForce RTX 4090, 24564, 23500"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    section = doctor._local_fit()
    assert section["precision that fits"] == best_precision(23500 * 2**20) == "4bit"
    assert "RTX 4090, 22.9 GiB free" in section["gpu"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    section = doctor._local_fit()
    assert section["precision that fits"] == "none: use a server" and "nvidia-smi" in section["gpu"]


def _fake_nvidia_smi(folder: Path, free_mib: int) -> None:
    import stat

    exe = folder / "nvidia-smi"  # a fake nvidia-smi: this machine has no NVIDIA driver
    exe.write_text(f'#!/bin/sh\necho "0, NVIDIA GeForce RTX 4090, 24564, {free_mib}"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_doctor_reports_the_chosen_model_its_architecture_precision_and_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chosen model comes from the settings file; doctor names its architecture and says whether the
    chosen precision fits the (fake) GPU, which precision does, and which registry models fit."""
    from holodesk.policy.models import get_model, models_that_fit

    _fake_nvidia_smi(tmp_path, 23500)  # 22.9 GiB free
    monkeypatch.setenv("PATH", str(tmp_path))
    config = tmp_path / "settings.toml"
    config.write_text('model = "Hcompany/Holo2-8B"\nprecision = "bf16"\n', encoding="utf-8")
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    monkeypatch.setattr(doctor, "CHECKS", [("Model and GPU fit", doctor._local_fit)])
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert section["chosen model"] == "Hcompany/Holo2-8B"
    assert section["model"] == "Holo2-8B (Hcompany/Holo2-8B)"
    assert section["checkpoint type"] == "qwen3_vl (the model_type in its config.json)"
    assert section["runs as"] == "transformers' Qwen3VLForConditionalGeneration"
    assert section["reasoning"] == ("switched on or off by the chat-template variable 'thinking' (true or false); "
                                    "it thinks when nothing switches it")
    assert section["protocol"] == "agent-loop-v1"
    assert section["license"] == "Apache 2.0"
    assert section["chosen precision"] == "bf16: needs 20 GiB; fits this GPU: yes"
    assert section["precision that fits"] == get_model("holo2-8b").best_precision(23500 * 2**20) == "bf16"
    listed = section["models that fit this GPU"]
    assert [line.split(":")[0] for line in listed] == [f.model.display_name for f in models_that_fit(23500 * 2**20)]
    assert "Holotron-12B: 4bit (needs 12 GiB)" in listed
    assert not any(line.startswith("Holotron-3-Nano") for line in listed)  # needs 25 GiB even in NF4
    # what the next policy runs with: Holo2's profile (thinking on, as its makers run it), sampled
    assert section["generation"].startswith("think before acting on (setting 'auto'), up to 2,048 tokens of thought")
    assert section["profile"].startswith("think before acting on, up to 2,048 tokens of thought; temperature 0.8")
    assert "sampling at temperature 0.8, top_p 1.0" in section["generation"]

    config.write_text('model = "Hcompany/Holotron-3-Nano"\nprecision = "4bit"\n', encoding="utf-8")
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert section["chosen precision"] == "4bit: needs 25 GiB; fits this GPU: no"
    assert section["precision that fits"] == "none: use a server"
    assert section["checkpoint type"] == "nemotron_h_omni, inferred from its base model [not read from its config.json]"
    assert section["profile"].startswith("think before acting on, effort medium, up to 3,072 tokens of thought;")
    assert section["license"] == "unknown"  # not found in the sources: said, not invented

    # Holotron-12B: the checkpoint's own type and the class that runs it, in words; thinking off by default
    config.write_text('model = "Hcompany/Holotron-12B"\n', encoding="utf-8")
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert section["architecture"] == "Nemotron-H hybrid: Mamba-2 + attention (dense), RADIO vision tower"
    assert section["checkpoint type"] == "NemotronH_Nano_VL_V2 (the model_type in its config.json)"
    assert section["runs as"] == ("transformers' NemotronH_Omni_Reasoning_V3, its config read as model_type "
                                  "nemotron_h_omni when it loads")
    assert section["reasoning"] == ("switched on or off by a /think or /no_think line in the system prompt; whether "
                                    "it thinks when nothing switches it is not published")
    assert section["profile"].startswith("think before acting off; when on, up to 1,024 tokens of thought; ")
    assert section["generation"].startswith("think before acting off (setting 'auto'); when on, up to 1,024 tokens "
                                            "of thought; sampling at temperature 0.8, top_p 0.95")
    assert "unswitched" not in str(section) and "the checkpoint says" not in str(section)

    config.write_text('model = "/data/my-own-checkpoint"\n', encoding="utf-8")
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert "not in Holodesk's model registry" in section["model"]
    assert section["precision that fits"] == "unknown"
    assert "think before acting off" in section["generation"]  # Holodesk's defaults, and it says so
    assert "not in Holodesk's model registry" in section["generation"]


def _processes_on(display: str) -> set[tuple[int, str]]:
    """(pid, command line) of every process whose environment names ``display`` (what an X11 D-Bus
    autolaunch leaves behind carries it)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if f"DISPLAY={display}".encode() in env and "Xvfb" not in cmd:
            found.add((int(entry.name), cmd))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
def test_doctor_leaves_no_process_behind(make_xvfb: Any, tmp_path: Path) -> None:
    """The real `holodesk doctor` on a display without a D-Bus session bus (as under Xvfb, CI, ssh -X):
    no dbus-daemon / dbus-launch (or anything else) started for that display is left running."""
    server = make_xvfb(1024, 768)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOLODESK_", "DBUS_")) and k != "XDG_RUNTIME_DIR"}
    env.update(server.env(), HOLODESK_CONFIG=str(tmp_path / "settings.toml"), PYTHONPATH=str(ROOT / "app"))
    env.pop("QT_QPA_PLATFORM", None)
    before = _processes_on(server.display)
    res = subprocess.run([sys.executable, "-m", "holodesk", "doctor"], env=env, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert "System tray" in res.stdout and "session_bus: none" in res.stdout
    left = _processes_on(server.display) - before
    for pid, _cmd in left:  # end what the check started, so a failure leaves nothing behind either
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    assert left == set()


def test_kernel_section_shows_the_last_static_decoder_and_its_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The static decoder is built in the app's process; doctor, another process, shows what the last one
    recorded at load: its set-up and every load-time fallback (notes), led by when, by which process and for which
    checkpoint it was recorded, and that it is not this doctor run."""
    pytest.importorskip("torch")
    from holodesk.policy.holotron.kernels import record_decoder

    monkeypatch.setattr(doctor, "_no_gpu_runtime", lambda: None)  # fake: a CUDA GPU runtime, which cannot run here
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron kernels", doctor._kernels)])
    monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    section = doctor.collect(timeout_s=30)["Holotron kernels"]
    assert section[doctor.EARLIER_LOAD] == "none built on this machine yet"
    record_decoder({"decoder": "static", "decode": "plain torch blocks, F.linear, eager",
                    "notes": ["decode with compiled blocks failed at load (RuntimeError: boom); using plain torch"]},
                   checkpoint="/models/Holotron-12B")
    last = doctor.collect(timeout_s=30)["Holotron kernels"][doctor.EARLIER_LOAD]
    assert last["decode"] == "plain torch blocks, F.linear, eager"
    assert last["about"].startswith("recorded 20") and f"by process {os.getpid()} loading /models/Holotron-12B" in (
        last["about"]) and "not this doctor run" in last["about"], last["about"]
    assert next(iter(last)) == "about" and "recorded" not in last and "pid" not in last
    assert last["notes"] == ["decode with compiled blocks failed at load (RuntimeError: boom); using plain torch"]
    (tmp_path / "state" / "holodesk" / "holotron-decoder.json").write_text("{not json")
    broken = doctor.collect(timeout_s=30)["Holotron kernels"][doctor.EARLIER_LOAD]
    assert broken.startswith("its record could not be read")


def test_without_a_gpu_runtime_the_kernel_section_is_one_line_and_no_earlier_record(tmp_path: Path) -> None:
    """On a machine without a CUDA build of PyTorch (here: torch hidden, as a machine set up without the 'local'
    extra; and this machine's own CPU-only torch when it has one) the kernel section says in one line why the
    kernels are not used, and a decoder record another run left on the machine is not shown."""
    import importlib.util
    import json

    record = tmp_path / "state" / "holodesk" / "holotron-decoder.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"recorded": "2026-12-06 11:57:41", "decoder": "static", "max_len": 16384}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), HOLODESK_CONFIG=str(tmp_path / "config.toml"),
               PYTHONPATH=str(ROOT / "app"))
    hidden = "sys.modules['torch'] = None; "
    for hide in [hidden] + ([""] if importlib.util.find_spec("torch") is not None else []):
        code = (f"import sys; {hide}from holodesk import doctor; "
                "doctor.CHECKS = [('Holotron kernels', doctor._kernels)]; sys.exit(doctor.print_report(sys.stdout))")
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        if not hide and "Holotron kernels\n  not used:" not in res.stdout:
            pytest.skip("this machine's PyTorch sees a CUDA GPU")  # the section is the full report there
        lines = res.stdout.split("Holotron kernels\n", 1)[1].splitlines()
        assert not lines[1].startswith("  "), res.stdout + res.stderr  # one line: the next section follows
        lines = ["Holotron kernels", lines[0]]
        why = "PyTorch is not installed" if hide else "PyTorch"
        assert lines[1].startswith("  not used: ") and why in lines[1] and "NVIDIA GPU" in lines[1], lines
        assert "11:57:41" not in res.stdout and "static" not in res.stdout


def test_the_decoder_records_byte_counts_read_in_human_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report shows the last static decoder's byte fields (its state, its kept snapshots) in MB/GB with
    the exact number; ``--json`` keeps the numbers."""
    import json

    pytest.importorskip("torch")
    from holodesk.policy.holotron.kernels import record_decoder

    monkeypatch.setattr(doctor, "_no_gpu_runtime", lambda: None)  # fake: a CUDA GPU runtime, which cannot run here
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron kernels", doctor._kernels)])
    monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    record_decoder({"decoder": "static", "max_len": 16384, "state_bytes": 3457040,
                    "snapshots": {"slots": 3, "bytes": 448700000, "positions": [812]},
                    "kept_snapshot_bytes": 2_160_000_000, "tiny_bytes": 512})
    assert doctor.print_report(sys.stdout) == 0
    text = capsys.readouterr().out
    assert "    state_bytes: 3.5 MB (3457040 bytes)\n" in text, text
    assert "      bytes: 448.7 MB (448700000 bytes)\n" in text, text
    assert "    kept_snapshot_bytes: 2.2 GB (2160000000 bytes)\n" in text, text
    assert "    tiny_bytes: 512 B\n" in text and "    max_len: 16384\n" in text, text  # not a byte count
    assert doctor.print_report(sys.stdout, as_json=True) == 0
    last = json.loads(capsys.readouterr().out)["Holotron kernels"][doctor.EARLIER_LOAD]
    assert (last["state_bytes"], last["snapshots"]["bytes"]) == (3457040, 448700000)


def test_torch_section_names_each_native_familys_processor() -> None:
    """doctor shows how each native family's processor is built here: transformers' AutoProcessor with
    torchvision, else the image path Holodesk builds without it (the same decision as load_processor)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.utils import is_torchvision_available

    from holodesk.policy.native.processor import OMNI_WITHOUT_TORCHVISION, QWEN_WITHOUT_TORCHVISION

    section = doctor._torch()
    choices = section["native family processors"]
    assert set(choices) == {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "nemotron_h_omni"}
    if is_torchvision_available():
        assert set(choices.values()) == {"AutoProcessor"} and section["torchvision"] != "not installed"
    else:
        assert section["torchvision"] == "not installed"
        assert choices["nemotron_h_omni"] == OMNI_WITHOUT_TORCHVISION
        assert choices["qwen3_vl"] == QWEN_WITHOUT_TORCHVISION


PORTAL_SERVICE = Path("/usr/libexec/xdg-desktop-portal")


def _bus_call(address: str, destination: str, path: str, interface: str, method: str,
              signature: str | None = None, body: tuple[Any, ...] = ()) -> Any:
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    with open_dbus_connection(bus=address) as conn:
        return conn.send_and_get_reply(
            new_method_call(DBusAddress(path, bus_name=destination, interface=interface), method, signature, body),
            timeout=60).body


@pytest.mark.skipif(not PORTAL_SERVICE.exists() or not shutil.which("dbus-daemon"),
                    reason="needs dbus-daemon and xdg-desktop-portal (installers/_setup.sh)")
def test_a_portal_without_remote_desktop_is_not_said_to_ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an X11 desktop has once a GTK program (mousepad) activated it: xdg-desktop-portal on the session
    bus with no backend offering RemoteDesktop. The doctor says the portal controls nothing; it does not
    claim the desktop will ask for permission on every start."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CURRENT_DESKTOP": "", "GSETTINGS_BACKEND": "memory"}
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"], env=env,
                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    services: list[int] = []
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        # activating the portal, as a GTK program does (the call waits until it owns its name)
        _bus_call(address, "org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop",
                  "org.freedesktop.DBus.Peer", "Ping")
        names = _bus_call(address, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                          "ListNames")[0]
        for name in names:
            if not name.startswith(":") and name != "org.freedesktop.DBus":
                services.append(int(_bus_call(address, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                              "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s",
                                              (name,))[0]))
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
        monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "settings.toml"))
        report = doctor._desktop_backend()
        assert report["interfaces"]["portal RemoteDesktop"] == "absent", report
        assert report["portal permission"] == (
            "none: the desktop portal runs but offers no RemoteDesktop, so it controls nothing")
    finally:
        bus.terminate()
        bus.wait(timeout=30)
        for pid in set(services):  # the activated services end with their bus; make sure of it
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def test_doctor_json_prints_the_report_as_one_json_object_and_nothing_else(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """What the probes print (python-xlib's "Xlib.xauth: warning" through print(), a child process through
    file descriptor 1) goes to standard error; standard output is the JSON object alone."""
    import json

    from holodesk.cli import main

    def fails() -> dict[str, object]:
        raise RuntimeError("no GPU driver")

    def chatty() -> dict[str, object]:
        print("Xlib.xauth: warning, no xauthority details available")
        subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
        return {"kind": "x11"}

    monkeypatch.setattr(doctor, "CHECKS", [("PyTorch and GPU", lambda: {"cuda_available": False, "version": "2"}),
                                           ("Holotron kernels", fails), ("Display server", chatty)])
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    assert main(["doctor", "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out) == {"PyTorch and GPU": {"cuda_available": False, "version": "2"},
                               "Holotron kernels": {"error": "RuntimeError: no GPU driver"},
                               "Display server": {"kind": "x11"},
                               doctor.BUS_SERVICES_TITLE: {"stopped": "none (no session bus)"}}
    assert "Xlib.xauth: warning" in err and "from a child process" in err
    assert main(["doctor"]) == 0  # the text report is unchanged
    text = capfd.readouterr().out
    assert "PyTorch and GPU\n  cuda_available: False\n" in text and "{" not in text


def _processes_with(needle: str) -> dict[int, str]:
    """{pid: command line} of every process whose environment contains ``needle``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle.encode() in (entry / "environ").read_bytes():
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
    return found


@pytest.mark.skipif(not PORTAL_SERVICE.exists() or not shutil.which("dbus-daemon")
                    or not shutil.which("gnome-keyring-daemon"),
                    reason="needs dbus-daemon, xdg-desktop-portal and gnome-keyring (installers/_setup.sh)")
def test_doctor_stops_the_bus_services_its_checks_started(tmp_path: Path) -> None:
    """The real `holodesk doctor` on a private session bus: the portal, the keyring daemon and the
    accessibility bus its checks activate are stopped when it ends (read from the bus and from /proc);
    the report names them."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CURRENT_DESKTOP": "", "GSETTINGS_BACKEND": "memory",
           "HOLODESK_CONFIG": str(tmp_path / "settings.toml"), "PYTHONPATH": str(ROOT / "app"),
           "QT_QPA_PLATFORM": "offscreen"}
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"], env=env,
                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        socket_path = address.split("path=", 1)[1].split(",", 1)[0]
        res = subprocess.run([sys.executable, "-m", "holodesk", "doctor"],
                             env={**env, "DBUS_SESSION_BUS_ADDRESS": address}, capture_output=True, text=True,
                             timeout=300, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr

        def on_the_bus() -> list[str]:
            names = _bus_call(address, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                              "ListNames")[0]
            return [n for n in names if not n.startswith(":") and n != "org.freedesktop.DBus"]

        deadline = time.monotonic() + 20
        while (on_the_bus() or _processes_with(socket_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert on_the_bus() == [] and _processes_with(socket_path) == {}
        report = res.stdout.split("Session bus services the checks started", 1)[-1]
        assert "org.freedesktop.portal.Desktop (pid" in report and "org.freedesktop.secrets" in report, report
    finally:
        for pid in _processes_with(socket_path if "socket_path" in locals() else str(runtime)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        bus.terminate()
        bus.wait(timeout=30)


def test_the_holotron_checkpoint_section_is_not_used_for_another_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model of a native family is not read as a Holotron checkpoint: the section says which class runs it."""
    config = tmp_path / "settings.toml"
    config.write_text('model = "Hcompany/Holo2-8B"\n', encoding="utf-8")
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron checkpoint", doctor._checkpoint)])
    section = doctor.collect(timeout_s=30)["Holotron checkpoint"]
    assert section == {"note": "not used: Holo2-8B is run by transformers' Qwen3VLForConditionalGeneration, not the "
                               "Holotron runtime"}
