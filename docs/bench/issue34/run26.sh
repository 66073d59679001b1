#!/usr/bin/env bash
# Issue 34, run 26 on the lent GPU machine (repo root, .whl4 carried), after gpu-session.sh's tests, bench and
# quant parts on the same machine (so Triton's and inductor's caches and the kept matrix-vector choices exist):
# 1. the cold start with the tekken stand-in, warm then cold page cache (the kept choices taken);
# 2. the kept choices removed, one more cold start (the choice timed at load, as before e6e9e8b: the baseline);
# 3. eager_tails.py: what the prompt tails' segment graphs buy once recorded.
#   bash docs/bench/issue34/run26.sh OUT
set -u
out=${1:?usage: run26.sh OUT}
mkdir -p "$out"
COLD_S=${COLD_S:-200} COLD_RUNS=warm,cold bash docs/bench/desktops/gpu-session.sh "$out/kept" coldstart
kept=$(PYTHONPATH=/tmp/site python3 -c 'import platformdirs; print(platformdirs.user_state_dir("holodesk"))')/holotron-kernel-choices.json
ls -l "$kept" && cp "$kept" "$out/kernel-choices.json" && rm -f "$kept"
COLD_S=${COLD_S2:-90} COLD_RUNS=cold bash docs/bench/desktops/gpu-session.sh "$out/timed" coldstart
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
timeout "${TAILS_S:-200}" python3 docs/bench/issue34/eager_tails.py "$out/eager-tails.json" 2>&1 \
    | grep -v "Warning\|warn(" | cut -c1-600 | tee "$out/eager-tails.log"
