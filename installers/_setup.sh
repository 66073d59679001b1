# Shared setup steps for installers/holodesk.sh and installers/test.sh (sourced, not run).
# Creates .venv in the repository root and installs Holodesk into it. Safe to run again: it only
# installs what is missing.
set -euo pipefail

HOLODESK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HOLODESK_VENV:-$HOLODESK_ROOT/.venv}"
PY="${PYTHON:-python3}"

# Debian/Ubuntu packages: venv support for python3 (Debian's python3 lacks ensurepip without it), Qt's xcb
# platform plugin, clipboard and X tools.
APT_RUNTIME=(python3-venv libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-xinerama0 libxcb-randr0 libxcb-render-util0
             libxcb-image0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libegl1 libgl1 libfontconfig1
             libdbus-1-3 xclip x11-xserver-utils)
# Extra packages the test suite needs: a virtual X server, a tray host, a real keychain, fonts, and the
# real desktop of the e2e tests (tests/helpers/desktop.py): window managers, a compositor, third-party
# programs, Tk and GTK for the test forms, numlockx for the lock-key tests, the accessibility bus and GTK's
# bridge to it (the autopilot's element checks); pcmanfm, gnumeric, feh and l3afpad for the evaluation suite
# (app/holodesk/eval/suite, docs/evaluation.md).
APT_TEST=(xvfb xdotool x11-utils trayer gnome-keyring dbus dbus-x11 fonts-dejavu-core fonts-noto-core
          fonts-noto-cjk openbox xfwm4 picom mousepad xterm zenity yad python3-tk python3-gi gir1.2-gtk-3.0
          numlockx at-spi2-core libatk-bridge2.0-0 pcmanfm gnumeric feh l3afpad)

# GNOME on Wayland (the 'mutter' desktop backend): GStreamer with PipeWire and its introspection data, and what
# pip needs to build PyGObject (the 'wayland' extra: no wheels on PyPI).
APT_WAYLAND=(gstreamer1.0-pipewire gstreamer1.0-plugins-base gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
             libgirepository1.0-dev libcairo2-dev pkg-config gcc libc6-dev python3-dev)
# The Wayland tests' private headless GNOME session (tests/helpers/mutter.py) and its native GTK4 app.
APT_WAYLAND_TEST=(mutter xwayland pipewire wireplumber dbus python3-gi gir1.2-gtk-4.0
                  gnome-shell xdg-desktop-portal xdg-desktop-portal-gnome python3-dbusmock)

say() { printf '\033[1mholodesk setup:\033[0m %s\n' "$*" >&2; }

apt_install() {
    # apt_install PKG...: installs the missing ones (as root, or through sudo).
    command -v dpkg-query >/dev/null || { say "not a Debian/Ubuntu system: install these yourself: $*"; return 0; }
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing system packages: ${missing[*]}"
    local SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

make_venv() {
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        say "Holodesk needs Python 3.11 or newer; $PY is $("$PY" -V 2>&1 || echo 'not found'). Install one (e.g. apt install python3.11 python3.11-venv) and run again with PYTHON=python3.11"
        exit 1
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating the virtual environment in $VENV"
        "$PY" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
}

pip_install() {
    "$VENV/bin/python" -m pip install -q "$@"
}

fix_xlib() {
    # pyautogui depends on python3-xlib 0.15, which installs into the same 'Xlib' package as
    # python-xlib; Holodesk's X11 typer needs python-xlib's, so it must be the one installed last.
    if "$VENV/bin/python" -m pip show -q python3-xlib >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "python-xlib>=0.33"
    fi
}
