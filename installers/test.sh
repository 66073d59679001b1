#!/usr/bin/env bash
# Sets up everything the test suite needs and runs all of it: lint, types, layer contracts, pytest.
# The GUI tests start their own Xvfb servers; no display is needed. GPU tests are skipped without a GPU.
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"

apt_install "${APT_RUNTIME[@]}" "${APT_TEST[@]}" "${APT_WAYLAND[@]}" "${APT_WAYLAND_TEST[@]}"
make_venv
# CPU PyTorch for tests (a plain 'torch' would pull a multi-GB CUDA build).
pip_install -c "$HOLODESK_ROOT/installers/constraints-test.txt" "torch==2.13.0"
pip_install -c "$HOLODESK_ROOT/installers/constraints-test.txt" -e "$HOLODESK_ROOT[local,dev,serve-test,wayland,quant]"
# Bench-only: the tekken vocabulary file of mistral-common (holodesk.bench.stand_in_tokenizer reads the file and
# imports nothing of the package). Kept off the import path: transformers uses an importable mistral-common as its
# tokenizer backend, and this one lacks its dependencies (they would pin numpy < 2.4).
pip_install --no-deps --target "$VENV/bench-data" --upgrade "mistral-common==1.13.1"
fix_xlib

cd "$HOLODESK_ROOT"
export PYTHONDONTWRITEBYTECODE=1 HOLODESK_TESTING=1
say "ruff";          "$VENV/bin/ruff" check app tests
say "mypy";          "$VENV/bin/mypy"
say "import-linter"; "$VENV/bin/lint-imports"
say "pytest"
exec "$VENV/bin/python" -m pytest "$@"
