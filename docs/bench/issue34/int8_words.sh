#!/usr/bin/env bash
# Issue 34, int8 decode: the int8 matrix-vector kernel that turns bytes into floats by their bits (`int8-words`, no
# I2F instruction) against the one that converts with I2F (`int8`), on the lent GPU machine, in one call:
#   bash docs/bench/issue34/int8_words.sh OUT        (repo root, .whl4 carried)
# 1. the int8 GPU tests of tests/policy/holotron/test_ops_quant.py (every tile at the 12B shapes, choose, the op
#    compiled and replayed in a CUDA graph, the captured decoder);
# 2. docs/tools/probe_nf4_gemv.py --format int8: every int8 tile of both kinds at the 12B shapes, GB/s and share of copy;
# 3. `holodesk bench --quant 8bit` twice in separate processes: as main chooses (both kinds timed at load), then with
#    the `int8-words` tiles taken out of quant.tiles (the baseline: the kernel choice of before), same machine.
# Limits: TESTS_S (150), PROBE_S (130; 0 leaves the probe out), BENCH_S (110 each); VARIANTS (chosen without-words).
set -u
out=${1:?usage: int8_words.sh OUT}
mkdir -p "$out"
bash docs/bench/desktops/gpu-session.sh "$out" install > "$out/install.log" 2>&1 \
    || { echo "install failed"; tail -5 "$out/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
timeout "${TESTS_S:-150}" python3 -m pytest -q -rA -p no:cacheprovider -m gpu tests/policy/holotron/test_ops_quant.py \
    -k int8 -W ignore 2>&1 | grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Error" | tee "$out/tests.log"
if [ "${PROBE_S:-130}" != 0 ]; then
    timeout "${PROBE_S:-130}" python3 docs/tools/probe_nf4_gemv.py --format int8 --copies 4 2>&1 \
        | grep -v "Warning\|warn(" | tee "$out/probe.log"
fi
for variant in ${VARIANTS:-chosen without-words}; do
    echo "== bench 8bit: $variant"
    timeout "${BENCH_S:-110}" python3 - "$variant" "$out/bench-8bit-$variant.json" <<'PY' 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-700 | tee "$out/bench-8bit-$variant.log"
import sys

from holodesk.bench.cli import main
from holodesk.policy.holotron.ops import quant

if sys.argv[1] == "without-words":  # the baseline: quant.choose times only the I2F kernel's tiles
    every = quant.tiles
    quant.tiles = lambda *a, **k: [t for t in every(*a, **k) if t.kind != "int8-words"]  # type: ignore[assignment]
sys.exit(main(["--sizes", "", "--history", "", "--episode-steps", "0", "--no-stock", "--quant", "8bit",
               "--repeats", "2", "--tokenizer", "tekken", "--json", sys.argv[2]]))
PY
done
