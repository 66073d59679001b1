#!/usr/bin/env bash
# Builds .xroot/ (git-ignored), the folder that gpu-eval.sh carries to the lent GPU machine: the Debian 12 packages of
# a minimal disposable desktop (Xvfb with xkbcomp and the xkb data, openbox, dbus-daemon, xprop / xwininfo,
# xdotool, xterm, the DejaVu fonts) plus every shared library they need that the GPU image lacks, and the Python
# wheels (cp312, manylinux) that `holodesk eval` and `transformers serve` import there beyond the image, .whl4's
# included. Run from the repository root on a Debian 12 machine with apt lists and PyPI:
#   WHL4=/path/to/.whl4 bash docs/bench/desktops/gpu-eval-bundle.sh      (WHL4 default: .whl4)
# It ends by proving the library closure: every ELF file the packages install needs only sonames that the
# packages themselves ship or that the GPU image has (gpu-image-sonames.txt: `ldconfig -p` there, x86-64).
set -euo pipefail
export LC_ALL=C  # sort and comm: one collation (gpu-image-sonames.txt is sorted so)
here=$(cd "$(dirname "$0")" && pwd)
root=.xroot
rm -rf "$root"
mkdir -p "$root/debs" "$root/wheels"
# The programs, their data, and the libraries (found by the closure check below) the Ubuntu 24.04 image lacks.
packages=(
    xvfb x11-xkb-utils xkb-data openbox dbus-daemon dbus-session-bus-common x11-utils xdotool xterm fonts-dejavu-core
    libapparmor1 libdbus-1-3 libcairo-gobject2 libcairo2 libdatrie1 libfontconfig1 libfontenc1 libfreetype6 libfribidi0
    libgdk-pixbuf-2.0-0 libgl1 libglib2.0-0 libglvnd0 libglx0 libgraphite2-3 libharfbuzz0b libice6 libimlib2
    libjpeg62-turbo libobrender32v5 libobt2v5 libpango-1.0-0 libpangocairo-1.0-0 libpangoft2-1.0-0 libpangoxft-1.0-0
    libpixman-1-0 librsvg2-2 libsm6 libstartup-notification0 libthai0 libunwind8 libx11-xcb1 libxaw7 libxcb-randr0
    libxcb-render0 libxcb-shape0 libxcb-shm0 libxcb-util1 libxcb-xfixes0 libxcursor1 libxdo3 libxfixes3 libxfont2
    libxft2 libxi6 libxinerama1 libxkbcommon0 libxkbfile1 libxmu6 libxpm4 libxrandr2 libxrender1 libxt6 libxtst6
)
(cd "$root/debs" && apt-get download "${packages[@]}" >/dev/null)
# Wheels: the harness's capture and input (mss, python-xlib, pyautogui and its helpers, built here from their
# pure-Python sources where PyPI has no wheel), and `transformers serve` (fastapi, uvicorn, openai and their needs
# that the image lacks). Versions: those of the project's test environment. Not mouseinfo (pyautogui's optional
# helper): without tkinter, as on the GPU image, it ends the process at import (sys.exit), which pyautogui's
# `except ImportError` does not catch; absent, pyautogui imports without it.
pyget() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$root/wheels" "$@"
}
pyget mss==10.2.0 python-xlib==0.33 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 openai==3.63.0 jiter \
    sniffio distro opentelemetry-api
python3 -m pip wheel -q --no-deps -w "$root/wheels" pyautogui==0.9.54 pymsgbox pytweening pyscreeze \
    pyperclip
# The GPU runtime's wheels from .whl4 (WHL4; ../shared/tools/gpu-wheels.sh builds it, see gpu-session.sh), less
# what an eval run does not load (bitsandbytes: quantised weights; mistral-common: the bench's tokenizer; hf-xet: hub
# downloads, and the image has it), so that .xroot alone travels.
cp "${WHL4:-.whl4}"/*.whl "${WHL4:-.whl4}"/mamba_ssm-*.tar.gz "$root/wheels/"
rm -f "$root"/wheels/{bitsandbytes,mistral_common,hf_xet}-*
# The closure check, on the packages unpacked into a scratch folder: from the programs the harness runs and the
# libraries python-mss loads, every NEEDED soname is followed through the shipped libraries and must end in one
# that is shipped or that the GPU image has.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for f in "$root"/debs/*.deb; do dpkg -x "$f" "$scratch"; done
lib=$scratch/usr/lib/x86_64-linux-gnu
todo=("$scratch"/usr/bin/{Xvfb,xkbcomp,openbox,dbus-daemon,xprop,xwininfo,xdotool,xterm}
      "$lib"/lib{xcb-randr,xcb-render,xcb-shm,xcb-xfixes}.so.0)
declare -A seen=()
missing=""
while [ ${#todo[@]} -gt 0 ]; do
    file=${todo[0]}; todo=("${todo[@]:1}")
    for soname in $(objdump -p "$file" | awk '/NEEDED/{print $2}'); do
        [ -n "${seen[$soname]:-}" ] && continue
        seen[$soname]=1
        if [ -e "$lib/$soname" ]; then todo+=("$lib/$soname")
        elif [ -e "$scratch/lib/x86_64-linux-gnu/$soname" ]; then todo+=("$scratch/lib/x86_64-linux-gnu/$soname")
        elif ! grep -qx "$soname" "$here/gpu-image-sonames.txt"; then missing+=" $soname ($(basename "$file"))"; fi
    done
done
if [ -n "$missing" ]; then
    echo "the bundle lacks these libraries that the GPU image lacks too:$missing" >&2
    exit 1
fi
echo "closure: every NEEDED soname is shipped or in the GPU image"
# LD_LIBRARY_PATH puts the shipped libraries first for the eval's processes: none may stand in for one of the image's.
shadowing=$(find "$scratch" -name 'lib*.so*' \( -type f -o -type l \) -printf '%f\n' | sort -u \
    | comm -12 - "$here/gpu-image-sonames.txt")
if [ -n "$shadowing" ]; then
    echo "the bundle ships libraries the GPU image has (they would shadow the image's): $shadowing" >&2
    exit 1
fi
echo "no shipped library has the name of one in the GPU image"
du -sh "$root" "$root/debs" "$root/wheels"
