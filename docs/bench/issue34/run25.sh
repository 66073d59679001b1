#!/usr/bin/env bash
# Issue 34, run 25 on the lent GPU machine (repo root, .whl4 carried), one call:
# 1. the int8 GPU tests and `holodesk bench --quant 8bit` as main chooses (int8_words.sh, no probe, no baseline);
# 2. read_ahead_depth.py: the read-ahead's depth against the cold imports beside it;
# 3. with BENCH_TESTS=1, the bench's GPU test (tests/bench/test_bench.py), after b0dde93.
#   bash docs/bench/issue34/run25.sh OUT
set -u
out=${1:?usage: run25.sh OUT}
mkdir -p "$out"
TESTS_S=100 PROBE_S=0 BENCH_S=110 VARIANTS=chosen bash docs/bench/issue34/int8_words.sh "$out/int8"
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
timeout 170 python3 docs/bench/issue34/read_ahead_depth.py "$out/read-ahead-depth.json" 16 2>&1 \
    | grep -v "Warning\|warn(" | tee "$out/read-ahead-depth.log"
if [ -n "${BENCH_TESTS:-}" ]; then
    timeout 150 python3 -m pytest -q -rA -p no:cacheprovider -m gpu tests/bench/test_bench.py -W ignore 2>&1 \
        | grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Error" | tail -30 | tee "$out/bench-tests.log"
fi
