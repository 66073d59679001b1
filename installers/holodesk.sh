#!/usr/bin/env bash
# Sets up Holodesk on a fresh Linux machine (X11 session, or GNOME on Wayland) and starts it.
#   bash installers/holodesk.sh                 -> the tray app (the command box opens from the tray / hotkey)
#   bash installers/holodesk.sh run "TASK" ...  -> any holodesk sub-command (run, doctor, bench, ...)
# With an NVIDIA GPU it also installs the local model runtime (torch, transformers, mamba-ssm kernels).
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"

apt_install "${APT_RUNTIME[@]}" "${APT_WAYLAND[@]}"
make_venv
if ! "$VENV/bin/python" -c "import holodesk" 2>/dev/null || [ "$HOLODESK_ROOT/pyproject.toml" -nt "$VENV/.holodesk-installed" ]; then
    say "installing Holodesk"
    if command -v nvidia-smi >/dev/null 2>&1; then
        pip_install -e "$HOLODESK_ROOT[local,quant,wayland]"
        # Fused Mamba-2 kernels: the Triton-only build needs no CUDA compiler (see docs/holotron-runtime.md).
        MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE \
            pip_install --no-build-isolation --no-deps mamba-ssm \
            || say "mamba-ssm could not be installed: the local model will use slow torch code ('holodesk doctor' shows it)"
    else
        pip_install -e "$HOLODESK_ROOT[wayland]"
        say "no NVIDIA GPU found: use a server (setup wizard > Use a server, or Settings > Basic > Server URL) or a replay file of model replies (holodesk run --script FILE); see README"
    fi
    fix_xlib
    touch "$VENV/.holodesk-installed"
fi
exec "$VENV/bin/holodesk" "$@"
