#!/usr/bin/env bash
# Re-run of the Holotron runtime on the lent H200 after the "real desktops" round (agent contract prompt,
# checkpoint files, download hook): every GPU test, the bench at 1080p and the product path (propose() with
# the default protocol). Run from the repo root on the GPU machine with the carried wheels in .whl4
# (transformers 5.23.0, xgrammar 0.2.8 and its pydantic / tvm-ffi needs, the mamba-ssm 2.3.2.post1 sdist).
#   bash docs/bench/desktops/gpu-session.sh [OUT]
set -u
out=${1:-${OUT:-/tmp/holodesk-bench}}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl4/*.whl 2>/dev/null || exit 1
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python3 -m pip install -q --no-index --no-deps \
    --no-build-isolation --target /tmp/site .whl4/mamba_ssm-*.tar.gz >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron -W ignore 2>&1 \
    | grep -v "warnings.warn\|UserWarning" | tail -15 | tee "$out/gpu-tests.log"
timeout 300 python3 -c 'import sys; from holodesk.policy.holotron.bench import main; sys.exit(main(sys.argv[1:]))' \
    --sizes 1920x1080 --history 1,8 --episode-steps 8 --episode-repeats 2 --repeats 2 --no-stock \
    --json "$out/bench.json" 2>&1 | grep -v "Warning\|warn(" | tee "$out/bench.log"
timeout 200 python3 -m holodesk.policy.holotron.fullsize --repeats 2 --episode-steps 4 --max-new-tokens 1024 \
    --out "$out/product.json" > "$out/product.log" 2>&1
grep -v "^ \|^{\|^}\|Warning\|warn(" "$out/product.log" | tail -40
